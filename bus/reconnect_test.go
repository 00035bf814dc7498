package bus_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/testwait"
)

// records is a slog handler that keeps every record, and hands those
// with message msg to a channel as well.
type records struct {
	msg  string
	ch   chan slog.Record
	mu   *sync.Mutex
	all  *[]slog.Record
	with []slog.Attr
}

func newRecords(msg string) *records {
	return &records{msg: msg, ch: make(chan slog.Record, 1000), mu: &sync.Mutex{}, all: &[]slog.Record{}}
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	rec = rec.Clone()
	rec.AddAttrs(r.with...)
	r.mu.Lock()
	*r.all = append(*r.all, rec)
	r.mu.Unlock()
	if rec.Message == r.msg {
		select {
		case r.ch <- rec:
		default:
		}
	}
	return nil
}

func (r *records) WithAttrs(as []slog.Attr) slog.Handler {
	c := *r
	c.with = append(append([]slog.Attr{}, r.with...), as...)
	return &c
}

func (r *records) WithGroup(string) slog.Handler { return r }

// count returns how many records so far satisfy keep.
func (r *records) count(keep func(slog.Record) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range *r.all {
		if keep(rec) {
			n++
		}
	}
	return n
}

// next returns the next record with the handler's message.
func (r *records) next(t *testing.T) slog.Record {
	t.Helper()
	select {
	case rec := <-r.ch:
		return rec
	case <-time.After(testwait.Limit):
		t.Fatalf("no %q record after %v", r.msg, testwait.Limit)
		return slog.Record{}
	}
}

func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// waitStatus returns the first error on statuses that satisfies keep.
func waitStatus(t *testing.T, statuses <-chan error, keep func(error) bool) error {
	t.Helper()
	limit := time.After(testwait.Limit)
	for {
		select {
		case err := <-statuses:
			if keep(err) {
				return err
			}
		case <-limit:
			t.Fatalf("no such status after %v", testwait.Limit)
			return nil
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// httpAddr returns the address of an HTTP server, which does not speak
// NATS.
func httpAddr(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// shortGreeting bounds how long a client waits for a server's INFO, so
// that a server that says nothing is given up on soon.
var shortGreeting = bus.WithNATSOptions(nats.Timeout(200 * time.Millisecond))

// TestConnectNamesWhatIsWrong checks that a first connection that fails
// says which address, why, and which flag to change.
func TestConnectNamesWhatIsWrong(t *testing.T) {
	tests := []struct {
		name   string
		addr   string
		is     error
		phrase string
	}{
		{"closed port", closedAddr(t), syscall.ECONNREFUSED, "nothing listens at"},
		{"http port", httpAddr(t), bus.ErrNotNATS, "is this the HTTP port?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := bus.Connect("nats://"+tt.addr, shortGreeting)
			if err == nil {
				nc.Close()
				t.Fatalf("Connect(%s) = nil error, want one", tt.addr)
			}
			if !errors.Is(err, tt.is) {
				t.Errorf("Connect(%s) = %v, want it to wrap %v", tt.addr, err, tt.is)
			}
			// The words are the contract here: an operator reads them.
			for _, want := range []string{tt.addr, tt.phrase, "--nats"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Connect(%s) = %q, want it to say %q", tt.addr, err, want)
				}
			}
		})
	}
}

// TestRetryWarnsAtEachStep checks that a connection that keeps trying
// logs one warning per backoff step naming the address, the cause and the
// flag, and tells its status function the same.
func TestRetryWarnsAtEachStep(t *testing.T) {
	tests := []struct {
		name   string
		addr   string
		is     error
		phrase string
	}{
		{"closed port", closedAddr(t), syscall.ECONNREFUSED, "nothing listens at"},
		{"http port", httpAddr(t), bus.ErrNotNATS, "did not speak NATS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := newRecords("nats not connected")
			statuses := make(chan error, 1000)
			nc, err := bus.Connect("nats://"+tt.addr, shortGreeting, bus.WithRetryOnFailedConnect(),
				bus.WithLogger(slog.New(log)), bus.WithReconnectWait(time.Millisecond, 2*time.Millisecond),
				bus.WithStatusFunc(func(_ *nats.Conn, err error) {
					select {
					case statuses <- err:
					default:
					}
				}))
			if err != nil {
				t.Fatalf("Connect with retry = %v, want nil", err)
			}
			defer nc.Close()
			for range 3 {
				rec := log.next(t)
				if rec.Level != slog.LevelWarn {
					t.Errorf("step logged at %v, want %v", rec.Level, slog.LevelWarn)
				}
				for _, want := range []string{tt.addr, tt.phrase, "--nats"} {
					if msg := attr(rec, "err"); !strings.Contains(msg, want) {
						t.Errorf("step logged %q, want it to say %q", msg, want)
					}
				}
			}
			if err := <-statuses; !errors.Is(err, tt.is) {
				t.Errorf("status told %v, want it to wrap %v", err, tt.is)
			}
		})
	}
}

// TestReconnectNamesAServerThatIsNotNATS checks that a connection that
// was up and finds another server on its port when it reconnects says so.
func TestReconnectNamesAServerThatIsNotNATS(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := e.Server().Addr().String()
	statuses := make(chan error, 1000)
	nc, err := bus.Connect(e.ClientURL(), bus.WithToken(e.Token()), shortGreeting,
		bus.WithLogger(slog.New(slog.DiscardHandler)), bus.WithReconnectWait(time.Millisecond, 2*time.Millisecond),
		bus.WithStatusFunc(func(_ *nats.Conn, err error) {
			select {
			case statuses <- err:
			default:
			}
		}))
	if err != nil {
		e.Shutdown()
		t.Fatal(err)
	}
	defer nc.Close()
	e.Shutdown()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the port of the stopped server is taken: %v", err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Minute}
	go srv.Serve(l)
	defer srv.Close()
	err = waitStatus(t, statuses, func(err error) bool { return errors.Is(err, bus.ErrNotNATS) })
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "--nats") {
		t.Errorf("status told %q, want it to name %s and --nats", err, addr)
	}
}

