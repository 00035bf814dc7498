package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/internal/webhook"
)

// clock is a test's time: it moves only when a wait asks it to.
type clock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func newClock() *clock { return &clock{now: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// wait is a [webhook.Delivery.Wait] that records d and moves the clock
// by it at once.
func (c *clock) wait(_ context.Context, d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	return true
}

var testRetry = webhook.Retry{Attempts: 5, Min: time.Second, Max: 3 * time.Second}

var testHMAC = webhook.HMAC{Secret: []byte("0123456789abcdef-secret"), SignatureHeader: "Toolbus-Signature", TimestampHeader: "Toolbus-Timestamp"}

// TestRetry checks a delivery whose receiver fails twice: three attempts,
// each reported with its class, the waits between them doubling, and each
// attempt signed afresh at its own time.
func TestRetry(t *testing.T) {
	url, reqs := receiver(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusOK)
	c := newClock()
	s := newSender(t, nil, webhook.WithRetry(testRetry), webhook.WithClock(c.Now))
	var attempts []webhook.Attempt
	err := s.Deliver(context.Background(), webhook.Delivery{URL: url, Body: []byte(`{"n":1}`), Sign: testHMAC, Wait: c.wait,
		Report: func(a webhook.Attempt) { attempts = append(attempts, a) }})
	if err != nil {
		t.Fatalf("Deliver = %v, want nil", err)
	}
	want := []struct {
		class egress.Class
		last  bool
	}{{"status 503", false}, {"status 503", false}, {"", true}}
	if len(attempts) != len(want) {
		t.Fatalf("attempts = %+v, want %d", attempts, len(want))
	}
	for i, a := range attempts {
		if a.N != i+1 || a.Class != want[i].class || a.Last != want[i].last || (a.Err == nil) != (want[i].class == "") {
			t.Errorf("attempt %d = %+v, want class %q, last %v", i+1, a, want[i].class, want[i].last)
		}
	}
	if w := []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(c.waits, w) {
		t.Errorf("waits = %v, want %v", c.waits, w)
	}
	var stamps []string
	for range 3 {
		r := <-reqs
		if err := testHMAC.Verify(r.header, []byte(r.body), c.Now(), time.Minute); err != nil {
			t.Errorf("attempt signed at %s: Verify = %v", r.header.Get("Toolbus-Timestamp"), err)
		}
		stamps = append(stamps, r.header.Get("Toolbus-Timestamp"))
	}
	if w := []string{"1800000000", "1800000001", "1800000003"}; !slices.Equal(stamps, w) {
		t.Errorf("timestamps of the attempts = %q, want %q", stamps, w)
	}
}

// TestRetrySpent checks a delivery whose every attempt fails: it fails
// for good with the last attempt's class once the retry allows no more.
func TestRetrySpent(t *testing.T) {
	url, reqs := receiver(t, http.StatusBadGateway)
	c := newClock()
	s := newSender(t, nil, webhook.WithRetry(testRetry), webhook.WithClock(c.Now))
	var attempts []webhook.Attempt
	err := s.Deliver(context.Background(), webhook.Delivery{URL: url, Wait: c.wait,
		Report: func(a webhook.Attempt) { attempts = append(attempts, a) }})
	var e *egress.Error
	if !errors.As(err, &e) || e.Class != "status 502" {
		t.Errorf("Deliver = %v, want an *egress.Error of class status 502", err)
	}
	if len(attempts) != testRetry.Attempts || len(reqs) != testRetry.Attempts {
		t.Fatalf("%d attempts reported, %d received, want %d", len(attempts), len(reqs), testRetry.Attempts)
	}
	for i, a := range attempts {
		if last := i == len(attempts)-1; a.Last != last {
			t.Errorf("attempt %d: last = %v, want %v", a.N, a.Last, last)
		}
	}
	if w := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}; !slices.Equal(c.waits, w) {
		t.Errorf("waits = %v, want %v (doubling, at most max)", c.waits, w)
	}
}

// TestRetryGoesOn checks that a delivery taken up after attempts made
// elsewhere counts them: it waits as after them, and makes only those
// left.
func TestRetryGoesOn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tried int
		waits []time.Duration
		ns    []int
		want  error
	}{
		{"from the start", 0, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}, []int{1, 2, 3, 4, 5}, nil},
		{"after three", 3, []time.Duration{3 * time.Second, 3 * time.Second}, []int{4, 5}, nil},
		{"after all", 5, nil, nil, webhook.ErrSpent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, _ := receiver(t, http.StatusServiceUnavailable)
			c := newClock()
			s := newSender(t, nil, webhook.WithRetry(testRetry), webhook.WithClock(c.Now))
			var ns []int
			err := s.Deliver(context.Background(), webhook.Delivery{URL: url, Tried: tc.tried, Wait: c.wait,
				Report: func(a webhook.Attempt) { ns = append(ns, a.N) }})
			if tc.want != nil && !errors.Is(err, tc.want) || tc.want == nil && egress.Classify(err) != "status 503" {
				t.Errorf("Deliver = %v, want %v", err, tc.want)
			}
			if !slices.Equal(ns, tc.ns) || !slices.Equal(c.waits, tc.waits) {
				t.Errorf("attempts %v after waits %v, want %v after %v", ns, c.waits, tc.ns, tc.waits)
			}
		})
	}
}

// TestRetryStopped checks that a delivery whose wait is given up, by its
// caller or its context, stops without failing and makes no more
// attempts.
func TestRetryStopped(t *testing.T) {
	t.Run("by its wait", func(t *testing.T) {
		url, reqs := receiver(t, http.StatusServiceUnavailable)
		s := newSender(t, nil, webhook.WithRetry(testRetry))
		var attempts []webhook.Attempt
		err := s.Deliver(context.Background(), webhook.Delivery{URL: url,
			Wait:   func(context.Context, time.Duration) bool { return false },
			Report: func(a webhook.Attempt) { attempts = append(attempts, a) }})
		if !errors.Is(err, webhook.ErrStopped) {
			t.Errorf("Deliver = %v, want %v", err, webhook.ErrStopped)
		}
		if len(attempts) != 1 || attempts[0].Last || len(reqs) != 1 {
			t.Errorf("attempts = %+v (%d received), want one, not the last", attempts, len(reqs))
		}
	})
	t.Run("by its context", func(t *testing.T) {
		url, reqs := receiver(t, http.StatusServiceUnavailable)
		// A wait of an hour, which only the context can end.
		s := newSender(t, nil, webhook.WithRetry(webhook.Retry{Attempts: 2, Min: time.Hour, Max: time.Hour}))
		ctx, cancel := context.WithCancel(context.Background())
		err := s.Deliver(ctx, webhook.Delivery{URL: url, Report: func(webhook.Attempt) { cancel() }})
		if !errors.Is(err, webhook.ErrStopped) || !errors.Is(err, context.Canceled) {
			t.Errorf("Deliver = %v, want %v wrapping %v", err, webhook.ErrStopped, context.Canceled)
		}
		if len(reqs) != 1 {
			t.Errorf("%d attempts received, want 1", len(reqs))
		}
	})
}

func TestBackoff(t *testing.T) {
	r := webhook.Retry{Attempts: 10, Min: time.Second, Max: time.Minute}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {40, time.Minute}} {
		if got := r.Backoff(tc.n); got != tc.want {
			t.Errorf("Backoff(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}
