package quota

import (
	"io"
	"net"
	"strings"
	"testing"
)

// TestConns: a second connection of an address with its bound open is
// answered 429 and closed; one closed frees its place; a 431 written on a
// counted connection is reported as max_header_bytes.
func TestConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusals := make(chan string, 4)
	cl := NewConns(1, func(limit string) { refusals <- limit })
	l := cl.Listener(ln)
	accepted := make(chan net.Conn)
	go func() {
		defer close(accepted)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for range accepted {
		}
	})
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	dial()
	first := <-accepted
	if n := cl.Open(); n != 1 {
		t.Fatalf("Open() = %d after one connection, want 1", n)
	}
	b, err := io.ReadAll(dial())
	if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 429 ") || !strings.Contains(string(b), `"limit":"max_conns_per_addr"`) {
		t.Fatalf("second connection read %q, %v; want a 429 naming max_conns_per_addr", b, err)
	}
	if got := <-refusals; got != "max_conns_per_addr" {
		t.Errorf("refusal counted as %q, want max_conns_per_addr", got)
	}
	if n := cl.Open(); n != 1 {
		t.Errorf("Open() = %d with one refused, want 1", n)
	}

	first.Close()
	first.Close() // a second Close releases nothing more
	if n := cl.Open(); n != 0 {
		t.Fatalf("Open() = %d after the close, want 0", n)
	}
	dial()
	third := <-accepted
	defer third.Close()
	if _, err := third.Write([]byte("HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if got := <-refusals; got != "max_header_bytes" {
		t.Errorf("431 counted as %q, want max_header_bytes", got)
	}
}
