package main

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/discovery"
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

// TestPrintToolsDropsControlCharacters: what workers announce reaches the
// operator's terminal without its control characters.
func TestPrintToolsDropsControlCharacters(t *testing.T) {
	var doc discovery.OpenRPC
	doc.Methods = []discovery.OpenRPCMethod{{Name: "evil", Description: "looks fine\x1b[2J\x1b[1;1Hforged\rline"}}
	doc.Problems = []discovery.Problem{{Kind: "conflict", Method: "evil", Workers: []string{"w\x1b]0;title\x07"}, Reason: "bad\x1b[31m"}}
	var out strings.Builder
	printTools(&out, doc)
	if strings.ContainsAny(out.String(), "\x1b\r\x07") {
		t.Errorf("printTools wrote %q, want no control characters", out.String())
	}
	if !strings.Contains(out.String(), "looks fine[2J[1;1Hforgedline") {
		t.Errorf("printTools wrote %q, want the description's printable text", out.String())
	}
}
