package egresstest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
)

// Net stands in for DNS and the network of outbound requests: names
// resolve through a map (an answer per lookup, the last repeating),
// loopback addresses are dialed for real, addresses marked to hang wait
// for the dial's context to end, and a dial of any other address fails
// the test, so no packet leaves loopback. It is a resolver for
// egress.WithResolver, and Dial a dialer for egress.WithDialer.
type Net struct {
	t testing.TB

	mu      sync.Mutex
	names   map[string][]string
	lookups map[string]int
	hang    map[string]bool
}

// NewNet returns a Net that resolves names (nil: none) for t.
func NewNet(t testing.TB, names map[string][]string) *Net {
	return &Net{t: t, names: names, lookups: map[string]int{}, hang: map[string]bool{}}
}

// Hang makes dials of address ("203.0.113.50:80") wait for their
// context to end.
func (n *Net) Hang(address string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hang[address] = true
}

// LookupNetIP resolves host through the map.
func (n *Net) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	answers := n.names[host]
	if len(answers) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	a := answers[min(n.lookups[host], len(answers)-1)]
	n.lookups[host]++
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// Dial dials loopback addresses for real, hangs on those marked to, and
// fails the test on any other.
func (n *Net) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	n.mu.Lock()
	hang := n.hang[address]
	n.mu.Unlock()
	switch {
	case hang:
		<-ctx.Done()
		return nil, ctx.Err()
	case err == nil && ap.Addr().IsLoopback():
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
	n.t.Errorf("dialed %s, outside loopback", address)
	return nil, errors.New("test: no network outside loopback")
}
