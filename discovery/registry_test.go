package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// ann returns an announcement of worker with the given tools (JSON).
func ann(worker string, tools ...string) []byte {
	return fmt.Appendf(nil, `{"v":1,"worker":%q,"interval_ms":1000,"tools":[%s]}`, worker, strings.Join(tools, ","))
}

func leave(worker string) []byte {
	return fmt.Appendf(nil, `{"v":1,"worker":%q,"interval_ms":1000,"leaving":true,"tools":[]}`, worker)
}

const (
	addTool   = `{"name":"math.add","params":{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}}`
	addOther  = `{"name":"math.add","params":{"type":"array"}}`
	echoTool  = `{"name":"echo"}`
	famTool   = `{"name":"fam.*","params":{"type":"object","required":["x"]}}`
	badSchema = `{"name":"bad.schema","params":{"type":12}}`
	badName   = `{"name":"no spaces"}`
)

var discard = slog.New(slog.DiscardHandler)

func newTestRegistry(t *testing.T) *Registry {
	t.Helper()
	r, err := New(WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func summary(c Catalog) (tools, problems []string) {
	for _, t := range c.Tools {
		s := fmt.Sprintf("%s/%d", t.Name, t.Workers)
		if t.Conflict {
			s += "/conflict"
		}
		tools = append(tools, s)
	}
	for _, p := range c.Problems {
		problems = append(problems, p.Kind+":"+p.Method)
	}
	return tools, problems
}

func TestRegistryObserve(t *testing.T) {
	tests := []struct {
		name         string
		msgs         [][]byte
		wantTools    []string
		wantProblems []string
	}{
		{"one worker", [][]byte{ann("w1", addTool, echoTool)}, []string{"echo/1", "math.add/1"}, nil},
		{"two workers agree", [][]byte{ann("w1", addTool), ann("w2", addTool)}, []string{"math.add/2"}, nil},
		{"re-announcing counts once", [][]byte{ann("w1", addTool), ann("w1", addTool)}, []string{"math.add/1"}, nil},
		{"a worker that leaves goes", [][]byte{ann("w1", addTool), ann("w2", echoTool), leave("w1")}, []string{"echo/1"}, nil},
		{"broken descriptors hide nothing else", [][]byte{ann("w1", badSchema, badName, echoTool)},
			[]string{"echo/1"}, []string{"broken:bad.schema", "broken:no spaces"}},
		{"disagreeing workers are reported", [][]byte{ann("w1", addTool), ann("w2", addTool), ann("w3", addOther)},
			[]string{"math.add/3/conflict"}, []string{"conflict:math.add"}},
		{"garbage is ignored", [][]byte{[]byte("nope"), []byte(`{"v":2,"worker":"x","interval_ms":1}`), ann("w1", echoTool)},
			[]string{"echo/1"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRegistry(t)
			for _, m := range tt.msgs {
				r.Observe(m)
			}
			gotTools, gotProblems := summary(r.Catalog())
			if !slices.Equal(gotTools, tt.wantTools) || !slices.Equal(gotProblems, tt.wantProblems) {
				t.Errorf("catalog = %v %v, want %v %v", gotTools, gotProblems, tt.wantTools, tt.wantProblems)
			}
		})
	}
}

func TestRegistryForgetsSilentWorkers(t *testing.T) {
	r := newTestRegistry(t)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	changes := make(chan struct{}, 10)
	defer r.Watch(func() { changes <- struct{}{} })()

	r.Observe(ann("w1", addTool))
	now = now.Add(2 * time.Second)
	r.Observe(ann("w2", echoTool))
	r.expire(now.Add(1500 * time.Millisecond)) // w1 is 3.5 intervals silent, w2 1.5
	gotTools, _ := summary(r.Catalog())
	if want := []string{"echo/1"}; !slices.Equal(gotTools, want) {
		t.Errorf("after expiry: %v, want %v", gotTools, want)
	}
	if got := len(changes); got != 3 {
		t.Errorf("watchers told %d times, want 3 (two joins, one expiry)", got)
	}
	if !r.Known("math.add") || r.Known("math.sub") {
		t.Errorf("Known(math.add), Known(math.sub) = %v, %v; want true, false", r.Known("math.add"), r.Known("math.sub"))
	}
}

func TestRegistryLookupPatterns(t *testing.T) {
	r := newTestRegistry(t)
	r.Observe(ann("w1", famTool, echoTool))
	tests := []struct {
		method string
		want   string
	}{
		{"echo", "echo"},
		{"fam.one", "fam.*"},
		{"fam.one.two", ""},
		{"other", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			got, ok := r.Lookup(tt.method)
			if got.Name != tt.want || ok != (tt.want != "") {
				t.Errorf("Lookup(%q) = %q, %v; want %q", tt.method, got.Name, ok, tt.want)
			}
		})
	}
}

// noResponders answers every call as the aggregator does when no worker
// is subscribed, and records what it was given.
type noResponders struct{ got []schema.Call }

func (d *noResponders) Dispatch(_ context.Context, calls []schema.Call, emit func(int, schema.Response)) {
	d.got = append(d.got, calls...)
	for i, c := range calls {
		if c.Method == "echo" {
			emit(i, schema.Response{ID: c.ID, Result: c.Params})
			continue
		}
		emit(i, schema.Response{ID: c.ID, Error: schema.NewError(schema.CodeMethodNotFound, "method not found",
			map[string]any{"reason": "no_responders", "method": c.Method})})
	}
}

func TestLayer(t *testing.T) {
	r := newTestRegistry(t)
	r.Observe(ann("w1", addTool, `{"name":"echo","timeout_ms":250}`, famTool))
	r.Observe(ann("w2", `{"name":"gone"}`))
	r.Observe(leave("w2"))
	tests := []struct {
		name      string
		validate  bool
		method    string
		params    string
		wantErr   *schema.Error
		wantField string
	}{
		{"valid params pass", true, "math.add", `{"a":1}`, schema.ErrUnavailable, ""},
		{"absent params are not checked", true, "math.add", ``, schema.ErrUnavailable, ""},
		{"wrong type", true, "math.add", `{"a":"x"}`, schema.ErrInvalidParams, "/a"},
		{"extra member", true, "math.add", `{"a":1,"z":2}`, schema.ErrInvalidParams, "/z"},
		{"pattern's schema applies", true, "fam.x", `{}`, schema.ErrInvalidParams, "/x"},
		{"validation off", false, "math.add", `{"a":"x"}`, schema.ErrUnavailable, ""},
		{"gone method is unavailable", true, "gone", `{}`, schema.ErrUnavailable, ""},
		{"unknown method stays not found", true, "never", `{}`, schema.ErrMethodNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &noResponders{}
			g := Layer(r, tt.validate)(d)
			c := schema.Call{Request: schema.Request{ID: json.RawMessage("7"), Method: tt.method}}
			if tt.params != "" {
				c.Params = json.RawMessage(tt.params)
			}
			resp := schema.Collect(context.Background(), g, []schema.Call{c})[0]
			if !errors.Is(resp.Error, tt.wantErr) {
				t.Fatalf("%s(%s) = %v, want code %d", tt.method, tt.params, resp.Error, tt.wantErr.Code)
			}
			if string(resp.ID) != "7" {
				t.Errorf("id = %s, want 7", resp.ID)
			}
			if tt.wantErr == schema.ErrInvalidParams {
				if len(d.got) != 0 {
					t.Errorf("an invalid call was dispatched: %v", d.got)
				}
				var data struct{ Field, Reason string }
				if err := json.Unmarshal(resp.Error.Data, &data); err != nil || data.Reason == "" || (tt.wantField != "" && data.Field != tt.wantField) {
					t.Errorf("data = %s, want field %q and a reason", resp.Error.Data, tt.wantField)
				}
			}
		})
	}
	t.Run("advertised timeout bounds the deadline", func(t *testing.T) {
		d := &noResponders{}
		g := Layer(r, true)(d)
		calls := []schema.Call{
			{Request: schema.Request{ID: json.RawMessage("1"), Method: "echo", Params: json.RawMessage(`1`)}},
			{Request: schema.Request{ID: json.RawMessage("2"), Method: "echo", Params: json.RawMessage(`2`)}, Timeout: 100 * time.Millisecond},
		}
		schema.Collect(context.Background(), g, calls)
		got := []time.Duration{d.got[0].Timeout, d.got[1].Timeout}
		if want := []time.Duration{250 * time.Millisecond, 100 * time.Millisecond}; !slices.Equal(got, want) {
			t.Errorf("timeouts = %v, want %v", got, want)
		}
	})
}

func TestParamDescriptors(t *testing.T) {
	tests := []struct {
		name          string
		schema        string
		wantStructure string
		wantNames     []string
	}{
		{"none", ``, "either", nil},
		{"object", `{"type":"object","required":["b"],"properties":{"b":{},"a":{}}}`, "by-name", []string{"a", "b!"}},
		{"array", `{"type":"array","prefixItems":[{"type":"integer"},{}]}`, "by-position", []string{"param0!", "param1!"}},
		{"anything else", `{"oneOf":[{}]}`, "either", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			structure, params := paramDescriptors(json.RawMessage(tt.schema))
			var names []string
			for _, p := range params {
				n := p.Name
				if p.Required {
					n += "!"
				}
				names = append(names, n)
			}
			if structure != tt.wantStructure || !slices.Equal(names, tt.wantNames) {
				t.Errorf("paramDescriptors(%s) = %s %v, want %s %v", tt.schema, structure, names, tt.wantStructure, tt.wantNames)
			}
		})
	}
}
