package worker_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// announced is one announcement a test heard, with the method its subject
// names ("" for the shared subject of older workers).
type announced struct {
	method string
	schema.Announcement
}

// listen hears the announcements of the cluster, as an ingress does,
// until the test ends; a message that is not one announcement of the
// method its subject names fails the test.
func listen(t *testing.T, nc *nats.Conn) <-chan announced {
	t.Helper()
	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	feed, err := bus.NewAnnouncements(nc, subjects)
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan announced, 256)
	stop, err := feed.Watch(func(method string, data []byte) {
		a, bad, err := schema.ParseAnnouncement(data)
		if err != nil || len(bad) > 0 {
			t.Errorf("ParseAnnouncement(%s) = %v, %v", data, bad, err)
			return
		}
		if method == "" || len(a.Tools) != 1 || a.Tools[0].Name != method {
			t.Errorf("announcement %s on the subject of %q, want one descriptor of the method its subject names", data, method)
			return
		}
		select {
		case heard <- announced{method, a}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return heard
}

func TestDiscoveryAnnounces(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithAnnounce(50*time.Millisecond))
	heard := listen(t, c.caller)
	if err := c.rt.Handle("math.add", worker.Typed(add)); err != nil {
		t.Fatal(err)
	}
	c.start(t)

	next := func() announced {
		t.Helper()
		select {
		case a := <-heard:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("no announcement within 10s")
		}
		return announced{}
	}
	first := next()
	if first.Leaving || first.method != "math.add" || first.IntervalMS != 50 || len(first.Tools[0].Params) == 0 {
		t.Fatalf("first announcement = %+v, want math.add with its schema every 50ms", first)
	}
	// Methods registered after Start are announced without waiting, each
	// on its own subject; a pattern's wildcard is written so that it can
	// be published.
	noop := func(context.Context, *worker.Request) (any, error) { return nil, nil }
	if err := c.rt.HandleFunc("late", noop); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.HandleFunc("fam.*", noop); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		seen[next().method] = true
	}
	if want := []string{"fam.*", "late", "math.add"}; !slices.Equal(slices.Sorted(maps.Keys(seen)), want) {
		t.Errorf("announced methods = %v, want %v", slices.Sorted(maps.Keys(seen)), want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Every method leaves, each on its subject.
	left := map[string]bool{}
	for len(left) < 3 {
		a := next()
		if a.Worker != first.Worker {
			t.Fatalf("announcement of worker %q, want only %q", a.Worker, first.Worker)
		}
		if a.Leaving {
			left[a.method] = true
		}
	}
}

func TestWithAnnounceBounds(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tests := []struct {
		name     string
		interval time.Duration
		wantErr  bool
	}{
		{"the default", 0, false},
		{"the longest", bus.MaxAnnounceInterval, false},
		{"longer than listeners wait", bus.MaxAnnounceInterval + time.Second, true},
		{"negative", -time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, err := worker.New(nc, worker.WithAnnounce(tt.interval))
			if (err != nil) != tt.wantErr {
				t.Fatalf("New(WithAnnounce(%v)) error = %v, want error %v", tt.interval, err, tt.wantErr)
			}
			if rt != nil {
				rt.Shutdown(context.Background())
			}
		})
	}
}

// TestAnnouncementsPublishNoMoreThanOwnSubjects checks that a runtime
// publishes nothing on the shared announce subject of older workers, so
// that a NATS user granted only its methods' announce subjects is never
// refused.
func TestAnnouncementsPublishNoMoreThanOwnSubjects(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithAnnounce(20*time.Millisecond))
	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	shared, err := c.caller.SubscribeSync(subjects.Announce())
	if err != nil {
		t.Fatal(err)
	}
	heard := listen(t, c.caller)
	if err := c.rt.Handle("math.add", worker.Typed(add)); err != nil {
		t.Fatal(err)
	}
	c.start(t)
	for range 3 {
		select {
		case <-heard:
		case <-time.After(10 * time.Second):
			t.Fatal("no announcement within 10s")
		}
	}
	// The connection hands messages on in the order it reads them, so
	// one on the shared subject sent before the last heard is held by now.
	if n, _, err := shared.Pending(); err != nil || n != 0 {
		t.Errorf("the shared subject carried %d messages (%v), want none", n, err)
	}
}
