package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/clientcli"
	"github.com/toolbus/toolbus/toolbustest"
)

func TestCall(t *testing.T) {
	c := toolbustest.Start(t)
	dir := t.TempDir()
	writeFile := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	batchFile := writeFile("batch.json", `[
		{"jsonrpc":"2.0","id":12345678901234567890,"method":"echo","params":{"n":1.50}},
		{"jsonrpc":"2.0","id":"101","method":"subtract","params":[42,23]}
	]`)
	failingBatch := writeFile("failing.json", `[
		{"jsonrpc":"2.0","id":1,"method":"echo","params":{}},
		{"jsonrpc":"2.0","id":2,"method":"fail","params":{"code":2001,"message":"insufficient funds"}}
	]`)
	garbage := writeFile("garbage.json", `{not json`)

	wsURL := "ws" + strings.TrimPrefix(c.URL, "http")
	tests := []struct {
		name     string
		args     []string
		ws       bool // send to the WebSocket URL of the ingress
		stdin    string
		wantErr  error // clientcli.ErrReported, or nil for success
		wantFail bool  // an error other than clientcli.ErrReported
		want     []string
	}{
		{name: "single call prints the result", args: []string{"echo", `{"hello":"world"}`},
			want: []string{`"result"`, `"hello": "world"`}},
		{name: "params may be an array", args: []string{"subtract", `[42,23]`},
			want: []string{`"result": 19`}},
		{name: "params may be surrounded by whitespace", args: []string{"subtract", "\n  [42,23]\n"},
			want: []string{`"result": 19`}},
		{name: "no params", args: []string{"echo"},
			want: []string{`"result"`}},
		{name: "error answer is reported", args: []string{"fail", `{"code":2001,"message":"insufficient funds"}`},
			wantErr: clientcli.ErrReported, want: []string{`"code": 2001`, "insufficient funds"}},
		{name: "unknown method is reported", args: []string{"no.such.tool"},
			wantErr: clientcli.ErrReported, want: []string{"-32601"}},
		{name: "batch file is sent as it is", args: []string{"--batch", batchFile},
			want: []string{`"id": 12345678901234567890`, `"n": 1.50`, `"id": "101"`, `"result": 19`}},
		{name: "batch from standard input", args: []string{"--batch", "-"}, stdin: `[{"jsonrpc":"2.0","id":"in","method":"echo","params":[1]}]`,
			want: []string{`"id": "in"`}},
		{name: "batch with one error is reported", args: []string{"--batch", failingBatch},
			wantErr: clientcli.ErrReported, want: []string{`"code": 2001`}},
		{name: "batch of garbage is reported as a parse error", args: []string{"--batch", garbage},
			wantErr: clientcli.ErrReported, want: []string{"-32700"}},
		{name: "notification has no answer", args: []string{"--notify", "notify_hello", `[7]`},
			want: []string{"(no answer: notifications only)"}},
		{name: "deadline", args: []string{"--timeout", "300ms", "sleep", `{"ms":5000}`},
			wantErr: clientcli.ErrReported, want: []string{"-32001"}},
		{name: "over WebSocket", args: []string{"echo", `{"over":"ws"}`}, ws: true,
			want: []string{`"result"`, `"over": "ws"`}},
		{name: "error answer over WebSocket", args: []string{"fail", `{"code":2001,"message":"insufficient funds"}`}, ws: true,
			wantErr: clientcli.ErrReported, want: []string{`"code": 2001`}},
		{name: "deadline over WebSocket", args: []string{"--timeout", "300ms", "sleep", `{"ms":5000}`}, ws: true,
			wantErr: clientcli.ErrReported, want: []string{"-32001"}},
		{name: "notification over WebSocket", args: []string{"--notify", "notify_hello", `[7]`}, ws: true,
			want: []string{"(no answer: notifications only)"}},
		{name: "batch with a WebSocket URL is posted over HTTP", args: []string{"--batch", batchFile}, ws: true,
			want: []string{`"id": 12345678901234567890`, `"id": "101"`}},
		{name: "params a number", args: []string{"echo", `42`}, wantFail: true},
		{name: "params a string", args: []string{"echo", `"hello"`}, wantFail: true},
		{name: "params not JSON", args: []string{"echo", `{hello`}, wantFail: true},
		{name: "params empty", args: []string{"echo", ``}, wantFail: true},
		{name: "method and batch", args: []string{"--batch", batchFile, "echo"}, wantFail: true},
		{name: "neither method nor batch", args: nil, wantFail: true},
		{name: "too many arguments", args: []string{"echo", `{}`, `{}`}, wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := c.URL
			if tt.ws {
				url = wsURL
			}
			var out syncBuffer
			cmd := start(t, &out, append([]string{"call", "--url", url}, tt.args...)...)
			cmd.SetIn(strings.NewReader(tt.stdin))
			err := cmd.ExecuteContext(context.Background())
			switch {
			case tt.wantFail:
				if err == nil || errors.Is(err, clientcli.ErrReported) {
					t.Fatalf("call %q = %v, want a usage error; output:\n%s", tt.args, err, out.String())
				}
				if out.String() != "" {
					t.Errorf("call %q printed %q, want nothing: no request is sent", tt.args, out.String())
				}
				return
			case !errors.Is(err, tt.wantErr):
				t.Fatalf("call %q = %v, want %v; output:\n%s", tt.args, err, tt.wantErr, out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("call %q printed:\n%s\nwant it to contain %s", tt.args, out.String(), w)
				}
			}
		})
	}
}

