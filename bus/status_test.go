package bus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/bus"
)

// connectInProcess opens an in-process connection to e that the test closes.
func connectInProcess(t *testing.T, e *bus.Embedded) *nats.Conn {
	t.Helper()
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func subjects(t *testing.T, prefix string) bus.Subjects {
	t.Helper()
	s, err := bus.NewSubjects(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serveStatus serves a fake process's status on a connection of its own,
// as a separate process would, until the test ends.
func serveStatus(t *testing.T, e *bus.Embedded, prefix, kind, version string, snapshot func() bus.Status) micro.Service {
	t.Helper()
	svc, err := bus.ServeStatus(connectInProcess(t, e), subjects(t, prefix), kind, version, snapshot)
	if err != nil {
		t.Fatalf("ServeStatus(%s, %s): %v", kind, version, err)
	}
	t.Cleanup(func() { svc.Stop() })
	return svc
}

func TestGatherStatus(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	two := 2
	started := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	w1 := serveStatus(t, e, "toolbus", bus.KindWorker, "v1.2.3", func() bus.Status {
		return bus.Status{InFlight: 1, Started: started, Methods: []bus.MethodStatus{{Method: "math.add", Calls: 10, Rate: 0.5}}}
	})
	w2 := serveStatus(t, e, "toolbus", bus.KindWorker, "dev", func() bus.Status {
		return bus.Status{Methods: []bus.MethodStatus{{Method: "math.add", Calls: 5}}, Extra: map[string]any{"pool": "gpu"}}
	})
	in := serveStatus(t, e, "toolbus", bus.KindIngress, "1.2.3", func() bus.Status {
		return bus.Status{InFlight: 3, Methods: []bus.MethodStatus{{Method: "math.add", Calls: 15, Workers: &two}}}
	})
	other := serveStatus(t, e, "elsewhere", bus.KindWorker, "1.0.0", func() bus.Status { return bus.Status{} })

	host, _ := os.Hostname()
	got, err := bus.GatherStatus(context.Background(), connectInProcess(t, e), subjects(t, "toolbus"), 500*time.Millisecond)
	if err != nil {
		t.Fatalf("GatherStatus = %v", err)
	}
	byID := map[string]bus.Status{}
	for _, st := range got {
		byID[st.ID] = st
		if st.Host != host {
			t.Errorf("status %s host = %q, want %q", st.ID, st.Host, host)
		}
		if st.Extra["error"] != nil {
			t.Errorf("status %s has error %v", st.ID, st.Extra["error"])
		}
	}
	if len(got) != 3 || len(byID) != 3 {
		t.Fatalf("GatherStatus found %d statuses %+v, want 3", len(got), got)
	}
	if _, ok := byID[other.Info().ID]; ok {
		t.Errorf("GatherStatus found the instance of another prefix")
	}
	if got[0].Kind != bus.KindIngress || got[1].Kind != bus.KindWorker || got[1].ID > got[2].ID {
		t.Errorf("order = %s %s, %s %s, %s %s; want the ingress, then workers by id",
			got[0].Kind, got[0].ID, got[1].Kind, got[1].ID, got[2].Kind, got[2].ID)
	}
	if st := byID[in.Info().ID]; st.Kind != bus.KindIngress || st.InFlight != 3 || len(st.Methods) != 1 ||
		st.Methods[0].Workers == nil || *st.Methods[0].Workers != 2 || st.Started.IsZero() {
		t.Errorf("ingress status = %+v, want in-flight 3, math.add with 2 workers, a start time", st)
	}
	if st := byID[w1.Info().ID]; st.Version != "v1.2.3" || !st.Started.Equal(started) || st.Methods[0].Calls != 10 || st.Methods[0].Workers != nil {
		t.Errorf("first worker status = %+v, want version v1.2.3, its start time, 10 calls", st)
	}
	if st := byID[w2.Info().ID]; st.Version != "dev" || st.Extra["pool"] != "gpu" {
		t.Errorf("second worker status = %+v, want version dev and pool gpu", st)
	}
}

// TestServeStatusReachable checks that a status service is reachable from
// another connection as soon as ServeStatus returns. Its connection holds
// back what it writes until it sends a PING, as a slow network or a busy
// server would, so that without waiting for the server ServeStatus would
// return before the server has its subscriptions: a connection left alone
// pings only every two minutes.
func TestServeStatusReachable(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	held := &heldUntilPing{srv: e.Server()}
	nc, err := nats.Connect("", nats.InProcessServer(held))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := subjects(t, "toolbus")
	svc, err := bus.ServeStatus(nc, s, bus.KindWorker, "1.0.0", func() bus.Status { return bus.Status{} })
	if err != nil {
		t.Fatalf("ServeStatus: %v", err)
	}
	t.Cleanup(func() { svc.Stop() })
	// From here on the connection passes everything on, so that the
	// service can answer.
	held.release()
	subject := s.Status(bus.KindWorker, svc.Info().ID)
	m, reqErr := connectInProcess(t, e).Request(subject, nil, 10*time.Second)
	if late := held.lateSubscriptions(); len(late) > 0 {
		t.Errorf("the server got %q after ServeStatus returned", late)
	}
	if reqErr != nil {
		t.Fatalf("request on %s from another connection: %v", subject, reqErr)
	}
	var st bus.Status
	if err := json.Unmarshal(m.Data, &st); err != nil || st.Kind != bus.KindWorker {
		t.Fatalf("status = %s, %v; want a worker's", m.Data, err)
	}
}

// heldUntilPing makes one in-process connection to a server that passes on
// what the client writes only up to its last PING, holding the rest back
// until the next PING or until release. From then on it passes everything
// on, and keeps a copy.
type heldUntilPing struct {
	srv interface{ InProcessConn() (net.Conn, error) }

	mu       sync.Mutex
	conn     net.Conn
	held     []byte
	released bool
	late     []byte // passed on after release, what was held first
}

func (h *heldUntilPing) InProcessConn() (net.Conn, error) {
	c, err := h.srv.InProcessConn()
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil {
		c.Close()
		return nil, errors.New("heldUntilPing makes one connection only")
	}
	h.conn = c
	return heldConn{c, h}, nil
}

var ping = []byte("PING\r\n")

func (h *heldUntilPing) write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		h.late = append(h.late, p...)
		return h.conn.Write(p)
	}
	h.held = append(h.held, p...)
	i := bytes.LastIndex(h.held, ping)
	if i < 0 {
		return len(p), nil
	}
	n := i + len(ping)
	if _, err := h.conn.Write(h.held[:n]); err != nil {
		return 0, err
	}
	h.held = append(h.held[:0], h.held[n:]...)
	return len(p), nil
}

// release passes on what is held and everything written after.
func (h *heldUntilPing) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
	h.late, h.held = h.held, nil
	if len(h.late) > 0 {
		h.conn.Write(h.late) // a failure shows as the service unreachable
	}
}

