package main

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantErr  error // errReported, or nil for success
		wantFail bool  // an error other than errReported
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
			wantErr: errReported, want: []string{`"code": 2001`, "insufficient funds"}},
		{name: "unknown method is reported", args: []string{"no.such.tool"},
			wantErr: errReported, want: []string{"-32601"}},
		{name: "batch file is sent as it is", args: []string{"--batch", batchFile},
			want: []string{`"id": 12345678901234567890`, `"n": 1.50`, `"id": "101"`, `"result": 19`}},
		{name: "batch from standard input", args: []string{"--batch", "-"}, stdin: `[{"jsonrpc":"2.0","id":"in","method":"echo","params":[1]}]`,
			want: []string{`"id": "in"`}},
		{name: "batch with one error is reported", args: []string{"--batch", failingBatch},
			wantErr: errReported, want: []string{`"code": 2001`}},
		{name: "batch of garbage is reported as a parse error", args: []string{"--batch", garbage},
			wantErr: errReported, want: []string{"-32700"}},
		{name: "notification has no answer", args: []string{"--notify", "notify_hello", `[7]`},
			want: []string{"(no answer: notifications only)"}},
		{name: "deadline", args: []string{"--timeout", "300ms", "sleep", `{"ms":5000}`},
			wantErr: errReported, want: []string{"-32001"}},
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
			var out syncBuffer
			cmd := start(t, &out, append([]string{"call", "--url", c.URL}, tt.args...)...)
			cmd.SetIn(strings.NewReader(tt.stdin))
			err := cmd.ExecuteContext(context.Background())
			switch {
			case tt.wantFail:
				if err == nil || errors.Is(err, errReported) {
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
	if err == nil || errors.Is(err, errReported) {
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

func TestBuildCall(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		notify bool
		wantID bool
	}{
		{name: "call", args: []string{"echo", `{"a":1}`}, wantID: true},
		{name: "call without params", args: []string{"echo"}, wantID: true},
		{name: "notification", args: []string{"notify_hello", `[1]`}, notify: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids := map[string]bool{}
			for range 2 {
				body, err := buildCall(tt.args, tt.notify)
				if err != nil {
					t.Fatalf("buildCall(%q, %v) = %v", tt.args, tt.notify, err)
				}
				var req map[string]json.RawMessage
				if err := json.Unmarshal(body, &req); err != nil {
					t.Fatalf("buildCall(%q, %v) = %s: %v", tt.args, tt.notify, body, err)
				}
				if got := string(req["jsonrpc"]); got != `"2.0"` {
					t.Errorf("buildCall(%q) jsonrpc = %s, want \"2.0\"", tt.args, got)
				}
				if got := string(req["method"]); got != `"`+tt.args[0]+`"` {
					t.Errorf("buildCall(%q) method = %s, want %q", tt.args, got, tt.args[0])
				}
				id, ok := req["id"]
				if ok != tt.wantID {
					t.Fatalf("buildCall(%q, %v) = %s, has id %v, want %v", tt.args, tt.notify, body, ok, tt.wantID)
				}
				if ok {
					ids[string(id)] = true
				}
			}
			if tt.wantID && len(ids) != 2 {
				t.Errorf("two buildCall(%q) gave ids %v, want two different ids", tt.args, ids)
			}
		})
	}
}
