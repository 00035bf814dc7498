package worker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// holding registers method with a handler that signals started, then holds
// the call until release is closed or its context ends, and reports on
// ended how: nil when released, else the cause of its context's end.
func holding(t *testing.T, rt *worker.Runtime, method string, started chan<- struct{}, release <-chan struct{}, ended chan<- error) {
	t.Helper()
	if err := rt.HandleFunc(method, func(ctx context.Context, _ *worker.Request) (any, error) {
		started <- struct{}{}
		select {
		case <-release:
			ended <- nil
			return "released", nil
		case <-ctx.Done():
			ended <- context.Cause(ctx)
			return nil, ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
}

// progress reads the next message of sub and fails the test unless it is
// the progress message want.
func progress(t *testing.T, sub *nats.Subscription, want string) *nats.Msg {
	t.Helper()
	m := next(t, sub)
	if got := m.Header.Get(schema.HeaderProgress); got != want {
		t.Fatalf("%s = %q, want %q", schema.HeaderProgress, got, want)
	}
	return m
}

func TestCallOfAVanishedCallerIsCanceled(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMetrics(reg))
	started, ended := make(chan struct{}, 1), make(chan error, 1)
	holding(t, c.rt, "work.slow", started, nil, ended)
	c.start(t)

	ingress := c.connect(t)
	sub := watchFrom(t, ingress, callMsg(t, "work.slow", "", time.Now().Add(time.Minute)), "20")
	<-started
	if ack := progress(t, sub, schema.ProgressAck); ack.Reply == "" {
		t.Error("the ack carries no reply subject: nothing probes whether its caller listens")
	}
	// The ingress dies: its connection closes without a drain, and with
	// it the subscription of its reply subject.
	ingress.Close()
	vanished := time.Now()
	select {
	case err := <-ended:
		if !errors.Is(err, worker.ErrCallerGone) {
			t.Fatalf("the handler's context ended with cause %v, want %v", err, worker.ErrCallerGone)
		}
		t.Logf("canceled %v after its caller vanished (heartbeat 20ms)", time.Since(vanished))
	case <-time.After(20 * time.Second):
		t.Fatal("the call of a vanished caller was never canceled")
	}
	if got := value(t, reg, "toolbus_worker_orphaned_total", map[string]string{"method": "work.slow"}); got != 1 {
		t.Errorf("toolbus_worker_orphaned_total = %v, want 1", got)
	}
	if logs := c.logs.String(); !strings.Contains(logs, "canceled a call nobody listens for any more") {
		t.Errorf("no log line about the canceled call in:\n%s", logs)
	}
}

// TestCallerWithoutHeartbeatsIsLeftAlone: a call from an ingress that does
// not ask for heartbeats (an older one, or another implementation) is
// never probed, so it runs on when that ingress vanishes; a call that asked
// for them, whose ingress vanished at the same moment, is canceled.
func TestCallerWithoutHeartbeatsIsLeftAlone(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	modernEnded, legacyEnded := make(chan error, 1), make(chan error, 1)
	holding(t, c.rt, "work.modern", started, release, modernEnded)
	holding(t, c.rt, "work.legacy", started, release, legacyEnded)
	c.start(t)

	modern, legacy := c.connect(t), c.connect(t)
	watchFrom(t, modern, callMsg(t, "work.modern", "", time.Now().Add(time.Minute)), "20")
	watchFrom(t, legacy, callMsg(t, "work.legacy", "", time.Now().Add(time.Minute)), "")
	<-started
	<-started
	modern.Close()
	legacy.Close()
	select {
	case err := <-modernEnded:
		if !errors.Is(err, worker.ErrCallerGone) {
			t.Fatalf("the call that asked for heartbeats ended with cause %v, want %v", err, worker.ErrCallerGone)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the call that asked for heartbeats was never canceled")
	}
	select {
	case err := <-legacyEnded:
		t.Fatalf("the call without heartbeats ended with %v before it was released", err)
	default:
	}
	close(release)
	if err := <-legacyEnded; err != nil {
		t.Errorf("the call without heartbeats ended with cause %v, want released", err)
	}
}

// cutter dials TCP connections for a NATS client until it is cut: cut
// closes the connections it made and refuses new ones until open.
type cutter struct {
	mu      sync.Mutex
	shut    bool
	conns   []net.Conn
	refused chan struct{} // one value per refused dial, when there is room
}

var _ nats.CustomDialer = (*cutter)(nil)

func (g *cutter) Dial(network, address string) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		select {
		case g.refused <- struct{}{}:
		default:
		}
		return nil, errors.New("the connection is cut")
	}
	conn, err := net.Dial(network, address)
	if err == nil {
		g.conns = append(g.conns, conn)
	}
	return conn, err
}

func (g *cutter) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = true
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

func (g *cutter) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut = false
}

