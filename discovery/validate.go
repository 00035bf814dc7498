package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/toolbus/toolbus/schema"
)

// Layer returns the dispatcher layer of discovery, or nil when reg is nil
// (which [schema.Chain] skips). Before any worker runs a call it checks the
// params against reg's schema of the method, when validate is set, and
// shortens the call's deadline to the method's advertised timeout; after,
// it turns "no worker serves it" into -32003 (unavailable, retryable) for
// a method reg knows ([Registry.Known]), so that an agent can tell a
// method that is down from one that does not exist, and adds to the
// -32601 of a method reg does not know that rpc.discover lists the
// methods the caller may call. Params that do not fit are
// answered -32602 with data {"field": JSON pointer, "reason", "method",
// "source": "schema"} and never reach a worker.
func Layer(reg *Registry, validate bool) schema.Layer {
	if reg == nil {
		return nil
	}
	return func(next schema.Dispatcher) schema.Dispatcher {
		return &layer{next: next, reg: reg, validate: validate}
	}
}

// layer is the dispatcher [Layer] puts in front of next.
type layer struct {
	next     schema.Dispatcher
	reg      *Registry
	validate bool
}

// Dispatch implements [schema.Dispatcher]. Refused calls are answered
// before the others are handed on, from the caller's goroutine.
func (g *layer) Dispatch(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
	pass := schema.Subset{Calls: make([]schema.Call, 0, len(calls))}
	for i, c := range calls {
		if !schema.IsReserved(c.Method) {
			if t, ok := g.reg.Lookup(c.Method); ok {
				if g.validate {
					if e := checkParams(t, c.Params); e != nil {
						if !c.IsNotification() {
							emit(i, schema.Response{ID: c.ID, Error: e})
						}
						continue
					}
				}
				if d := time.Duration(t.TimeoutMS) * time.Millisecond; d > 0 && (c.Timeout <= 0 || d < c.Timeout) {
					c.Timeout = d
				}
			}
		}
		pass.Add(i, c)
	}
	pass.Dispatch(ctx, g.next, func(i int, r schema.Response) {
		if i >= 0 && r.Error != nil && isNoResponders(r.Error) {
			if g.reg.Known(calls[i].Method) {
				r.Error = unavailableMethod(calls[i].Method)
			} else {
				r.Error = withDiscoverHint(r.Error)
			}
		}
		emit(i, r)
	})
}

// discoverHint ends the message of every -32601 for a method discovery
// does not know, on every door (a call, a job's submit): where an agent
// finds the names it may use.
const discoverHint = "check the name (rpc.discover lists the methods you may call), or start a worker that serves it"

// withDiscoverHint returns a copy of e, a -32601 for a method nobody
// announced, whose message says how to find the right name. Its code and
// data are e's.
func withDiscoverHint(e *schema.Error) *schema.Error {
	return &schema.Error{Code: e.Code, Message: e.Message + "; " + discoverHint, Data: e.Data}
}

// isNoResponders reports whether e is the dispatcher's answer for a call
// no worker was subscribed to.
func isNoResponders(e *schema.Error) bool {
	return e.Code == schema.CodeMethodNotFound && e.Reason() == schema.ReasonNoResponders
}

func unavailableMethod(method string) *schema.Error {
	return schema.NewError(schema.CodeUnavailable, "unavailable: no worker serves "+method+" now",
		map[string]any{"retryable": true, "retry_after_ms": 1000, "reason": schema.ReasonNoWorkers, "method": method})
}

// checkParams validates params against t's schema, the one in force.
// Absent params are not checked: JSON-RPC lets a call leave them out, and
// the tool decides what that means. A tool whose workers disagree on the
// schema is checked all the same: a newcomer's descriptor never switches
// validation off (see [Registry]). The door the call came in by checked
// that the params are JSON (schema/PROTOCOL.md, "Where the JSON is
// checked"); they are decoded here for the schema alone, and only for a
// tool that has one.
func checkParams(t Tool, params json.RawMessage) *schema.Error {
	if t.params == nil || len(bytes.TrimSpace(params)) == 0 {
		return nil
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(params))
	if err != nil {
		return invalidParams(t.Name, "", "params are not valid JSON")
	}
	err = t.params.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return invalidParams(t.Name, "", err.Error())
	}
	field, reason := firstFailure(ve)
	return invalidParams(t.Name, field, reason)
}

func invalidParams(method, field, reason string) *schema.Error {
	msg := "invalid params: " + reason
	if field != "" {
		msg = "invalid params: " + field + ": " + reason
	}
	return schema.NewError(schema.CodeInvalidParams, msg,
		map[string]any{"field": field, "reason": reason, "method": method, "source": "schema"})
}

// firstFailure returns the JSON pointer of the deepest value that failed
// and why: the most precise of the schema's complaints.
func firstFailure(ve *jsonschema.ValidationError) (field, reason string) {
	out := ve.BasicOutput()
	best := -1
	for i, u := range out.Errors {
		if u.Error == nil {
			continue
		}
		if best < 0 || depthOf(u.InstanceLocation) > depthOf(out.Errors[best].InstanceLocation) {
			best = i
		}
	}
	switch {
	case best >= 0:
		u := out.Errors[best]
		return memberOf(u.InstanceLocation, u.Error.Kind), u.Error.String()
	case out.Error != nil:
		return out.InstanceLocation, out.Error.String()
	}
	return "", "params do not match the method's schema"
}

func depthOf(pointer string) int { return strings.Count(pointer, "/") }

// memberOf returns the pointer of the member an error is about when the
// error names it (one that is missing or not allowed), else the pointer
// of the value that failed.
func memberOf(pointer string, k jsonschema.ErrorKind) string {
	var names []string
	switch k := k.(type) {
	case *kind.Required:
		names = k.Missing
	case *kind.AdditionalProperties:
		names = k.Properties
	}
	if len(names) == 0 {
		return pointer
	}
	return pointer + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(names[0])
}
