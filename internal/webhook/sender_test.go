package webhook_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/internal/egress/egresstest"
	"github.com/toolbus/toolbus/internal/webhook"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitBound bounds a wait for something a test expects; it is a bound on
// a hang, not a timing goal.
const waitBound = 20 * time.Second

// newSender returns a sender through a guard of n that admits loopback
// receivers, closed when the test ends.
func newSender(t *testing.T, n *egresstest.Net, opts ...webhook.Option) *webhook.Sender {
	t.Helper()
	if n == nil {
		n = egresstest.NewNet(t, nil)
	}
	g, err := egress.New(egress.WithAllow("127.0.0.1"), egress.WithResolver(n), egress.WithDialer(n.Dial))
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.New(g, opts...)
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// got is a request as a receiver got it.
type got struct {
	header http.Header
	body   string
}

// receiver answers each request with the next status of statuses (the
// last repeating) and hands the request on.
func receiver(t *testing.T, statuses ...int) (url string, reqs chan got) {
	t.Helper()
	reqs = make(chan got, 64)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- got{r.Header.Clone(), string(b)}
		mu.Lock()
		code := statuses[min(n, len(statuses)-1)]
		n++
		mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hook", reqs
}

// TestWireFormat pins what a receiver gets, byte for byte, from each of
// the two schemes toolbus sends: a job callback signed with HMAC at the
// sender's clock, and an A2A push notification that carries its config's
// token and credentials as plain headers.
func TestWireFormat(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	body := `{"id":"01j","state":"succeeded"}`
	callback := webhook.HMAC{Secret: []byte("0123456789abcdef-secret"), SignatureHeader: "Toolbus-Signature", TimestampHeader: "Toolbus-Timestamp"}
	for _, tc := range []struct {
		name  string
		agent string
		d     webhook.Delivery
		want  map[string]string // every header but those of net/http
	}{
		{"job callback", "toolbus-callback",
			webhook.Delivery{Body: []byte(body), Header: http.Header{"Toolbus-Job-Id": {"01j"}}, Sign: callback},
			map[string]string{
				"Content-Type":      "application/json",
				"User-Agent":        "toolbus-callback",
				"Toolbus-Job-Id":    "01j",
				"Toolbus-Timestamp": "1800000000",
				// HMAC-SHA256 of "1800000000." + body under the secret,
				// computed apart from this code (openssl dgst -sha256 -hmac).
				"Toolbus-Signature": "v1=c9f858461f98f1451cff9c29a30a209edca21705682f3842ff2b783a277f803e",
			}},
		{"A2A push notification", "toolbus-a2a-push",
			webhook.Delivery{Body: []byte(body), Header: http.Header{"X-A2A-Notification-Token": {"tok"}, "Authorization": {"Bearer cred"}}},
			map[string]string{
				"Content-Type":             "application/json",
				"User-Agent":               "toolbus-a2a-push",
				"X-A2A-Notification-Token": "tok",
				"Authorization":            "Bearer cred",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, reqs := receiver(t, http.StatusNoContent)
			s := newSender(t, nil, webhook.WithUserAgent(tc.agent), webhook.WithClock(func() time.Time { return at }))
			tc.d.URL = url
			if err := s.Deliver(context.Background(), tc.d); err != nil {
				t.Fatalf("Deliver = %v, want nil", err)
			}
			r := <-reqs
			if r.body != body {
				t.Errorf("body = %s, want %s", r.body, body)
			}
			for k := range r.header {
				if k == "Content-Length" || k == "Accept-Encoding" {
					continue
				}
				if !wanted(tc.want, k) {
					t.Errorf("header %s: %q, want none", k, r.header.Values(k))
				}
			}
			for k, v := range tc.want {
				if got := r.header.Values(k); len(got) != 1 || got[0] != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

// wanted reports whether want names header k, in any case.
func wanted(want map[string]string, k string) bool {
	for w := range want {
		if http.CanonicalHeaderKey(w) == k {
			return true
		}
	}
	return false
}

// TestFailureClasses checks the class of each way an attempt fails, and
// that a class holds no word of the receiver.
func TestFailureClasses(t *testing.T) {
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()
	nats := egresstest.NATS(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/busy":
			http.Error(w, "upstream NBANNERSECRET is down", http.StatusServiceUnavailable)
		case "/moved":
			http.Redirect(w, r, "http://10.0.0.1/NBANNERSECRET", http.StatusFound)
		case "/gone":
			http.Error(w, "NBANNERSECRET", http.StatusGone)
		}
	}))
	t.Cleanup(srv.Close)
	n := egresstest.NewNet(t, map[string][]string{"slow.test": {"203.0.113.50"}, "inside.test": {"10.0.0.1"}})
	n.Hang("203.0.113.50:80")
	s := newSender(t, n, webhook.WithTimeout(300*time.Millisecond))
	for _, tc := range []struct {
		name, url string
		want      egress.Class
	}{
		{"refused", "http://" + closed + "/hook", egress.ClassRefused},
		{"a NATS server's banner", "http://" + nats + "/hook", egress.ClassProtocol},
		{"error status with a body", srv.URL + "/busy", "status 503"},
		{"client error status", srv.URL + "/gone", "status 410"},
		{"redirect, not followed", srv.URL + "/moved", "status 302"},
		{"timeout", "http://slow.test/hook", egress.ClassTimeout},
		{"name that resolves inside", "http://inside.test/hook", egress.ClassBlocked},
		{"private address", "http://10.0.0.1/hook", egress.ClassBlocked},
		{"loopback not allowed on IPv6", "http://[::1]:9/hook", egress.ClassBlocked},
		{"name that does not resolve", "http://nowhere.test/hook", egress.ClassDNS},
		{"not a URL", "http://%zz/", egress.ClassFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts []webhook.Attempt
			err := s.Deliver(context.Background(), webhook.Delivery{URL: tc.url, Body: []byte(`{}`),
				Report: func(a webhook.Attempt) { attempts = append(attempts, a) }})
			if got := egress.Classify(err); got != tc.want {
				t.Errorf("Classify(Deliver(%s)) = %q (%v), want %q", tc.url, got, err, tc.want)
			}
			if len(attempts) != 1 || attempts[0].Class != tc.want || attempts[0].Err == nil || !attempts[0].Last {
				t.Fatalf("attempts = %+v, want one, the last, failed with class %q", attempts, tc.want)
			}
			if c := attempts[0].Class; !c.Valid() || strings.Contains(string(c), "NBANNERSECRET") {
				t.Errorf("class = %q, want a class that holds no word of the receiver", c)
			}
		})
	}
}

// TestAnswerBounded checks that a sender reads at most MaxAnswerBytes of
// an answer: a receiver that never ends its answer does not hold the
// delivery.
func TestAnswerBounded(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 4096)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			select {
			case <-release:
				return
			case <-r.Context().Done():
				return
			default:
			}
		}
	}))
	t.Cleanup(srv.Close)
	defer close(release)
	s := newSender(t, nil, webhook.WithTimeout(time.Hour))
	done := make(chan error, 1)
	go func() { done <- s.Deliver(context.Background(), webhook.Delivery{URL: srv.URL, Body: []byte(`{}`)}) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Deliver = %v, want nil: the answer was 200", err)
		}
	case <-time.After(waitBound):
		t.Fatal("Deliver still reads an answer that never ends")
	}
}

