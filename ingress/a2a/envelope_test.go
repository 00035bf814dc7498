package a2a_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	toolbusa2a "github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/door"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// open starts a cluster with jobs, discovery and the A2A front door
// without authentication, with the tools of [tools] and echo as the text
// method.
func open(t *testing.T) *toolbustest.Cluster {
	t.Helper()
	g := newGate()
	t.Cleanup(g.open)
	c := toolbustest.Start(t, toolbustest.WithTools(tools(g)), toolbustest.WithJobs(), toolbustest.WithDiscovery(),
		toolbustest.WithA2A(), toolbustest.WithGateway(func(c *node.GatewayConfig) { c.A2A.TextMethod = "echo" }))
	waitForTools(t, c, "echo", "slow", "fail")
	return c
}

// answer is a JSON-RPC answer of /a2a as the client reads it.
type answer struct {
	ID    json.RawMessage `json:"id"`
	Error *struct {
		Code int `json:"code"`
		Data struct {
			Error string  `json:"error"`
			Field *string `json:"field"`
		} `json:"data"`
	} `json:"error"`
	Result json.RawMessage `json:"result"`
}

// postRaw posts body to /a2a and returns the HTTP status and the answer.
func postRaw(t *testing.T, c *toolbustest.Cluster, body string, header ...string) (int, []byte) {
	t.Helper()
	return c.PostURL(t, c.BaseURL+toolbusa2a.Path, body, header...)
}

