package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrNotNATS is wrapped by the failure of an attempt to connect to a server
// that accepted the connection but did not greet the client as a NATS
// server does: most often the URL names another port of the server, such
// as its HTTP monitoring port.
var ErrNotNATS = errors.New("the server did not speak NATS")

// connectFailure is the failure of one attempt to connect told as a
// sentence an operator acts on: where, why, and what fixes it. It wraps the
// cause as [ConnectError] classifies it, so [Permanent] and errors.Is see
// through it.
type connectFailure struct {
	msg  string
	errs []error
}

func (f *connectFailure) Error() string   { return f.msg }
func (f *connectFailure) Unwrap() []error { return f.errs }

// watch follows the attempts of one connection to reach a server. nats.go
// tells of them unevenly: a failed dial through one callback, a refusal of
// the credentials through another and only once the connection has been
// up, a server that does not speak NATS through none at all, and each
// callback runs later, on its own goroutine. So watch learns each
// attempt's outcome as it happens, from the dialer and from the first
// bytes the server sends, and once per backoff step, from nats.go's
// reconnect loop ([watch.delay]), it logs one line naming the address,
// the cause and the flag that fixes it, tells the status function, and
// chooses the next pause.
type watch struct {
	log    *slog.Logger
	status func(*nats.Conn, error) // nil without WithStatusFunc
	wait1  time.Duration           // the first pause of an episode
	limit  time.Duration           // the longest pause while no server answers
	// auth names the authentication option ("" for none); url is the
	// redacted URL, and urlCreds whether it carries credentials. Set
	// before the connection starts, read only after.
	auth     string
	url      string
	urlCreds bool

	nc        atomic.Pointer[nats.Conn] // known once a callback or Connect has it
	connected atomic.Bool               // the connection has been up at least once

	statusMu sync.Mutex // status is told one thing at a time

	// wait is the latest step's wait before jitter. Only nats.go's
	// reconnect loop uses it, one step after the other.
	wait time.Duration

	mu     sync.Mutex
	addr   string // host:port of the latest dial
	failed error  // what the latest attempt met that nats.go reports late or never
	told   error  // the latest attempt failure a callback reported
	// stepped is set by the first backoff step that has a failure to
	// report: from then on the steps report the failures of the first
	// connection, not the callback.
	stepped bool
	// pending is what a step had to report before the connection was
	// known; [watch.known] reports it.
	pending error
}

// dialer dials for nats.go, so that the watch learns each attempt's
// address and dial error at once, and whether the server greets it.
type dialer struct {
	w *watch
	d net.Dialer
}

// Dial implements nats.CustomDialer.
func (d *dialer) Dial(network, address string) (net.Conn, error) {
	c, err := d.d.Dial(network, address)
	d.w.dialed(address, err)
	if err != nil {
		return nil, err
	}
	return &greetConn{Conn: c, w: d.w, addr: address}, nil
}

// greetConn notes a server that ends or times out the first read of a
// connection without having sent a byte: a NATS server sends its INFO
// first, a server of another protocol waits for the client to speak (the
// read times out), and a proxy with nothing behind it closes the
// connection.
type greetConn struct {
	net.Conn
	w       *watch
	addr    string
	greeted atomic.Bool
}

func (c *greetConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.greeted.Load() {
		if n > 0 {
			c.greeted.Store(true)
		} else if err != nil {
			c.w.silent(c.addr, err)
		}
	}
	return n, err
}

func (w *watch) dialed(addr string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addr, w.failed = addr, err
}

func (w *watch) silent(addr string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if addr != w.addr {
		return
	}
	var timeout net.Error
	if errors.As(err, &timeout) && timeout.Timeout() {
		w.failed = silence{err}
	} else {
		w.failed = hangUp{err}
	}
}

// silence is the read error of a connection whose server sent nothing
// until the client gave up waiting: [ErrNotNATS].
type silence struct{ err error }

func (s silence) Error() string        { return s.err.Error() }
func (s silence) Unwrap() error        { return s.err }
func (s silence) Is(target error) bool { return target == ErrNotNATS }

