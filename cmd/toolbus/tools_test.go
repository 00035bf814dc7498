package main

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

func TestToolsCommand(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithTools(func(rt *worker.Runtime) error {
		return rt.Handle("math.add", worker.Typed(func(_ context.Context, p struct {
			A int `json:"a"`
		}) (int, error) {
			return p.A, nil
		}), worker.Describe(schema.Descriptor{Description: "adds"}))
	}))
	toolbustest.Eventually(t, func() bool { _, ok := c.Registry.Lookup("math.add"); return ok }, "math.add is in the registry")
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr bool
	}{
		{"list", []string{"tools", "--url", c.URL}, []string{"METHOD", "math.add", "1", "a:integer", "adds"}, false},
		{"show", []string{"tools", "show", "--url", c.URL, "math.add"}, []string{`"name": "math.add"`, `"workers": 1`}, false},
		{"show of an unknown method", []string{"tools", "show", "--url", c.URL, "nope"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := execute(t, context.Background(), tt.args...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("%v = %v, want error %v; output:\n%s", tt.args, err, tt.wantErr, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("%v printed:\n%s\nwant %q in it", tt.args, out, w)
				}
			}
		})
	}
}
