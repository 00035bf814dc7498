package toolbustest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// repeatReader yields n bytes of a repeated pattern without holding them.
type repeatReader struct {
	pattern []byte
	left    int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	end := len(p)
	if int64(end) > r.left {
		end = int(r.left)
	}
	n := 0
	for n < end {
		n += copy(p[n:end], r.pattern)
	}
	r.left -= int64(n)
	return n, nil
}

// allocated returns the bytes allocated by the process so far.
func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestHostileInputIsBounded sends what an attacker would and checks that
// each gets a clear, bounded error, that the process does not allocate in
// proportion to the attack, and that no method name escapes to NATS.
func TestHostileInputIsBounded(t *testing.T) {
	c := toolbustest.Start(t)
	spy, err := c.NATS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	var mu sync.Mutex
	var seen []string
	sub, err := spy.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		seen = append(seen, m.Subject)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	spy.Flush()

	t.Run("a 100 MB body", func(t *testing.T) {
		before := allocated()
		req, _ := http.NewRequest(http.MethodPost, c.URL, &repeatReader{pattern: []byte(`{"jsonrpc":"2.0","id":1,"method":"echo"},`), left: 100 << 20})
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// The server may close the connection while the client still
			// sends; what matters is that it did not read it all.
			t.Logf("client saw %v", err)
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "max_body_bytes") {
				t.Fatalf("100 MB body = HTTP %d %s, want 413 naming max_body_bytes", resp.StatusCode, body)
			}
		}
		if grew := allocated() - before; grew > 40<<20 {
			t.Fatalf("a 100 MB body made the process allocate %d MB, want it bounded by the 4 MiB limit", grew>>20)
		}
	})

	for _, tc := range []struct {
		name  string
		body  string
		code  int
		limit string
	}{
		{"a million items", "[" + strings.Repeat("1,", 999999) + "1]", schema.CodeLimitExceeded, "max_batch_items"},
		{"ten thousand levels", `{"jsonrpc":"2.0","id":1,"method":"echo","params":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "}", schema.CodeLimitExceeded, "max_depth"},
		{"invalid UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":[\"\xff\xfe\xfd\"]}", schema.CodeParseError, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := allocated()
			status, body := c.Post(t, tc.body)
			var r schema.Response
			if status != http.StatusOK || json.Unmarshal(body, &r) != nil || r.Error == nil || r.Error.Code != tc.code {
				t.Fatalf("HTTP %d %.200s, want 200 with error %d", status, body, tc.code)
			}
			if !strings.Contains(string(r.Error.Data), tc.limit) {
				t.Fatalf("error data %s, want it to name %q", r.Error.Data, tc.limit)
			}
			if grew := allocated() - before; grew > 64<<20 {
				t.Fatalf("allocated %d MB for a %d-byte body, want it bounded", grew>>20, len(tc.body))
			}
		})
	}

	escapes := []string{"*", ">", "$SYS.REQ.SERVER.PING", "$JS.API.STREAM.LIST", "..", "a..b", "echo.>", "echo *", "rpc.internal", strings.Repeat("a", 201), "toolbus.call.echo\r\nPUB x 1"}
	for _, m := range escapes {
		t.Run(fmt.Sprintf("method %.40q", m), func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": m})
			status, raw := c.Post(t, string(body))
			var r schema.Response
			if status != http.StatusOK || json.Unmarshal(raw, &r) != nil || !errors.Is(r.Error, schema.ErrMethodNotFound) {
				t.Fatalf("method %q = HTTP %d %s, want -32601", m, status, raw)
			}
		})
	}

	// A control call does reach NATS, so the spy would have seen the others.
	if r := c.Call(t, "echo", `["control"]`); r.Error != nil {
		t.Fatalf("control call: %v", r.Error)
	}
	spy.Flush()
	toolbustest.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0
	}, "the spy sees a message")
	mu.Lock()
	defer mu.Unlock()
	control := false
	for _, s := range seen {
		switch {
		case s == "toolbus.call.echo":
			control = true
		case strings.HasPrefix(s, "toolbus.reply."), strings.HasPrefix(s, "_INBOX."):
		default:
			t.Errorf("a message reached NATS on %q", s)
		}
	}
	if !control {
		t.Fatalf("the spy saw %v, not even the control call: it cannot vouch for the rest", seen)
	}
}