// TestRefusedCredentialsBackOff checks what a connection does when the
// server it was connected to comes back with another token: the part is
// not ready and says the credentials were refused and which flag gives
// them, the process is not stopped, each step is logged once with a pause
// that grows, and the part recovers by itself once the server takes its
// credential again.
func TestRefusedCredentialsBackOff(t *testing.T) {
	start := func(addr, token string) *bus.Embedded {
		t.Helper()
		e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: addr, Token: token})
		if err != nil {
			t.Fatalf("start NATS on %s: %v", addr, err)
		}
		return e
	}
	first := start("127.0.0.1:0", "first-token")
	addr := first.Server().Addr().String()
	url := first.ClientURL()

	log := newRecords("nats not connected")
	st := bus.NewStartup(slog.New(slog.DiscardHandler))
	watch := st.WatchConn("test", url)
	statuses := make(chan error, 1000)
	nc, err := bus.Connect(url, bus.WithToken("first-token"), bus.WithLogger(slog.New(log)),
		bus.WithReconnectWait(time.Millisecond, 2*time.Millisecond),
		bus.WithStatusFunc(func(nc *nats.Conn, err error) {
			watch(nc, err)
			select {
			case statuses <- err:
			default:
			}
		}))
	if err != nil {
		first.Shutdown()
		t.Fatal(err)
	}
	defer nc.Close()
	if err := <-statuses; err != nil {
		t.Fatalf("first status = %v, want nil (connected)", err)
	}
	st.Begin()
	<-st.Ready()

	first.Shutdown()
	second := start(addr, "second-token")
	defer func() { second.Shutdown() }()
	waitStatus(t, statuses, func(err error) bool { return errors.Is(err, bus.ErrCredentials) })
	reason := st.Err()
	if reason == nil {
		t.Fatal("Startup.Err() = nil after the credentials were refused, want the reason")
	}
	for _, want := range []string{"refused the credentials", "now expects", "--nats-token", addr} {
		if !strings.Contains(reason.Error(), want) {
			t.Errorf("Startup.Err() = %q, want it to say %q", reason, want)
		}
	}
	select {
	case err := <-st.Fatal():
		t.Errorf("Fatal() = %v once the part had been up, want nothing: the part waits for the fix", err)
	default:
	}

	// A few more steps: each refused attempt is one line, and the
	// pause grows.
	refused := func(rec slog.Record) bool {
		return strings.Contains(attr(rec, "err"), "refused the credentials") ||
			strings.Contains(strings.ToLower(attr(rec, "err")), "authorization violation")
	}
	var waits []time.Duration
	for len(waits) < 5 {
		rec := log.next(t)
		if !refused(rec) {
			continue
		}
		d, err := time.ParseDuration(attr(rec, "retry_in"))
		if err != nil {
			t.Fatalf("retry_in %q: %v", attr(rec, "retry_in"), err)
		}
		waits = append(waits, d)
	}
	lines := log.count(refused)
	v, err := second.Server().Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(lines) > v.TotalConnections {
		t.Errorf("%d log lines about the refused credentials for %d attempts, want at most one per attempt", lines, v.TotalConnections)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] < waits[i-1] {
			t.Errorf("pauses after refused credentials = %v, want them to grow", waits)
			break
		}
	}
	if waits[len(waits)-1] <= waits[0] {
		t.Errorf("pauses after refused credentials = %v, want them to grow", waits)
	}
	if errs := log.count(func(rec slog.Record) bool { return rec.Level >= slog.LevelError }); errs > 0 {
		t.Errorf("%d error records, want none: a refused attempt is a warning of its step", errs)
	}

	// The operator gives the server the part's credential back.
	second.Shutdown()
	second = start(addr, "first-token")
	testwait.Eventually(t, func() bool { return st.Err() == nil }, "the part is ready again")
}

// TestRefusedCredentialsAtStartIsFatal checks that a credential refused
// before the connection was ever up stops the process, as a mistake of
// its configuration, with the error classified as such.
func TestRefusedCredentialsAtStartIsFatal(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{Listen: "127.0.0.1:0", Token: "right"})
	st := bus.NewStartup(slog.New(slog.DiscardHandler))
	nc, err := bus.Connect(e.ClientURL(), bus.WithToken("wrong"), bus.WithRetryOnFailedConnect(),
		bus.WithLogger(slog.New(slog.DiscardHandler)), bus.WithReconnectWait(time.Millisecond, 2*time.Millisecond),
		bus.WithStatusFunc(st.WatchConn("test", e.ClientURL())))
	if err != nil {
		t.Fatalf("Connect with retry = %v, want nil", err)
	}
	defer nc.Close()
	select {
	case err := <-st.Fatal():
		if !errors.Is(err, bus.ErrCredentials) {
			t.Errorf("Fatal() = %v, want it to wrap %v", err, bus.ErrCredentials)
		}
	case <-time.After(testwait.Limit):
		t.Fatalf("no fatal error after %v, want the refusal of the credentials", testwait.Limit)
	}
}