// cuttable connects to e over TCP through a cutter. up receives a value
// each time the connection is established (the first time included).
func cuttable(t *testing.T, e *bus.Embedded) (nc *nats.Conn, g *cutter, up <-chan struct{}) {
	t.Helper()
	g = &cutter{refused: make(chan struct{}, 8)}
	ups := make(chan struct{}, 8)
	nc, err := bus.Connect(e.ClientURL(), bus.WithToken(e.Token()), bus.WithLogger(quiet), bus.WithNATSOptions(nats.SetCustomDialer(g)),
		bus.WithStatusFunc(func(_ *nats.Conn, err error) {
			if err == nil {
				ups <- struct{}{}
			}
		}))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	<-ups
	return nc, g, ups
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// outage cuts g's connection off for several reconnect attempts, each a
// quarter of a second apart at least: dozens of 20ms heartbeat intervals.
func outage(t *testing.T, g *cutter, up <-chan struct{}) {
	t.Helper()
	g.cut()
	cut := time.Now()
	for range 3 {
		<-g.refused
	}
	g.open()
	<-up
	t.Logf("cut off for %v (a heartbeat every 20ms)", time.Since(cut))
}

// startHolding starts a runtime on nc serving work.slow with [holding]; it
// is shut down when the test ends.
func startHolding(t *testing.T, nc *nats.Conn, started chan<- struct{}, release <-chan struct{}, ended chan<- error) {
	t.Helper()
	rt, err := worker.New(nc, worker.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	holding(t, rt, "work.slow", started, release, ended)
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
}

// runsOn checks that a call whose progress messages arrive on sub is still
// running once a few heartbeats probed since a connection came back, then
// releases it and checks its answer.
func runsOn(t *testing.T, sub *nats.Subscription, release chan<- struct{}, ended <-chan error) {
	t.Helper()
	// Heartbeats the worker sent during its own outage arrive now,
	// without a probe; those sent since probe again.
	for probed := 0; probed < 2*3; {
		if m := progress(t, sub, schema.ProgressBeat); m.Reply != "" {
			probed++
		}
	}
	select {
	case err := <-ended:
		t.Fatalf("the call ended with cause %v after the outage, want it running", err)
	default:
	}
	close(release)
	if err := <-ended; err != nil {
		t.Fatalf("the call ended with cause %v, want released", err)
	}
	for {
		m := next(t, sub)
		if m.Header.Get(schema.HeaderProgress) != "" {
			continue // a heartbeat sent before the reply
		}
		if r, err := bus.ReadReply(m); err != nil || string(r.Result) != `"released"` {
			t.Fatalf("reply = %v, %v, want \"released\"", r, err)
		}
		return
	}
}

// TestWorkerOutageCancelsNothing: a worker that loses its own connection to
// NATS for many heartbeat intervals, and gets it back, goes on with the
// calls of an ingress that never went away.
func TestWorkerOutageCancelsNothing(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	wnc, g, up := cuttable(t, e)
	started, ended := make(chan struct{}, 1), make(chan error, 1)
	release := make(chan struct{})
	startHolding(t, wnc, started, release, ended)

	ingress, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ingress.Close)
	sub := watchFrom(t, ingress, callMsg(t, "work.slow", "", time.Now().Add(time.Minute)), "20")
	<-started
	progress(t, sub, schema.ProgressAck)
	outage(t, g, up)
	runsOn(t, sub, release, ended)
}

// TestIngressOutageLastsAsLongAsItsPatience: an ingress that loses its
// connection for many heartbeat intervals has its call canceled when it
// waits for 3 silent intervals (the default), and finds it still running
// when it comes back if it said it waits longer (Toolbus-Heartbeat-Misses).
func TestIngressOutageLastsAsLongAsItsPatience(t *testing.T) {
	for _, tc := range []struct {
		name, misses string
		canceled     bool
	}{
		{"default patience", "", true},
		{"patient", "1000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatalf("StartEmbedded: %v", err)
			}
			t.Cleanup(e.Shutdown)
			wnc, err := e.Connect(bus.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(wnc.Close)
			started, ended := make(chan struct{}, 1), make(chan error, 1)
			release := make(chan struct{})
			startHolding(t, wnc, started, release, ended)

			ingress, g, up := cuttable(t, e)
			msg := callMsg(t, "work.slow", "", time.Now().Add(time.Minute))
			if tc.misses != "" {
				msg.Header.Set(schema.HeaderHeartbeatMisses, tc.misses)
			}
			sub := watchFrom(t, ingress, msg, "20")
			<-started
			progress(t, sub, schema.ProgressAck)
			if !tc.canceled {
				outage(t, g, up)
				runsOn(t, sub, release, ended)
				return
			}
			g.cut()
			select {
			case err := <-ended:
				if !errors.Is(err, worker.ErrCallerGone) {
					t.Fatalf("the call ended with cause %v, want %v", err, worker.ErrCallerGone)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the call of an ingress gone for good was never canceled")
			}
			g.open()
		})
	}
}
