package ingress

import (
	"bytes"
	"encoding/json"

	"github.com/toolbus/toolbus/schema"
)

// readV1 rereads as JSON-RPC 1.0 requests the elements of a message that
// [schema.Parse] refused and that have no "jsonrpc" member; an element with
// a "jsonrpc" member other than "2.0" keeps its -32600. body has passed
// Parse, so it is valid JSON and elems has one entry per element.
//
// A 1.0 request has a "method" string, "params" that are an array, an
// object, null or absent, and an "id" that is a string, a number or null;
// null makes it a notification. Without an "id" it is an invalid request,
// since 1.0 has no such form. Whatever the outcome, the element is answered
// in 1.0 form.
func readV1(body []byte, batch bool, elems []element) {
	refused := false
	for _, el := range elems {
		refused = refused || el.err != nil
	}
	if !refused {
		return // every element has "jsonrpc": "2.0"
	}
	raws := []json.RawMessage{body}
	if batch {
		raws = nil
		if json.Unmarshal(body, &raws) != nil || len(raws) != len(elems) {
			return
		}
	}
	for i, raw := range raws {
		if elems[i].err == nil {
			continue
		}
		var members map[string]json.RawMessage
		if json.Unmarshal(raw, &members) != nil {
			continue // not an object: invalid in either version
		}
		if _, ok := members["jsonrpc"]; ok {
			continue
		}
		elems[i] = elementV1(members)
	}
}

var null = []byte("null")

func elementV1(m map[string]json.RawMessage) element {
	el := element{v1: true}
	id, ok := m["id"]
	switch {
	case !ok:
		el.err = schema.NewError(schema.CodeInvalidRequest,
			`invalid request: a JSON-RPC 1.0 request needs an "id" (null for a notification)`, nil)
		return el
	case bytes.Equal(id, null):
		// A notification in 1.0.
	case len(id) > 0 && (id[0] == '"' || id[0] == '-' || id[0] >= '0' && id[0] <= '9'):
		el.req.ID = id
	default:
		el.err = schema.NewError(schema.CodeInvalidRequest,
			"invalid request: id must be a string, a number or null", nil)
		return el
	}
	method, ok := m["method"]
	if !ok || len(method) == 0 || method[0] != '"' || json.Unmarshal(method, &el.req.Method) != nil {
		el.err = schema.NewError(schema.CodeInvalidRequest, `invalid request: "method" must be a string`, nil)
		return el
	}
	if params, ok := m["params"]; ok && !bytes.Equal(params, null) {
		if params[0] != '[' && params[0] != '{' {
			el.err = schema.NewError(schema.CodeInvalidRequest,
				`invalid request: "params" must be an array or an object`, nil)
			return el
		}
		el.req.Params = params
	}
	return el
}

// appendV1 appends the JSON-RPC 1.0 form of r to b: "result" and "error"
// both present, the one that does not apply null.
func appendV1(b []byte, r schema.Response) ([]byte, error) {
	b = append(b, `{"result":`...)
	if r.Error != nil || len(r.Result) == 0 {
		b = append(b, null...)
	} else {
		b = append(b, r.Result...)
	}
	b = append(b, `,"error":`...)
	if r.Error != nil {
		e, err := json.Marshal(r.Error)
		if err != nil {
			return nil, err
		}
		b = append(b, e...)
	} else {
		b = append(b, null...)
	}
	b = append(b, `,"id":`...)
	if len(r.ID) == 0 {
		b = append(b, null...)
	} else {
		b = append(b, r.ID...)
	}
	return append(b, '}'), nil
}