// lateSubscriptions returns the SUB lines passed on since release.
func (h *heldUntilPing) lateSubscriptions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var subs []string
	for line := range strings.SplitSeq(string(h.late), "\r\n") {
		if strings.HasPrefix(line, "SUB ") {
			subs = append(subs, line)
		}
	}
	return subs
}

type heldConn struct {
	net.Conn
	h *heldUntilPing
}

func (c heldConn) Write(p []byte) (int, error) { return c.h.write(p) }

func TestGatherStatusUnanswered(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	s := subjects(t, "toolbus")
	broken := serveStatus(t, e, "toolbus", bus.KindWorker, "1.0.0", func() bus.Status { panic("broken snapshot") })
	// A service that looks like a worker's but whose endpoint never
	// answers, until the test ends.
	release := make(chan struct{})
	silentNC := connectInProcess(t, e)
	silent, err := micro.AddService(silentNC, micro.Config{
		Name: "toolbus-worker", Version: "1.0.0",
		Metadata: map[string]string{"prefix": "toolbus", "kind": bus.KindWorker, "host": "h2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(release); silent.Stop() })
	if err := silent.AddEndpoint("status", micro.HandlerFunc(func(micro.Request) { <-release }),
		micro.WithEndpointSubject(s.Status(bus.KindWorker, silent.Info().ID))); err != nil {
		t.Fatal(err)
	}
	// As ServeStatus does, so that the server has the service before
	// GatherStatus asks for it on another connection.
	if err := silentNC.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	got, err := bus.GatherStatus(ctx, connectInProcess(t, e), s, 300*time.Millisecond)
	if err != nil {
		t.Fatalf("GatherStatus = %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("GatherStatus found %+v, want 2 statuses", got)
	}
	for _, st := range got {
		if st.Extra["error"] == nil || st.Kind != bus.KindWorker {
			t.Errorf("status %+v, want a worker with an error", st)
		}
		switch st.ID {
		case broken.Info().ID:
			if st.Version != "1.0.0" {
				t.Errorf("broken worker version = %q, want 1.0.0", st.Version)
			}
		case silent.Info().ID:
			if st.Host != "h2" {
				t.Errorf("silent worker host = %q, want h2", st.Host)
			}
		default:
			t.Errorf("unknown status %+v", st)
		}
	}
}

// TestGatherStatusBounded checks that gathering ends within its wait when
// nobody of the prefix answers, whether no service exists at all or only
// one of another prefix does.
func TestGatherStatusBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other bool
	}{
		{"no service", false},
		{"another prefix only", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEmbedded(t, bus.EmbeddedConfig{})
			if tc.other {
				serveStatus(t, e, "elsewhere", bus.KindIngress, "1.0.0", func() bus.Status { return bus.Status{} })
			}
			const wait = 300 * time.Millisecond
			start := time.Now()
			got, err := bus.GatherStatus(context.Background(), connectInProcess(t, e), subjects(t, "toolbus"), wait)
			if err != nil || len(got) != 0 {
				t.Fatalf("GatherStatus = %+v, %v; want none, nil", got, err)
			}
			if d := time.Since(start); d > wait+2*time.Second {
				t.Errorf("GatherStatus took %v, want about %v at most", d, wait)
			}
		})
	}
}

func TestGatherStatusCanceled(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	serveStatus(t, e, "toolbus", bus.KindWorker, "1.0.0", func() bus.Status { return bus.Status{} })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := bus.GatherStatus(ctx, connectInProcess(t, e), subjects(t, "toolbus"), time.Minute); err == nil {
		t.Fatal("GatherStatus with a canceled context = nil, want an error")
	}
}

func TestServeStatusVersion(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	for _, tc := range []struct {
		name, version, want string
	}{
		{"semver", "1.2.3", "1.2.3"},
		{"leading v", "v1.2.3", "1.2.3"},
		{"prerelease and build", "v1.2.3-rc.1+dirty", "1.2.3-rc.1+dirty"},
		{"pseudo-version", "v0.0.0-20260101120000-abcdef123456", "0.0.0-20260101120000-abcdef123456"},
		{"word", "dev", "0.0.0+dev"},
		{"go devel", "(devel)", "0.0.0+devel"},
		{"partial", "1.2", "0.0.0+1.2"},
		{"spaces and dots", "1.2.3 (abc..def)", "0.0.0+1.2.3-abc.def"},
		{"empty", "", "0.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := serveStatus(t, e, "toolbus", bus.KindWorker, tc.version, func() bus.Status { return bus.Status{} })
			info := svc.Info()
			if info.Version != tc.want {
				t.Errorf("ServeStatus(%q) service version = %q, want %q", tc.version, info.Version, tc.want)
			}
			if info.Metadata["version"] != tc.version {
				t.Errorf("ServeStatus(%q) metadata version = %q, want it unchanged", tc.version, info.Metadata["version"])
			}
		})
	}
}

