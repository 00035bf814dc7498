package quota

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// refuseWriteTimeout bounds writing the refusal of a connection over
// max_conns_per_addr: a client that does not read it loses it.
const refuseWriteTimeout = time.Second

// Conns counts each client address's open connections on the listeners
// it wraps, and turns away those over its bound. It is safe for
// concurrent use.
type Conns struct {
	max     int                // 0: no bound
	refused func(limit string) // counts a refusal, by the limit's name

	mu     sync.Mutex
	byAddr map[string]int
	open   int
}

// NewConns returns a count of connections that refuses those of an
// address with max open (no bound when max is zero). It calls refused,
// which must not be nil, with "max_conns_per_addr" for each connection it
// turns away, and with "max_header_bytes" each time Go's HTTP server
// refuses a request's headers on a counted connection (see
// [Conns.Listener]).
func NewConns(max int, refused func(limit string)) *Conns {
	return &Conns{max: max, refused: refused, byAddr: map[string]int{}}
}

// Listener returns l with every accepted connection counted until it
// closes. A connection over the bound is answered at once, on a goroutine
// of its own, with 429, a -32002 body naming max_conns_per_addr and
// Retry-After, and closed unread.
func (cl *Conns) Listener(l net.Listener) net.Listener {
	return &limitedListener{Listener: l, cl: cl}
}

// admit counts a new connection of addr, or reports false when addr has
// its bound open already.
func (cl *Conns) admit(addr string) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.max > 0 && cl.byAddr[addr] >= cl.max {
		return false
	}
	cl.byAddr[addr]++
	cl.open++
	return true
}

func (cl *Conns) release(addr string) {
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
func (cl *Conns) Open() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.open
}

type limitedListener struct {
	net.Listener
	cl *Conns
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
		l.cl.refused("max_conns_per_addr")
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
	cl   *Conns
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
		c.cl.refused("max_header_bytes")
	}
	return c.Conn.Write(p)
}
