package a2a

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
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