func TestServeStatusInvalid(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc := connectInProcess(t, e)
	snap := func() bus.Status { return bus.Status{} }
	for _, tc := range []struct {
		name     string
		nc       *nats.Conn
		s        bus.Subjects
		kind     string
		snapshot func() bus.Status
	}{
		{"nil connection", nil, subjects(t, "toolbus"), bus.KindWorker, snap},
		{"zero subjects", nc, bus.Subjects{}, bus.KindWorker, snap},
		{"unknown kind", nc, subjects(t, "toolbus"), "proxy", snap},
		{"nil snapshot", nc, subjects(t, "toolbus"), bus.KindWorker, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if svc, err := bus.ServeStatus(tc.nc, tc.s, tc.kind, "1.0.0", tc.snapshot); err == nil {
				svc.Stop()
				t.Fatalf("ServeStatus succeeded, want an error")
			}
		})
	}
}

// TestStatusKeepsOwnID checks that a process's own id, given by its
// snapshot, names it, so that status and the dashboard agree.
func TestStatusKeepsOwnID(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	serveStatus(t, e, "toolbus", bus.KindWorker, "dev", func() bus.Status { return bus.Status{ID: "worker-7"} })
	got, err := bus.GatherStatus(context.Background(), connectInProcess(t, e), subjects(t, "toolbus"), 300*time.Millisecond)
	if err != nil || len(got) != 1 || got[0].ID != "worker-7" {
		t.Fatalf("GatherStatus = %+v, %v; want the worker under its own id", got, err)
	}
}
