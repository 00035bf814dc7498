package ingress

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Defaults of the connection limits of [Server.Serve].
const (
	// DefaultMaxHeaderBytes bounds the request line and headers of one
	// request (max_header_bytes): room for a long JWT and then some.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxConnsPerAddr bounds the open connections of one client
	// address (max_conns_per_addr): well above a benchmark's few hundred
	// clients on one host.
	DefaultMaxConnsPerAddr = 1024
)

// WithMaxHeaderBytes bounds the request line and headers of a request the
// server started by [Server.Serve] reads (default [DefaultMaxHeaderBytes]).
// Go's HTTP server answers a larger one "431 Request Header Fields Too
// Large" before any handler or authentication runs, and closes the
// connection; toolbus_limit_refusals_total counts it as max_header_bytes.
func WithMaxHeaderBytes(n int) Option {
	return func(c *config) error {
		if n < 1<<10 {
			return fmt.Errorf("ingress: max header bytes must be at least 1024, got %d", n)
		}
		c.maxHeaderBytes = n
		return nil
	}
}

// WithMaxConnsPerAddr bounds the connections one client IP address has
// open at once on [Server.Serve]'s listeners, WebSocket connections
// included (default [DefaultMaxConnsPerAddr]); zero turns the bound off,
// as behind a proxy that carries every client on connections of its own.
// A connection over it is answered at once with 429, a -32002 body naming
// max_conns_per_addr and Retry-After, and closed unread.
func WithMaxConnsPerAddr(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("ingress: max connections per address must not be negative, got %d", n)
		}
		c.maxConnsPerAddr = n
		return nil
	}
}

// refuseWriteTimeout bounds writing the refusal of a connection over
// max_conns_per_addr: a client that does not read it loses it.
const refuseWriteTimeout = time.Second

// connLimiter wraps the listeners of [Server.Serve]: it counts each client
// address's open connections and turns away those over the bound.
type connLimiter struct {
	s   *Server
	max int // 0: no bound

	mu     sync.Mutex
	byAddr map[string]int
	open   int
}

func newConnLimiter(s *Server, max int) *connLimiter {
	return &connLimiter{s: s, max: max, byAddr: map[string]int{}}
}

// listener returns l with every accepted connection counted.
func (cl *connLimiter) listener(l net.Listener) net.Listener {
	return &limitedListener{Listener: l, cl: cl}
}

// admit counts a new connection of addr, or reports false when addr has
// its bound open already.
func (cl *connLimiter) admit(addr string) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.max > 0 && cl.byAddr[addr] >= cl.max {
		return false
	}
	cl.byAddr[addr]++
	cl.open++
	return true
}

func (cl *connLimiter) release(addr string) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if n := cl.byAddr[addr] - 1; n > 0 {
		cl.byAddr[addr] = n
	} else {
		delete(cl.byAddr, addr)
	}
	cl.open--
}

// Open returns the connections open now.
func (cl *connLimiter) Open() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.open
}

type limitedListener struct {
	net.Listener
	cl *connLimiter
}

// Accept returns the next connection whose address is under its bound;
// the others are refused on goroutines of their own, so a client that
// does not read its refusal holds up nobody.
func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := clientAddr(c.RemoteAddr())
		if l.cl.admit(addr) {
			return &countedConn{Conn: c, cl: l.cl, addr: addr}, nil
		}
		l.cl.s.countRefusal("max_conns_per_addr")
		go refuseConn(c, l.cl.max)
	}
}

// clientAddr is the address connections are counted under: the IP alone,
// as one client opens its connections from many ports.
func clientAddr(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// refuseConn answers a connection over max_conns_per_addr and closes it.
func refuseConn(c net.Conn, max int) {
	defer c.Close()
	e := schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: this address already has %d connections open to this ingress (max_conns_per_addr); "+
			"close idle connections or reuse them", max),
		map[string]any{"retryable": true, "retry_after_ms": 1000, "limit": "max_conns_per_addr", "max": max})
	body, _ := schema.Response{Error: e}.AppendJSON(nil)
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: ")
	b.WriteString(strconv.Itoa(len(body)))
	b.WriteString("\r\n\r\n")
	b.Write(body)
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	_, _ = c.Write(b.Bytes())
}

// countedConn is a connection counted against its address until it
// closes, also after the HTTP server hands it to a WebSocket.
type countedConn struct {
	net.Conn
	cl   *connLimiter
	addr string
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.cl.release(c.addr) })
	return c.Conn.Close()
}

var status431 = []byte("HTTP/1.1 431 ")

// Write counts the refusals of headers over MaxHeaderBytes: Go's HTTP
// server writes its own 431 straight to the connection, with one write
// that starts with the status line, and this is the one place that sees
// it.
func (c *countedConn) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, status431) {
		c.cl.s.countRefusal("max_header_bytes")
	}
	return c.Conn.Write(p)
}