func TestNew(t *testing.T) {
	g, err := egress.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  webhook.Option
		ok   bool
	}{
		{"one attempt, no backoff", webhook.WithRetry(webhook.Retry{Attempts: 1}), true},
		{"retries", webhook.WithRetry(webhook.Retry{Attempts: 5, Min: time.Second, Max: time.Minute}), true},
		{"the most attempts", webhook.WithRetry(webhook.Retry{Attempts: webhook.MaxAttempts, Min: time.Second, Max: time.Second}), true},
		{"no attempt", webhook.WithRetry(webhook.Retry{}), false},
		{"too many attempts", webhook.WithRetry(webhook.Retry{Attempts: webhook.MaxAttempts + 1, Min: time.Second, Max: time.Second}), false},
		{"retries without backoff", webhook.WithRetry(webhook.Retry{Attempts: 2}), false},
		{"min over max", webhook.WithRetry(webhook.Retry{Attempts: 2, Min: time.Minute, Max: time.Second}), false},
		{"timeout", webhook.WithTimeout(time.Second), true},
		{"zero timeout", webhook.WithTimeout(0), false},
		{"user agent", webhook.WithUserAgent("toolbus-test"), true},
		{"empty user agent", webhook.WithUserAgent(""), false},
		{"nil clock", webhook.WithClock(nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := webhook.New(g, tc.opt)
			if (err == nil) != tc.ok {
				t.Errorf("New(%s) = %v, want ok %v", tc.name, err, tc.ok)
			}
			s.Close()
		})
	}
	if _, err := webhook.New(nil); err == nil {
		t.Error("New(nil guard) = nil error, want one")
	}
}