// send returns a message/send request of id with the message msg.
func sendBody(id, msg string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"message/send","params":{"message":` + msg + `}}`
}

// TestEnvelope checks, over HTTP, that /a2a refuses what POST /rpc refuses
// with the same codes, before the SDK reads it, and answers with the
// request's id whenever the id itself is valid: a missing or non-string
// method and a wrong jsonrpc are -32600, an id that is an object -32600
// with a null id, bytes that are not JSON -32700; params that do not fit
// the method are -32602 naming the member in data.field.
func TestEnvelope(t *testing.T) {
	c := open(t)
	const okMessage = `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}`
	for _, tc := range []struct {
		name  string
		body  string
		code  int
		id    string
		field string // the JSON pointer data.field names; "-" when it has none
	}{
		{name: "no method", body: `{"jsonrpc":"2.0","id":7,"params":{}}`, code: -32600, id: `7`, field: "-"},
		{name: "method not a string", body: `{"jsonrpc":"2.0","id":"a","method":5}`, code: -32600, id: `"a"`, field: "-"},
		{name: "method null", body: `{"jsonrpc":"2.0","id":"b","method":null}`, code: -32600, id: `"b"`, field: "-"},
		{name: "id an object", body: `{"jsonrpc":"2.0","id":{"x":1},"method":"tasks/get","params":{"id":"x"}}`, code: -32600, id: `null`, field: "-"},
		{name: "id an array", body: `{"jsonrpc":"2.0","id":[1],"method":"tasks/get","params":{"id":"x"}}`, code: -32600, id: `null`, field: "-"},
		{name: "wrong jsonrpc", body: `{"jsonrpc":"1.0","id":9,"method":"tasks/get","params":{"id":"x"}}`, code: -32600, id: `9`, field: "-"},
		{name: "no jsonrpc", body: `{"id":"v","method":"tasks/get","params":{"id":"x"}}`, code: -32600, id: `"v"`, field: "-"},
		{name: "params a string", body: `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":"x"}`, code: -32600, id: `3`, field: "-"},
		{name: "not JSON", body: `{"jsonrpc":"2.0","id":1,"method":`, code: -32700, id: `null`, field: "-"},
		{name: "not an object", body: `"tasks/get"`, code: -32600, id: `null`, field: "-"},
		{name: "empty batch", body: `[]`, code: -32600, id: `null`, field: "-"},
		{name: "unknown method keeps a long id", body: `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tasks/nothing"}`,
			code: -32601, id: `12345678901234567890`, field: "-"},
		{name: "params an array", body: `{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":["x"]}`, code: -32602, id: `4`, field: ""},
		{name: "tasks/get without params", body: `{"jsonrpc":"2.0","id":5,"method":"tasks/get"}`, code: -32602, id: `5`, field: "/id"},
		{name: "task id a number", body: `{"jsonrpc":"2.0","id":6,"method":"tasks/cancel","params":{"id":6}}`, code: -32602, id: `6`, field: "/id"},
		{name: "parts not an array", body: sendBody(`"p"`, `{"kind":"message","messageId":"m1","role":"user","parts":"x"}`),
			code: -32602, id: `"p"`, field: "/message/parts"},
		{name: "part of unknown kind", body: sendBody(`"k"`, `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"a"},{"kind":"video","url":"x"}]}`),
			code: -32602, id: `"k"`, field: "/message/parts/1/kind"},
		{name: "part without kind", body: sendBody(`"n"`, `{"kind":"message","messageId":"m1","role":"user","parts":[{"text":"a"}]}`),
			code: -32602, id: `"n"`, field: "/message/parts/0/kind"},
		{name: "text part without text", body: sendBody(`1`, `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text"}]}`),
			code: -32602, id: `1`, field: "/message/parts/0/text"},
		{name: "data part of an array", body: sendBody(`2`, `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"data","data":[1]}]}`),
			code: -32602, id: `2`, field: "/message/parts/0/data"},
		{name: "file part with bytes and uri", body: sendBody(`3`, `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"file","file":{"bytes":"YQ==","uri":"https://example.com/a"}}]}`),
			code: -32602, id: `3`, field: "/message/parts/0/file"},
		{name: "no messageId", body: sendBody(`"m"`, `{"kind":"message","role":"user","parts":[{"kind":"text","text":"hi"}]}`),
			code: -32602, id: `"m"`, field: "/message/messageId"},
		{name: "empty messageId", body: sendBody(`"e"`, `{"kind":"message","messageId":"","role":"user","parts":[{"kind":"text","text":"hi"}]}`),
			code: -32602, id: `"e"`, field: "/message/messageId"},
		{name: "no role", body: sendBody(`"r"`, `{"kind":"message","messageId":"m1","parts":[{"kind":"text","text":"hi"}]}`),
			code: -32602, id: `"r"`, field: "/message/role"},
		{name: "unknown role", body: sendBody(`"s"`, `{"kind":"message","messageId":"m1","role":"system","parts":[{"kind":"text","text":"hi"}]}`),
			code: -32602, id: `"s"`, field: "/message/role"},
		{name: "wrong message kind", body: sendBody(`"w"`, `{"kind":"task","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}`),
			code: -32602, id: `"w"`, field: "/message/kind"},
		{name: "no message", body: `{"jsonrpc":"2.0","id":8,"method":"message/stream","params":{}}`, code: -32602, id: `8`, field: "/message"},
		{name: "referenceTaskIds of numbers", body: sendBody(`9`, `{"kind":"message","messageId":"m1","role":"user","referenceTaskIds":[1],"parts":[{"kind":"text","text":"hi"}]}`),
			code: -32602, id: `9`, field: "/message/referenceTaskIds/0"},
		{name: "negative historyLength", body: `{"jsonrpc":"2.0","id":10,"method":"message/send","params":{"message":` + okMessage + `,"configuration":{"historyLength":-1}}}`,
			code: -32602, id: `10`, field: "/configuration/historyLength"},
		{name: "fractional historyLength", body: `{"jsonrpc":"2.0","id":11,"method":"tasks/get","params":{"id":"x","historyLength":1.5}}`,
			code: -32602, id: `11`, field: "/historyLength"},
		{name: "historyLength a string", body: `{"jsonrpc":"2.0","id":12,"method":"tasks/get","params":{"id":"x","historyLength":"2"}}`,
			code: -32602, id: `12`, field: "/historyLength"},
		{name: "blocking a string", body: `{"jsonrpc":"2.0","id":13,"method":"message/send","params":{"message":` + okMessage + `,"configuration":{"blocking":"no"}}}`,
			code: -32602, id: `13`, field: "/configuration/blocking"},
		{name: "push config without url", body: `{"jsonrpc":"2.0","id":14,"method":"tasks/pushNotificationConfig/set","params":{"taskId":"t","pushNotificationConfig":{}}}`,
			code: -32602, id: `14`, field: "/pushNotificationConfig/url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := postRaw(t, c, tc.body)
			var a answer
			if err := json.Unmarshal(b, &a); err != nil || status != http.StatusOK {
				t.Fatalf("POST /a2a %s = %d %s, want 200 with one JSON-RPC answer", tc.body, status, b)
			}
			if a.Error == nil || a.Error.Code != tc.code || string(a.ID) != tc.id {
				t.Fatalf("POST /a2a %s = %s, want error %d with id %s", tc.body, b, tc.code, tc.id)
			}
			if a.Error.Data.Error == "" {
				t.Errorf("POST /a2a %s = %s, want data.error to say why", tc.body, b)
			}
			switch {
			case tc.field == "-" && a.Error.Data.Field != nil:
				t.Errorf("POST /a2a %s = %s, want no data.field", tc.body, b)
			case tc.field != "-" && (a.Error.Data.Field == nil || *a.Error.Data.Field != tc.field):
				t.Errorf("POST /a2a %s = %s, want data.field %q", tc.body, b, tc.field)
			}
		})
	}
}

