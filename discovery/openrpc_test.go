package discovery

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

func TestOpenRPCScope(t *testing.T) {
	r := newTestRegistry(t)
	r.Observe(ann("w1", echoTool, famTool, badSchema))
	tests := []struct {
		name     string
		scope    Scope
		methods  []string
		problems []string
	}{
		{"zero scope sees nothing", Scope{}, nil, nil},
		{"everything", Everything(), []string{"echo", "fam.*"}, []string{"bad.schema"}},
		{"one method", Scope{MayCall: func(n string) bool { return n == "echo" }}, []string{"echo"}, nil},
		{"operator of one method", Scope{MayCall: func(n string) bool { return n == "echo" }, AllProblems: true}, []string{"echo"}, []string{"bad.schema"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := r.OpenRPC(tt.scope)
			var methods, problems []string
			for _, m := range doc.Methods {
				methods = append(methods, m.Name)
			}
			for _, p := range doc.Problems {
				problems = append(problems, p.Method)
			}
			if !slices.Equal(methods, tt.methods) || !slices.Equal(problems, tt.problems) {
				t.Errorf("OpenRPC = %q %q, want %q %q", methods, problems, tt.methods, tt.problems)
			}
		})
	}
}

func TestDiscoverer(t *testing.T) {
	r := newTestRegistry(t)
	r.Observe(ann("w1", echoTool))
	d := Discoverer{Registry: r, Scope: func(context.Context) Scope { return Everything() }}

	b, e := d.ServeRPC(context.Background(), schema.Call{Request: schema.Request{Method: Method}})
	var doc OpenRPC
	if e != nil || json.Unmarshal(b, &doc) != nil || len(doc.Methods) != 1 {
		t.Errorf("ServeRPC(%s) = %s, %v; want a document of one method", Method, b, e)
	}
	if _, e := d.ServeRPC(context.Background(), schema.Call{Request: schema.Request{Method: Method + ".x"}}); e == nil || e.Code != schema.CodeMethodNotFound {
		t.Errorf("ServeRPC(%s.x) error = %v, want -32601", Method, e)
	}

	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openrpc.json", nil))
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &doc) != nil || len(doc.Methods) != 1 {
		t.Errorf("GET /openrpc.json = HTTP %d %s, want the document", rec.Code, rec.Body)
	}
}
