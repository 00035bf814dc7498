package quota

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/toolbus/toolbus/schema"
)

// Bytes counts the bytes of answers held per caller and in all, between
// their arrival from the dispatcher and their write to the client. It is
// safe for concurrent use; a caller holding nothing takes no memory.
//
// A named caller may hold its share (callerMax of [NewBytes]); the empty
// caller, that of an ingress without authentication, may hold all of max,
// which bounds every caller's together.
type Bytes struct {
	max       int64 // over all callers, and the anonymous caller's share
	callerMax int64 // a named caller's share

	mu    sync.Mutex
	total int64
	held  map[string]int64
}

// NewBytes returns a budget of max bytes over all callers, and of
// callerMax for each named caller (half of max when callerMax is zero or
// less, and never above max).
func NewBytes(max, callerMax int64) *Bytes {
	if callerMax <= 0 {
		callerMax = max / 2
	}
	return &Bytes{max: max, callerMax: min(callerMax, max), held: map[string]int64{}}
}

// limit returns the bound of caller and its name.
func (b *Bytes) limit(caller string) (int64, string) {
	if caller == "" {
		return b.max, "max_bytes_in_flight"
	}
	return b.callerMax, "caller_max_bytes_in_flight"
}

// Admit returns the refusal of a new call of caller while it holds half
// its bound of bytes or more, or while all callers together hold all but
// that much of max; nil otherwise. The half left is room for the answers
// of the calls already running, which would otherwise be dropped on
// arrival; and as a named caller's bound is below max by more than that,
// one caller alone never closes the budget to the others. The refusal is
// -32002, retryable, naming the limit.
func (b *Bytes) Admit(caller string) *schema.Error {
	max, name := b.limit(caller)
	b.mu.Lock()
	full := b.held[caller] >= max/2
	if !full && b.total >= b.max-max/2 {
		full, max, name = true, b.max, "max_bytes_in_flight"
	}
	b.mu.Unlock()
	if !full {
		return nil
	}
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: %d bytes of answers are waiting to be written (%s); "+
			"read the answers of earlier calls before sending more", max, name),
		map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfterMS, "limit": name, "max": max})
}

// overloadRetryAfterMS is the wait suggested to a caller whose answers
// wait to be written: about the time a client takes to read some.
const overloadRetryAfterMS = 100

// take adds n bytes to caller's, or returns the answer that replaces one
// of n bytes that does not fit.
func (b *Bytes) take(caller string, n int64) *schema.Error {
	max, name := b.limit(caller)
	b.mu.Lock()
	fits := b.held[caller]+n <= max
	if fits && b.total+n > b.max {
		fits, max, name = false, b.max, "max_bytes_in_flight"
	}
	if fits {
		b.held[caller] += n
		b.total += n
	}
	b.mu.Unlock()
	if fits {
		return nil
	}
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("overloaded: the answer (%d bytes) would take the answers waiting to be written past %d bytes (%s), so it was dropped; "+
			"the call ran: read answers sooner or send fewer calls at once", n, max, name),
		map[string]any{"retryable": true, "retry_after_ms": overloadRetryAfterMS, "limit": name, "max": max,
			"got": n, "may_have_run": true})
}

func (b *Bytes) free(caller string, n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total -= n
	if left := b.held[caller] - n; left > 0 {
		b.held[caller] = left
	} else {
		delete(b.held, caller)
	}
}

// Total returns the bytes held now, over all callers.
func (b *Bytes) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Charge is what one message's answers hold of their caller's budget. It
// is safe for concurrent use. A nil charge holds nothing.
type Charge struct {
	b      *Bytes
	caller string

	mu   sync.Mutex
	held int64
}

// Open returns an empty charge of caller's, for the answers of one
// message.
func (b *Bytes) Open(caller string) *Charge { return &Charge{b: b, caller: caller} }

// Hold charges r's bytes ([AnswerSize]), or returns r replaced by the
// refusal when they do not fit: -32002, retryable, with may_have_run true,
// since the call ran.
func (ch *Charge) Hold(r schema.Response) schema.Response {
	if ch == nil {
		return r
	}
	n := AnswerSize(r)
	if e := ch.b.take(ch.caller, n); e != nil {
		return schema.Response{ID: r.ID, Error: e}
	}
	ch.mu.Lock()
	ch.held += n
	ch.mu.Unlock()
	return r
}

// Close gives back all the charge holds: its message is answered.
func (ch *Charge) Close() {
	if ch == nil {
		return
	}
	ch.mu.Lock()
	n := ch.held
	ch.held = 0
	ch.mu.Unlock()
	ch.b.free(ch.caller, n)
}

// AnswerSize is about what an answer weighs in memory until it is
// written.
func AnswerSize(r schema.Response) int64 {
	n := int64(len(r.ID) + len(r.Result) + 64)
	if r.Error != nil {
		n += int64(len(r.Error.Message) + len(r.Error.Data))
	}
	return n
}

// maxBuckets bounds the token buckets a [Limiter] keeps; beyond it, buckets
// that are full again (their callers idle) are forgotten, which costs them
// nothing.
const maxBuckets = 10000

// RateLimit is a token bucket: PerSecond calls a second on average, with
// bursts of up to Burst calls.
type RateLimit struct {
	PerSecond float64
	Burst     int
}

// Validate reports a rate that is not positive and finite, or a burst
// under 1.
func (l RateLimit) Validate() error {
	if l.PerSecond <= 0 || math.IsInf(l.PerSecond, 0) || math.IsNaN(l.PerSecond) || l.Burst < 1 {
		return fmt.Errorf("quota: rate limit needs a positive rate and a burst of at least 1, got %+v", l)
	}
	return nil
}

// Limiter holds the token bucket of every caller. It is safe for
// concurrent use; a nil Limiter admits every call.
type Limiter struct {
	def     *RateLimit
	callers map[string]RateLimit
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// NewLimiter returns the buckets of def, every caller's unless callers
// names one, or nil when neither sets a rate limit. The limits must be
// valid ([RateLimit.Validate]).
func NewLimiter(def *RateLimit, callers map[string]RateLimit) *Limiter {
	if def == nil && len(callers) == 0 {
		return nil
	}
	return &Limiter{def: def, callers: callers, now: time.Now, buckets: map[string]*rate.Limiter{}}
}

// Admit takes a token of caller's bucket, or returns the -32002 answer:
// retryable, with retry_after_ms (when the next token comes) and limit
// "rate_limit".
func (l *Limiter) Admit(caller string) *schema.Error {
	if l == nil {
		return nil
	}
	conf, ok := l.callers[caller]
	if !ok {
		if l.def == nil {
			return nil
		}
		conf = *l.def
	}
	now := l.now()
	l.mu.Lock()
	b, ok := l.buckets[caller]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.sweep(now)
		}
		b = rate.NewLimiter(rate.Limit(conf.PerSecond), conf.Burst)
		l.buckets[caller] = b
	}
	if b.AllowN(now, 1) {
		l.mu.Unlock()
		return nil
	}
	wait := time.Duration((1 - b.TokensAt(now)) / conf.PerSecond * float64(time.Second))
	l.mu.Unlock()
	ms := max(wait.Milliseconds(), 1)
	return schema.NewError(schema.CodeOverloaded,
		fmt.Sprintf("rate limited: %g calls a second, bursts of %d", conf.PerSecond, conf.Burst),
		map[string]any{"retryable": true, "retry_after_ms": ms, "limit": "rate_limit"})
}

// sweep forgets the buckets that are full. l.mu is held.
func (l *Limiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(b.Burst()) {
			delete(l.buckets, k)
		}
	}
}

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