// hangUp is the read error of a connection whose server closed it before
// sending anything.
type hangUp struct{ err error }

func (h hangUp) Error() string { return h.err.Error() }
func (h hangUp) Unwrap() error { return h.err }

// known records nc, which a callback or Connect hands over, and reports
// what a step could not report before.
func (w *watch) known(nc *nats.Conn) {
	w.mu.Lock()
	w.nc.Store(nc)
	p := w.pending
	w.pending = nil
	w.mu.Unlock()
	if p != nil && !w.connected.Load() {
		w.report(nc, p)
	}
}

// tell records an attempt's failure that a callback reported.
func (w *watch) tell(nc *nats.Conn, err error) {
	w.known(nc)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.told = err
}

// first returns what to report of err, the failure of the first
// connection as nats.go's callback reports it, or false when a backoff
// step has reported it, or will: the step knows more (nats.go reports a
// refused dial as "no servers available", and a server that did not
// speak NATS by the read error alone).
func (w *watch) first(err error) (error, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stepped {
		return nil, false
	}
	w.stepped = true
	cause := err
	if w.failed != nil {
		cause = w.failed
	}
	return w.reported(w.addr, cause), true
}

// take returns the address of the latest attempt and the cause of its
// failure, and forgets both causes, so that each backoff step
// reports its own attempt. The cause is nil when no attempt failed since
// the last step, as at the start of a reconnection.
func (w *watch) take() (string, error) {
	// Read before taking w.mu: the dialer runs under the connection's
	// lock and takes w.mu, so w.mu is never held while asking nc.
	var last error
	if nc := w.nc.Load(); nc != nil {
		last = nc.LastError()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cause := w.failed
	if cause == nil {
		// A server that answered and then refused the attempt (the
		// credentials, TLS, a protocol error) leaves its error on the
		// connection until the next attempt.
		cause = last
	}
	if cause == nil {
		cause = w.told
	}
	w.failed, w.told = nil, nil
	if cause != nil {
		w.stepped = true
	}
	return w.addr, cause
}

// delay is nats.go's reconnect delay: called once per backoff step, with
// the number of the step in this episode (1 after the connection dropped
// or the first connection failed; a connection that comes back starts a
// new episode), before nats.go waits and tries again.
func (w *watch) delay(step int) time.Duration {
	addr, cause := w.take()
	d := w.backoff(step, cause)
	if cause != nil {
		err := w.describe(addr, cause)
		w.log.Warn("nats not connected", "err", err.Error(), "step", step, "retry_in", d.Round(time.Millisecond).String())
		w.deliver(w.reported(addr, cause))
	}
	return d
}

// deliver reports err, or keeps it for [watch.known] while the connection
// is not known yet: the first step may come before Connect returns.
func (w *watch) deliver(err error) {
	w.mu.Lock()
	nc := w.nc.Load()
	if nc == nil {
		w.pending = err
	}
	w.mu.Unlock()
	if nc != nil {
		w.report(nc, err)
	}
}

// backoff returns the pause before the next attempt: first at the first
// step of an episode, then twice the previous step's up to w.limit, or
// up to [DefaultRefusedReconnectMaxWait] (or w.limit if longer) when the
// server refused the credentials or TLS, which only a person can fix;
// the pause itself is between half that and all of it, so that a fleet
// does not reconnect in lockstep. It grows from the previous step's, not
// from the number of steps, so that a refusal after a long outage backs
// off from where the outage left it.
func (w *watch) backoff(step int, cause error) time.Duration {
	limit := w.limit
	if Permanent(ConnectError(cause)) {
		limit = max(limit, DefaultRefusedReconnectMaxWait)
	}
	if step <= 1 {
		w.wait = w.wait1
	} else {
		w.wait = min(2*w.wait, limit)
	}
	return w.wait/2 + rand.N(w.wait/2+1)
}

// report tells the status function, one call at a time.
func (w *watch) report(nc *nats.Conn, err error) {
	if err == nil {
		w.connected.Store(true)
		// What a callback told of an attempt before is no later
		// step's cause. (The dialer's record is fresh: the successful
		// dial cleared it.)
		w.mu.Lock()
		w.told = nil
		w.mu.Unlock()
	}
	if w.status == nil {
		return
	}
	w.statusMu.Lock()
	defer w.statusMu.Unlock()
	w.status(nc, err)
}

// reported is what the status function is told of a failed attempt: the
// sentence of [watch.describe], except for a permanent failure before the
// connection was ever up, which a process stops with and explains in its
// own terms (its flags), so it gets the classified error alone.
func (w *watch) reported(addr string, cause error) error {
	err := ConnectError(cause)
	if Permanent(err) && !w.connected.Load() {
		return err
	}
	return w.describe(addr, cause)
}

// failure is the error of a first connection that failed with err,
// described with the cause the watch saw (nats.go reports a dial that
// was refused as "no servers available"); err as it is when nothing was
// dialed, as when an option failed.
func (w *watch) failure(err error) error {
	addr, cause := w.take()
	if addr == "" {
		return err
	}
	if cause == nil {
		return w.describe(addr, err)
	}
	f := w.describe(addr, cause)
	f.errs = append(f.errs, err)
	return f
}

// describe turns the failure of an attempt to connect to addr (host:port,
// or "" when the connection does not dial, as an in-process one) into a
// sentence that names the address, the cause and what to change.
func (w *watch) describe(addr string, cause error) *connectFailure {
	where := addr
	if where == "" {
		where = w.url
	}
	if where == "" {
		where = "the in-process server"
	}
	err := ConnectError(cause)
	errs := []error{err}
	var msg string
	var dns *net.DNSError
	switch {
	case errors.Is(err, ErrCredentials):
		expects := "expects"
		if w.connected.Load() {
			expects = "now expects"
		}
		msg = fmt.Sprintf("NATS at %s refused the credentials (%v): give the part the credential the server %s (%s)",
			where, cause, expects, w.credential())
	case errors.Is(err, ErrTLS):
		msg = fmt.Sprintf("TLS with NATS at %s failed (%v): check --nats-tls-ca, --nats-tls-cert and --nats-tls-key, "+
			"and that --nats names a host in the server's certificate", where, cause)
	case errors.Is(cause, ErrNotNATS), errors.Is(cause, nats.ErrNoInfoReceived):
		if !errors.Is(cause, ErrNotNATS) {
			errs = append(errs, ErrNotNATS)
		}
		msg = fmt.Sprintf("the server at %s did not speak NATS (%v): is this the HTTP port? "+
			"Give --nats the port NATS serves clients on (4222 unless configured otherwise)", where, cause)
	case errors.As(cause, &hangUp{}):
		msg = fmt.Sprintf("the server at %s closed the connection before saying anything (%v): "+
			"is it a proxy with no NATS behind it? Check the address in --nats, and that NATS runs there", where, cause)
	case errors.As(cause, &dns):
		msg = fmt.Sprintf("cannot find the NATS host of %s (%v): check the host name in --nats", where, cause)
	case errors.Is(cause, syscall.ECONNREFUSED):
		msg = fmt.Sprintf("nothing listens at %s (%v): check the address in --nats, and that NATS runs there", where, cause)
	default:
		msg = fmt.Sprintf("cannot connect to NATS at %s (%v): check the address in --nats, "+
			"and the network between this part and NATS", where, cause)
	}
	return &connectFailure{msg: msg, errs: errs}
}

// credential names the credential the connection presents as an operator
// gives it to `toolbus`, which is what to change when it is refused.
func (w *watch) credential() string {
	switch w.auth {
	case "WithUserPassword":
		return "--nats-user with --nats-password or --nats-password-file"
	case "WithToken":
		return "--nats-token or --token-file"
	case "WithNkeySeedFile":
		return "the seed file of --nats-nkey"
	case "WithCredsFile":
		return "the file of --nats-creds, which is read again at every attempt"
	}
	if w.urlCreds {
		return "the credentials in the --nats URL"
	}
	return "it presents none: give --nats-user and --nats-password, --nats-token or --token-file, --nats-nkey or --nats-creds"
}
