package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// call is one request of a message and, once the message is answered, its
// outcome: a result or an error. A notification has no id; its error, nil
// once it is sent, says whether it was delivered.
type call struct {
	id      string
	method  string
	params  json.RawMessage
	timeout time.Duration
	result  json.RawMessage
	err     error
}

// set gives the call the outcome of its response.
func (c *call) set(r schema.Response) {
	c.result, c.err = nil, nil
	switch {
	case r.Error != nil && r.Result != nil:
		c.err = fmt.Errorf("%w: response %s has both result and error", ErrInvalidResponse, r.ID)
	case r.Error != nil:
		c.err = r.Error
	case r.Result == nil:
		c.err = fmt.Errorf("%w: response %s has neither result nor error", ErrInvalidResponse, r.ID)
	default:
		c.result = r.Result
	}
}

// decode decodes the call's result into v: nil ignores it, and a
// *json.RawMessage gets the raw bytes.
func (c *call) decode(v any) error {
	if c.err != nil {
		return c.err
	}
	switch v := v.(type) {
	case nil:
		return nil
	case *json.RawMessage:
		*v = bytes.Clone(c.result)
		return nil
	}
	if err := json.Unmarshal(c.result, v); err != nil {
		return fmt.Errorf("client: decoding the result of %s: %w", c.method, err)
	}
	return nil
}

// message is what a transport sends: one JSON-RPC message, single or
// batch.
type message struct {
	body []byte
	// ids are the ids of its calls; a message without ids holds only
	// notifications and has no answer.
	ids []string
	// timeout is sent as the Toolbus-Timeout header when positive.
	timeout time.Duration
}

// wireRequest is a request as it is written.
type wireRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
	ID      string          `json:"id,omitempty"`
}

// encode builds the message of calls: a single request object, or an array
// when batch is set.
func encode(calls []*call, batch bool, timeout time.Duration) (*message, error) {
	m := &message{timeout: timeout}
	reqs := make([]wireRequest, len(calls))
	for i, c := range calls {
		reqs[i] = wireRequest{JSONRPC: schema.Version, Method: c.method, Params: c.params, ID: c.id}
		if c.id != "" {
			m.ids = append(m.ids, c.id)
		}
	}
	var err error
	if batch {
		m.body, err = json.Marshal(reqs)
	} else {
		m.body, err = json.Marshal(reqs[0])
	}
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	return m, nil
}

// marshalParams encodes params: nil (or anything that encodes as null)
// leaves them out, a json.RawMessage is used as it is, and whatever else
// must encode as a JSON object or array, as JSON-RPC 2.0 requires.
func marshalParams(params any) (json.RawMessage, error) {
	if params == nil {
		return nil, nil
	}
	var raw []byte
	if r, ok := params.(json.RawMessage); ok {
		if !json.Valid(r) {
			return nil, errors.New("client: params are not valid JSON")
		}
		raw = r
	} else {
		var err error
		if raw, err = json.Marshal(params); err != nil {
			return nil, fmt.Errorf("client: encoding params: %w", err)
		}
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case string(raw) == "null":
		return nil, nil
	case raw[0] != '{' && raw[0] != '[':
		return nil, fmt.Errorf("client: params must encode as a JSON object or array, got %.40s", raw)
	}
	return bytes.Clone(raw), nil
}

// decodeAnswer reads an answer as JSON-RPC 2.0: one response object, or a
// non-empty array of them, each with "jsonrpc": "2.0". Anything else is
// [ErrInvalidResponse]. Whether a response has a result or an error is
// judged later, for its call alone.
func decodeAnswer(data []byte) ([]schema.Response, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty body", ErrInvalidResponse)
	}
	var raws []json.RawMessage
	switch data[0] {
	case '{':
		raws = []json.RawMessage{data}
	case '[':
		if err := json.Unmarshal(data, &raws); err != nil || len(raws) == 0 {
			return nil, fmt.Errorf("%w: not an array of responses: %s", ErrInvalidResponse, snippet(data))
		}
	default:
		return nil, fmt.Errorf("%w: not JSON-RPC: %s", ErrInvalidResponse, snippet(data))
	}
	rs := make([]schema.Response, len(raws))
	for i, raw := range raws {
		var head struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if err := json.Unmarshal(raw, &head); err != nil || head.JSONRPC != schema.Version {
			return nil, fmt.Errorf("%w: not a JSON-RPC 2.0 response: %s", ErrInvalidResponse, snippet(raw))
		}
		if err := rs[i].UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("%w: %w: %s", ErrInvalidResponse, err, snippet(raw))
		}
	}
	return rs, nil
}

// snippet quotes the start of a body for an error message.
func snippet(b []byte) string {
	const n = 120
	if len(b) > n {
		return fmt.Sprintf("%q...", b[:n])
	}
	return fmt.Sprintf("%q", b)
}

// match gives every call of a message its outcome from the responses of
// its answer, by id, whatever their order. A call no response names gets
// [ErrMissingResponse]; a response with a null id and an error answers the
// message as a whole (the server could not read it) and becomes the
// outcome of every call without a response of its own, and is returned as
// whole. Responses with ids the message did not have, and ids answered
// twice, are returned as problems.
func match(calls []*call, rs []schema.Response) (whole *schema.Error, problems error) {
	byID := make(map[string]*call, len(calls))
	for _, c := range calls {
		if c.id != "" {
			byID[c.id] = c
		}
	}
	seen := make(map[string]bool, len(byID))
	var errs []error
	for _, r := range rs {
		if len(r.ID) == 0 || string(r.ID) == "null" {
			if r.Error != nil && whole == nil {
				whole = r.Error
				continue
			}
			errs = append(errs, fmt.Errorf("%w: null", ErrUnknownResponse))
			continue
		}
		var id string
		c := (*call)(nil)
		if json.Unmarshal(r.ID, &id) == nil {
			c = byID[id]
		}
		switch {
		case c == nil:
			errs = append(errs, fmt.Errorf("%w: %s", ErrUnknownResponse, r.ID))
		case seen[id]:
			c.result, c.err = nil, fmt.Errorf("%w: %s (%s)", ErrDuplicateResponse, r.ID, c.method)
			errs = append(errs, c.err)
		default:
			seen[id] = true
			c.set(r)
		}
	}
	for _, c := range calls {
		switch {
		case c.id != "" && seen[c.id]:
		case whole != nil:
			c.result, c.err = nil, whole
		case c.id != "":
			c.result, c.err = nil, fmt.Errorf("%w: id %q (%s)", ErrMissingResponse, c.id, c.method)
		default:
			c.err = nil
		}
	}
	return whole, errors.Join(errs...)
}
