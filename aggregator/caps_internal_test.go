package aggregator

import (
	"encoding/json"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

// Each cap refuses the call over it with its own limit named, and holds
// nothing of the others then; what a call holds is given back whole.
func TestCaps(t *testing.T) {
	newCall := func(caller, method string) *schema.Call {
		return &schema.Call{Request: schema.Request{Method: method}, Caller: caller}
	}
	for _, tc := range []struct {
		name  string
		cfg   config
		held  []*schema.Call // taken first, in order
		call  *schema.Call
		limit string // of the refusal; "" admitted
	}{
		{name: "under every cap", cfg: config{maxInFlight: 2, callerMaxInFlight: 1},
			call: newCall("alice", "m")},
		{name: "global", cfg: config{maxInFlight: 1},
			held: []*schema.Call{newCall("", "m")}, call: newCall("", "n"), limit: "max_in_flight"},
		{name: "caller's share", cfg: config{maxInFlight: 10, callerMaxInFlight: 1},
			held: []*schema.Call{newCall("alice", "m")}, call: newCall("alice", "n"), limit: "caller_max_in_flight"},
		{name: "another caller's share is its own", cfg: config{maxInFlight: 10, callerMaxInFlight: 1},
			held: []*schema.Call{newCall("alice", "m")}, call: newCall("bob", "m")},
		{name: "the empty caller has the global cap alone", cfg: config{maxInFlight: 3, callerMaxInFlight: 1},
			held: []*schema.Call{newCall("", "m"), newCall("", "m")}, call: newCall("", "m")},
		{name: "method", cfg: config{maxInFlight: 10, methodInFlight: map[string]int{"m": 1}},
			held: []*schema.Call{newCall("", "m")}, call: newCall("", "m"), limit: "method_max_in_flight"},
		{name: "another method", cfg: config{maxInFlight: 10, methodInFlight: map[string]int{"m": 1}},
			held: []*schema.Call{newCall("", "m")}, call: newCall("", "n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newCaps(tc.cfg)
			hs := make([]held, len(tc.held))
			for i, c := range tc.held {
				if e := cs.take(c, &hs[i]); e != nil {
					t.Fatalf("setup: take(%s of %q) = %v", c.Method, c.Caller, e)
				}
			}
			var h held
			e := cs.take(tc.call, &h)
			if got := limitOf(t, e); got != tc.limit {
				t.Fatalf("take = %v, want limit %q", e, tc.limit)
			}
			if e != nil && h != (held{}) {
				t.Errorf("a refused call holds %+v, want nothing", h)
			}
			cs.give(&h)
			for i := range hs {
				cs.give(&hs[i])
			}
			if n := cs.global.n.Load(); n != 0 || len(cs.callers.held) != 0 {
				t.Errorf("after every call gave back: %d held globally, callers %v; want none", n, cs.callers.held)
			}
			for m, l := range cs.methods {
				if n := l.n.Load(); n != 0 {
					t.Errorf("after every call gave back: %d held of %s", n, m)
				}
			}
		})
	}
}

// limitOf returns the data.limit of e, "" for nil.
func limitOf(t *testing.T, e *schema.Error) string {
	t.Helper()
	if e == nil {
		return ""
	}
	if e.Code != schema.CodeOverloaded {
		t.Fatalf("refusal %v, want code %d", e, schema.CodeOverloaded)
	}
	var d struct {
		Limit string `json:"limit"`
	}
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d.Limit
}
