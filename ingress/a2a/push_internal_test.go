package a2a

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	a2a "github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/internal/egress"
)

// names answers lookups from a table; a name not in it does not resolve.
type names map[string]string

func (n names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := n[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestPushURLRefusalTellsNoResolution checks that a push notification URL
// whose host name resolves inside is refused in the words a name that
// does not resolve gets, so the answer is no oracle of the operator's
// names, while an address the caller wrote is named with its range.
func TestPushURLRefusalTellsNoResolution(t *testing.T) {
	g, err := egress.New(egress.WithResolver(names{"inside.test": "10.1.2.3", "public.test": "203.0.113.10"}))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{guard: g, push: &PushStore{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	check := func(url string) error {
		return s.checkPush(context.Background(), &a2a.PushConfig{URL: url})
	}
	if err := check("https://public.test/hook"); err != nil {
		t.Fatalf("checkPush(public name) = %v, want it admitted", err)
	}
	inside, nowhere := check("https://inside.test/hook"), check("https://nowhere.test/hook")
	if !errors.Is(inside, a2a.ErrInvalidParams) || !errors.Is(nowhere, a2a.ErrInvalidParams) {
		t.Fatalf("checkPush(name inside) = %v, (name that does not resolve) = %v, want invalid params for both", inside, nowhere)
	}
	if got, want := strings.ReplaceAll(nowhere.Error(), "nowhere.test", "inside.test"), inside.Error(); got != want {
		t.Errorf("refusal of a name that does not resolve = %q, of a name inside = %q, want the same words", got, want)
	}
	if strings.Contains(inside.Error(), "10.") || strings.Contains(inside.Error(), "private") {
		t.Errorf("refusal of a name inside = %q, want neither its address nor its range", inside)
	}
	if err := check("http://10.1.2.3/hook"); err == nil || !strings.Contains(err.Error(), "private address") {
		t.Errorf("checkPush(private address) = %v, want a refusal naming the range", err)
	}
}

// TestPushPost checks that a notification goes out through the webhook
// sender with A2A's headers: the config's token, and its credentials
// under the first scheme it names that is Bearer or Basic; and that a
// receiver's failure is one attempt with its class, not retried (the
// next change of the task's state is the next notification). The sender
// itself is tested in internal/webhook.
func TestPushPost(t *testing.T) {
	type got struct{ token, auth, agent string }
	reqs := make(chan got, 8)
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqs <- got{r.Header.Get(tokenHeader), r.Header.Get("Authorization"), r.Header.Get("User-Agent")}
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(srv.Close)
	g, err := egress.New(egress.WithAllow("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	sender, err := newPushSender(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sender.Close)
	s := &Server{sender: sender}
	for _, tc := range []struct {
		name string
		auth *a2a.PushAuthInfo
		want string
	}{
		{"no authentication", nil, ""},
		{"first known scheme", &a2a.PushAuthInfo{Schemes: []string{"Digest", "basic", "Bearer"}, Credentials: "cred"}, "Basic cred"},
		{"bearer", &a2a.PushAuthInfo{Schemes: []string{"Bearer"}, Credentials: "cred"}, "Bearer cred"},
		{"no known scheme", &a2a.PushAuthInfo{Schemes: []string{"Digest"}, Credentials: "cred"}, ""},
		{"no credentials", &a2a.PushAuthInfo{Schemes: []string{"Bearer"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.post(context.Background(), &a2a.PushConfig{URL: srv.URL, Token: "tok", Auth: tc.auth}, []byte(`{}`)); err != nil {
				t.Fatalf("post = %v, want nil", err)
			}
			if r := <-reqs; r != (got{"tok", tc.want, "toolbus-a2a-push"}) {
				t.Errorf("notification headers = %+v, want token tok, Authorization %q, User-Agent toolbus-a2a-push", r, tc.want)
			}
		})
	}
	status.Store(http.StatusServiceUnavailable)
	err = s.post(context.Background(), &a2a.PushConfig{URL: srv.URL}, []byte(`{}`))
	if c := egress.Classify(err); c != "status 503" {
		t.Errorf("post to a receiver answering 503 = %v (class %q), want class status 503", err, c)
	}
	if n := len(reqs); n != 1 {
		t.Errorf("post to a receiver answering 503 made %d attempts, want 1", n)
	}
}