func TestCallErrors(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		target error
	}{
		{name: "missing batch file", args: []string{"--batch", filepath.Join(t.TempDir(), "none.json")}, target: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := execute(t, context.Background(), append([]string{"call"}, tt.args...)...)
			if !errors.Is(err, tt.target) {
				t.Errorf("call %q = %v, want %v", tt.args, err, tt.target)
			}
		})
	}
}

func TestCallUnreachable(t *testing.T) {
	// Nothing listens on port 1 of the loopback address.
	out, err := execute(t, context.Background(), "call", "--url", "http://127.0.0.1:1/rpc", "echo")
	if err == nil || errors.Is(err, clientcli.ErrReported) {
		t.Fatalf("call to a closed port = %v (output %q), want a connection error", err, out)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("call to a closed port = %v, want the error to name the URL", err)
	}
}

func TestCallURLFromEnvironment(t *testing.T) {
	c := toolbustest.Start(t)
	t.Setenv("TOOLBUS_URL", c.URL)
	out, err := execute(t, context.Background(), "call", "echo", `{"via":"env"}`)
	if err != nil {
		t.Fatalf("call with TOOLBUS_URL = %v, want nil; output:\n%s", err, out)
	}
	if !strings.Contains(out, `"via": "env"`) {
		t.Errorf("call with TOOLBUS_URL printed:\n%s\nwant the echo", out)
	}
}

// TestCallIDs checks what call sends: every call has an id of its own,
// made up by the client, and a notification has none.
func TestCallIDs(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		id, ok := req["id"]
		if !ok {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, id)
	}))
	defer srv.Close()

	tests := []struct {
		name   string
		args   []string
		method string
		wantID bool
	}{
		{name: "call", args: []string{"echo", `{"a":1}`}, method: "echo", wantID: true},
		{name: "call without params", args: []string{"echo"}, method: "echo", wantID: true},
		{name: "notification", args: []string{"--notify", "notify_hello", `[1]`}, method: "notify_hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = nil
			for range 2 {
				if out, err := execute(t, context.Background(), append([]string{"call", "--url", srv.URL}, tt.args...)...); err != nil {
					t.Fatalf("call %q = %v, want nil; output:\n%s", tt.args, err, out)
				}
			}
			ids := map[string]bool{}
			for _, req := range got {
				if got := string(req["jsonrpc"]); got != `"2.0"` {
					t.Errorf("call %q sent jsonrpc %s, want \"2.0\"", tt.args, got)
				}
				if got := string(req["method"]); got != `"`+tt.method+`"` {
					t.Errorf("call %q sent method %s, want %q", tt.args, got, tt.method)
				}
				id, ok := req["id"]
				if ok != tt.wantID {
					t.Fatalf("call %q sent %v, has id %v, want %v", tt.args, req, ok, tt.wantID)
				}
				if ok {
					ids[string(id)] = true
				}
			}
			if len(got) != 2 {
				t.Fatalf("two calls %q sent %d requests, want 2", tt.args, len(got))
			}
			if tt.wantID && len(ids) != 2 {
				t.Errorf("two calls %q sent ids %v, want two different ids", tt.args, ids)
			}
		})
	}
}

func TestCallUnreachableWebSocket(t *testing.T) {
	out, err := execute(t, context.Background(), "call", "--url", "ws://127.0.0.1:1/rpc", "echo")
	if err == nil || errors.Is(err, clientcli.ErrReported) {
		t.Fatalf("call to a closed port = %v (output %q), want a connection error", err, out)
	}
	if !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("call to a closed port = %v, want the error to name the URL", err)
	}
}
