package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// Resolver looks up the addresses of a host name; *net.Resolver is one.
// network is "ip", "ip4" or "ip6".
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialFunc opens a connection to address, an "ip:port" the guard has
// checked; (*net.Dialer).DialContext is one.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Defaults of [New].
const (
	// DefaultDialTimeout bounds connecting to one address with the default
	// dialer.
	DefaultDialTimeout = 10 * time.Second
)

// Guard admits outbound connections to public addresses and to what its
// allowlist names, and refuses all others. Its zero value is not usable;
// make one with [New]. It is safe for concurrent use.
type Guard struct {
	allow    allowlist
	resolver Resolver
	dial     DialFunc
}

// Option configures [New].
type Option func(*Guard) error

// WithAllow admits the addresses and names of entries although they are in
// a denied range. An entry is a CIDR (10.0.0.0/8), an address (127.0.0.1),
// an address with a port (127.0.0.1:8080, [::1]:8080), or a host name with
// an optional port (hooks.internal, hooks.internal:8443); a name is
// admitted whatever it resolves to. The default admits nothing. Options
// add up.
func WithAllow(entries ...string) Option {
	return func(g *Guard) error {
		for _, e := range entries {
			if err := g.allow.add(e); err != nil {
				return err
			}
		}
		return nil
	}
}

// WithResolver sets how host names are resolved (default
// net.DefaultResolver).
func WithResolver(r Resolver) Option {
	return func(g *Guard) error {
		if r == nil {
			return errors.New("egress: nil resolver")
		}
		g.resolver = r
		return nil
	}
}

// WithDialer sets how a checked address is dialed (default a net.Dialer
// with a [DefaultDialTimeout] timeout).
func WithDialer(d DialFunc) Option {
	return func(g *Guard) error {
		if d == nil {
			return errors.New("egress: nil dial function")
		}
		g.dial = d
		return nil
	}
}

// New returns a guard; it fails on an invalid option, naming it.
func New(opts ...Option) (*Guard, error) {
	g := &Guard{resolver: net.DefaultResolver}
	for _, o := range opts {
		if err := o(g); err != nil {
			return nil, err
		}
	}
	if g.dial == nil {
		d := &net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}
		g.dial = d.DialContext
	}
	return g, nil
}

// Check applies the guard to u, an http or https URL, before anything is
// sent: it resolves u's host and returns a [*BlockedError] when any address
// is denied and not admitted, or an [*Error] of class [ClassDNS] when the
// name does not resolve. ctx bounds the lookup. The guard checks again
// when it connects, so a URL that passes here cannot reach further later.
func (g *Guard) Check(ctx context.Context, u *url.URL) error {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p, err := parsePort(port)
	if err != nil {
		return err
	}
	_, err = g.resolve(ctx, "ip", u.Hostname(), p)
	return err
}

// DialContext connects to address ("host:port") over TCP when every
// address of host is admitted: it resolves host, checks each address and
// dials the checked addresses in turn until one answers. It returns a
// [*BlockedError] for a denied address and an [*Error] of class
// [ClassDNS] for a name that does not resolve.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ipNet := map[string]string{"tcp": "ip", "tcp4": "ip4", "tcp6": "ip6"}[network]
	if ipNet == "" {
		return nil, fmt.Errorf("egress: network %q is not supported, only tcp", network)
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	port, err := parsePort(portText)
	if err != nil {
		return nil, err
	}
	addrs, err := g.resolve(ctx, ipNet, host, port)
	if err != nil {
		return nil, err
	}
	var first error
	for _, a := range addrs {
		c, err := g.dial(ctx, network, netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// resolve returns the addresses of host to dial on port, each checked.
// A literal address is its own answer; a name the allowlist admits is
// resolved and not checked.
func (g *Guard) resolve(ctx context.Context, network, host string, port uint16) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if err := g.check(host, a, port); err != nil {
			return nil, err
		}
		return []netip.Addr{a}, nil
	}
	name := normalHost(host)
	if name == "" {
		return nil, &Error{Class: ClassDNS, Err: errors.New("no host name")}
	}
	addrs, err := g.resolver.LookupNetIP(ctx, network, name)
	if err != nil {
		return nil, &Error{Class: ClassDNS, Err: err}
	}
	if len(addrs) == 0 {
		return nil, &Error{Class: ClassDNS, Err: &net.DNSError{Err: "no addresses", Name: name, IsNotFound: true}}
	}
	admitted := g.allow.admitsHost(name, port)
	for i, a := range addrs {
		addrs[i] = a.Unmap()
		if admitted {
			continue
		}
		if err := g.check(name, addrs[i], port); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

func (g *Guard) check(host string, a netip.Addr, port uint16) error {
	if r, denied := Denied(a); denied && !g.allow.admitsAddr(a, port) {
		return &BlockedError{Host: host, Addr: a, Range: r}
	}
	return nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("egress: port %q is not a number from 0 to 65535", s)
	}
	return uint16(n), nil
}

// Client returns an HTTP client whose connections, redirects included, all
// go through [Guard.DialContext], with no proxy (a proxy would be dialed in
// place of the receiver, which the guard could then not judge). Its errors
// carry their [Class] for [Classify]. It has no timeout and follows up to
// 10 redirects, as http.Client does; set Timeout and CheckRedirect as the
// use needs. Each call returns a client with its own connections.
func (g *Guard) Client() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = g.DialContext
	t.DialTLSContext = nil
	return &http.Client{Transport: &transport{base: t}}
}

// transport classes the errors of its base: a failure once a connection
// was open that has no other class is the receiver's answer not being
// HTTP.
type transport struct{ base *http.Transport }

var _ http.RoundTripper = (*transport)(nil)

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var connected atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }}
	resp, err := t.base.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err != nil {
		return nil, &Error{Class: classify(err, connected.Load()), Err: err}
	}
	return resp, nil
}

// CloseIdleConnections closes the connections the client keeps open, so
// that http.Client.CloseIdleConnections reaches them.
func (t *transport) CloseIdleConnections() { t.base.CloseIdleConnections() }
