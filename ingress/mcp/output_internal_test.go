package mcp

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestOutputSchema(t *testing.T) {
	tests := []struct {
		name     string
		result   string
		want     string
		wantWrap bool
	}{
		{name: "none", result: ``, want: `null`},
		{name: "object", result: `{"type":"object","properties":{"n":{"type":"integer"}}}`,
			want: `{"properties":{"n":{"type":"integer"}},"type":"object"}`},
		{name: "number", result: `{"type":"number"}`,
			want: `{"properties":{"result":{"type":"number"}},"required":["result"],"type":"object"}`, wantWrap: true},
		{name: "object or null", result: `{"type":["null","object"]}`,
			want: `{"properties":{"result":{"type":["null","object"]}},"required":["result"],"type":"object"}`, wantWrap: true},
		{name: "any value", result: `true`,
			want: `{"properties":{"result":true},"required":["result"],"type":"object"}`, wantWrap: true},
		{name: "definitions move up", result: `{"$schema":"https://json-schema.org/draft/2020-12/schema","$ref":"#/$defs/n","$defs":{"n":{"type":"integer"}}}`,
			want: `{"$defs":{"n":{"type":"integer"}},"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"result":{"$ref":"#/$defs/n"}},"required":["result"],"type":"object"}`, wantWrap: true},
		{name: "not JSON", result: `{`, want: `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, wrap := outputSchema(json.RawMessage(tt.result))
			got, _ := json.Marshal(out)
			if string(got) != tt.want || wrap != tt.wantWrap {
				t.Errorf("outputSchema(%s) = %s, %v; want %s, %v", tt.result, got, wrap, tt.want, tt.wantWrap)
			}
		})
	}
}

func TestSuccess(t *testing.T) {
	tests := []struct {
		name        string
		result      string
		wrap        bool
		want        string
		wantWrapped bool
	}{
		{name: "object", result: `{"a":1}`, want: `{"a":1}`},
		{name: "object under a wrapping schema", result: `{"a":1}`, wrap: true, want: `{"result":{"a":1}}`, wantWrapped: true},
		{name: "number", result: `7`, want: `{"result":7}`, wantWrapped: true},
		{name: "array", result: ` ["hello",5]`, want: `{"result":["hello",5]}`, wantWrapped: true},
		{name: "null", result: `null`, want: `{"result":null}`, wantWrapped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := success(json.RawMessage(tt.result), tt.wrap)
			got, _ := json.Marshal(res.StructuredContent)
			if string(got) != tt.want || (res.Meta[metaWrapped] == true) != tt.wantWrapped {
				t.Errorf("success(%s, %v) = %s meta %v; want %s, wrapped %v", tt.result, tt.wrap, got, res.Meta, tt.want, tt.wantWrapped)
			}
			if text, ok := res.Content[0].(*mcp.TextContent); !ok || text.Text != tt.result {
				t.Errorf("text content = %v, want the result's JSON %s", res.Content[0], tt.result)
			}
		})
	}
}