// TestEnvelopeAccepts checks that what A2A 0.3 allows passes the checks:
// a message without kind, null for optional members, historyLength 0, and
// ids of every JSON-RPC kind echoed as they were written.
func TestEnvelopeAccepts(t *testing.T) {
	c := open(t)
	for _, tc := range []struct {
		name, body, id string
	}{
		{name: "message without kind", id: `"x"`,
			body: `{"jsonrpc":"2.0","id":"x","method":"message/send","params":{"message":{"messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`},
		{name: "nulls for optional members", id: `1.50`,
			body: `{"jsonrpc":"2.0","id":1.50,"method":"message/send","params":{"configuration":null,"metadata":null,"message":{"kind":"message","messageId":"m2","role":"user","contextId":null,"parts":[{"kind":"data","data":{"method":"echo","params":{"a":1}},"metadata":null}]}}}`},
		{name: "historyLength 0 and a null id", id: `null`,
			body: `{"jsonrpc":"2.0","id":null,"method":"message/send","params":{"configuration":{"historyLength":0,"blocking":true},"message":{"kind":"message","messageId":"m3","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := postRaw(t, c, tc.body)
			var a answer
			if err := json.Unmarshal(b, &a); err != nil || status != http.StatusOK || a.Error != nil || len(a.Result) == 0 || string(a.ID) != tc.id {
				t.Fatalf("POST /a2a %s = %d %s, want a result with id %s", tc.body, status, b, tc.id)
			}
		})
	}
}

// TestBatchAndNotification checks what /a2a does with a batch (each
// request -32600 with its id, an invalid element with its own error, a
// notification nothing; 204 when nothing is left to answer) and with a
// notification alone (it runs, and the answer is 204 with no body; with
// params that do not fit it does not run).
func TestBatchAndNotification(t *testing.T) {
	c := open(t)
	t.Run("batch", func(t *testing.T) {
		status, b := postRaw(t, c, `[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"x"}},`+
			`{"jsonrpc":"2.0","method":"tasks/get","params":{"id":"x"}},5,{"jsonrpc":"2.0","id":"two","method":"tasks/get","params":{"id":"x"}}]`)
		var got []answer
		if err := json.Unmarshal(b, &got); err != nil || status != http.StatusOK {
			t.Fatalf("POST /a2a of a batch = %d %s, want 200 with an array", status, b)
		}
		var ids []string
		for _, a := range got {
			if a.Error == nil || a.Error.Code != -32600 {
				t.Errorf("batch answer %s, want -32600 for every element", b)
			}
			ids = append(ids, string(a.ID))
		}
		if want := []string{`1`, `null`, `"two"`}; jsonOf(ids) != jsonOf(want) {
			t.Errorf("batch answer ids = %v, want %v (the notification unanswered)", ids, want)
		}
	})
	t.Run("batch of notifications", func(t *testing.T) {
		status, b := postRaw(t, c, `[{"jsonrpc":"2.0","method":"tasks/get","params":{"id":"x"}}]`)
		if status != http.StatusNoContent || len(b) != 0 {
			t.Errorf("POST /a2a of a batch of notifications = %d %q, want 204 and no body", status, b)
		}
	})
	t.Run("notification", func(t *testing.T) {
		note := func(ctx, messageID string) string {
			return `{"jsonrpc":"2.0","method":"message/send","params":{"configuration":{"blocking":false},"message":` +
				`{"kind":"message","messageId":"` + messageID + `","role":"user","contextId":"` + ctx + `","parts":[{"kind":"text","text":"hi"}]}}}`
		}
		for _, body := range []string{note("noted", "n1"), note("refused", "")} {
			if status, b := postRaw(t, c, body); status != http.StatusNoContent || len(b) != 0 {
				t.Errorf("POST /a2a of notification %s = %d %q, want 204 and no body", body, status, b)
			}
		}
		resp := c.Call(t, schema.MethodJobsList, `{"method":"echo"}`)
		var list schema.JobList
		if resp.Error != nil || json.Unmarshal(resp.Result, &list) != nil {
			t.Fatalf("rpc.jobs.list = %s %v", resp.Result, resp.Error)
		}
		contexts := map[string]int{}
		for _, j := range list.Jobs {
			contexts[j.ContextID]++
		}
		if contexts["noted"] != 1 || contexts["refused"] != 0 {
			t.Errorf("jobs by context after the notifications = %v, want one of context noted (it ran) and none of refused", contexts)
		}
	})
}

// headerIngress is a [door.Ingress] that keeps the headers of the last
// request it read and answers every call with -32603.
type headerIngress struct{ seen http.Header }

func (h *headerIngress) Request(r *http.Request) (door.Request, *schema.Error) {
	h.seen = r.Header.Clone()
	return door.Request{
		Call: func(_ context.Context, req schema.Request) schema.Response {
			return schema.Response{ID: req.ID, Error: schema.NewError(schema.CodeInternal, "internal error", nil)}
		},
		Subscribe: func(context.Context, string, func()) (json.RawMessage, func(context.Context, func(string, json.RawMessage)), *schema.Error) {
			return nil, nil, schema.NewError(schema.CodeInternal, "internal error", nil)
		},
	}, nil
}

// TestIdempotencyKeyStaysWithRequest checks that the ingress reads an A2A
// request without its Idempotency-Key, which names no call the door makes
// for a task, and with its other call headers.
func TestIdempotencyKeyStaysWithRequest(t *testing.T) {
	ing := &headerIngress{}
	s, err := toolbusa2a.New(ing, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	r := httptest.NewRequest(http.MethodPost, toolbusa2a.Path,
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t1"}}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(schema.HeaderIdempotencyKey, "k1")
	r.Header.Set(schema.HeaderTimeout, "5s")
	s.ServeHTTP(httptest.NewRecorder(), r)
	if ing.seen == nil {
		t.Fatal("the ingress read no request")
	}
	if got := ing.seen.Get(schema.HeaderIdempotencyKey); got != "" {
		t.Errorf("the ingress read %s = %q, want none", schema.HeaderIdempotencyKey, got)
	}
	if got := ing.seen.Get(schema.HeaderTimeout); got != "5s" {
		t.Errorf("the ingress read %s = %q, want %q", schema.HeaderTimeout, got, "5s")
	}
	if got := r.Header.Get(schema.HeaderIdempotencyKey); got != "k1" {
		t.Errorf("the request's own %s = %q after serving, want %q", schema.HeaderIdempotencyKey, got, "k1")
	}
}
