package egress_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/internal/egress/egresstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// network stands in for DNS and the network: names resolve through a map,
// loopback addresses are dialed for real, and any other address gets one
// end of an in-memory pipe, so that no packet leaves the machine.
type network struct {
	t *testing.T

	mu      sync.Mutex
	names   map[string][][]netip.Addr // successive answers; the last repeats
	lookups map[string]int
	dialed  []string
	// hang makes a dial of these addresses wait until its context ends.
	hang map[string]bool
}

func newNetwork(t *testing.T, names map[string][]string) *network {
	t.Helper()
	n := &network{t: t, names: map[string][][]netip.Addr{}, lookups: map[string]int{}, hang: map[string]bool{}}
	for name, addrs := range names {
		n.answer(name, addrs...)
	}
	return n
}

// answer adds the next answer for name.
func (n *network) answer(name string, addrs ...string) {
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.names[name] = append(n.names[name], as)
}

func (n *network) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	answers := n.names[host]
	if len(answers) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(n.lookups[host], len(answers)-1)
	n.lookups[host]++
	return append([]netip.Addr(nil), answers[i]...), nil
}

func (n *network) dial(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		n.t.Errorf("dial %q: want a checked ip:port, got %v", address, err)
		return nil, err
	}
	n.mu.Lock()
	n.dialed = append(n.dialed, address)
	hang := n.hang[address]
	n.mu.Unlock()
	switch {
	case hang:
		<-ctx.Done()
		return nil, ctx.Err()
	case ap.Addr().IsLoopback():
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
	c, s := net.Pipe()
	go func() { _, _ = io.Copy(io.Discard, s); s.Close() }()
	return c, nil
}

func (n *network) dials() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.dialed...)
}

func (n *network) guard(t *testing.T, allow ...string) *egress.Guard {
	t.Helper()
	g, err := egress.New(egress.WithAllow(allow...), egress.WithResolver(n), egress.WithDialer(n.dial))
	if err != nil {
		t.Fatalf("egress.New: %v", err)
	}
	return g
}

func TestDialContext(t *testing.T) {
	names := map[string][]string{
		"public.test": {"203.0.113.10"},
		"inside.test": {"10.1.2.3"},
		"mixed.test":  {"203.0.113.10", "127.0.0.1"},
		"meta.test":   {"169.254.169.254"},
		"six.test":    {"fd00::1"},
		"mapped.test": {"::ffff:127.0.0.1"},
	}
	for _, tc := range []struct {
		name    string
		allow   []string
		address string
		kind    string // the range refused; "" when the dial goes ahead
		dial    string // the address dialed, when it goes ahead
	}{
		{name: "public name dials the address it checked", address: "public.test:443", dial: "203.0.113.10:443"},
		{name: "public address", address: "203.0.113.7:80", dial: "203.0.113.7:80"},
		{name: "name inside", address: "inside.test:80", kind: "private"},
		{name: "name with one address inside", address: "mixed.test:80", kind: "loopback"},
		{name: "name of the metadata address", address: "meta.test:80", kind: "link-local"},
		{name: "name of an IPv6 private address", address: "six.test:80", kind: "private"},
		{name: "name of an IPv4-mapped loopback", address: "mapped.test:80", kind: "loopback"},
		{name: "upper-case name with a final dot", address: "INSIDE.test.:80", kind: "private"},
		{name: "loopback", address: "127.0.0.1:4222", kind: "loopback"},
		{name: "IPv6 loopback", address: "[::1]:4222", kind: "loopback"},
		{name: "IPv4-mapped loopback", address: "[::ffff:127.0.0.1]:4222", kind: "loopback"},
		{name: "IPv4-mapped private", address: "[::ffff:192.168.1.1]:80", kind: "private"},
		{name: "link-local with a zone", address: "[fe80::1%eth0]:80", kind: "link-local"},
		{name: "CGNAT", address: "100.100.100.200:80", kind: "CGNAT"},
		{name: "unspecified", address: "0.0.0.0:80", kind: "unspecified"},
		{name: "broadcast", address: "255.255.255.255:80", kind: "broadcast"},
		{name: "multicast", address: "[ff02::1]:80", kind: "multicast"},

		{name: "allowed CIDR", allow: []string{"10.0.0.0/8"}, address: "inside.test:80", dial: "10.1.2.3:80"},
		{name: "allowed address", allow: []string{"10.1.2.3"}, address: "inside.test:80", dial: "10.1.2.3:80"},
		{name: "allowed address on its port", allow: []string{"10.1.2.3:8080"}, address: "inside.test:8080", dial: "10.1.2.3:8080"},
		{name: "allowed address on another port", allow: []string{"10.1.2.3:8080"}, address: "inside.test:80", kind: "private"},
		{name: "allowed name", allow: []string{"inside.test"}, address: "inside.test:80", dial: "10.1.2.3:80"},
		{name: "allowed name, any case", allow: []string{"Inside.Test"}, address: "inside.TEST:80", dial: "10.1.2.3:80"},
		{name: "allowed name on its port", allow: []string{"inside.test:8443"}, address: "inside.test:8443", dial: "10.1.2.3:8443"},
		{name: "allowed name on another port", allow: []string{"inside.test:8443"}, address: "inside.test:80", kind: "private"},
		{name: "an allowed name admits no other", allow: []string{"inside.test"}, address: "meta.test:80", kind: "link-local"},
		{name: "allowed address admits its mapped form", allow: []string{"10.1.2.3"}, address: "[::ffff:10.1.2.3]:80", dial: "10.1.2.3:80"},
		{name: "allowed mapped prefix admits IPv4", allow: []string{"::ffff:10.0.0.0/104"}, address: "10.9.9.9:80", dial: "10.9.9.9:80"},
		{name: "allowed IPv6 prefix", allow: []string{"fd00::/8"}, address: "six.test:80", dial: "[fd00::1]:80"},
		{name: "allowed zone-less link-local", allow: []string{"fe80::/10"}, address: "[fe80::1%eth0]:80", dial: "[fe80::1%eth0]:80"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNetwork(t, names)
			g := n.guard(t, tc.allow...)
			c, err := g.DialContext(context.Background(), "tcp", tc.address)
			if tc.kind != "" {
				var blocked *egress.BlockedError
				if !errors.As(err, &blocked) || blocked.Range.Kind != tc.kind {
					t.Fatalf("DialContext(%s) = %v, want a %s address refused", tc.address, err, tc.kind)
				}
				if got := egress.Classify(err); got != egress.ClassBlocked {
					t.Errorf("Classify(%v) = %q, want %q", err, got, egress.ClassBlocked)
				}
				if d := n.dials(); len(d) != 0 {
					t.Errorf("dialed %v, want nothing dialed", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("DialContext(%s) = %v, want a connection to %s", tc.address, err, tc.dial)
			}
			c.Close()
			if d := n.dials(); len(d) != 1 || d[0] != tc.dial {
				t.Errorf("dialed %v, want [%s]", d, tc.dial)
			}
		})
	}
}

func TestDialContextErrors(t *testing.T) {
	n := newNetwork(t, nil)
	g := n.guard(t)
	for _, tc := range []struct {
		name, network, address string
		class                  egress.Class
	}{
		{"name that does not resolve", "tcp", "nowhere.test:80", egress.ClassDNS},
		{"udp", "udp", "203.0.113.1:53", egress.ClassFailed},
		{"no port", "tcp", "203.0.113.1", egress.ClassFailed},
		{"bad port", "tcp", "203.0.113.1:http", egress.ClassFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := g.DialContext(context.Background(), tc.network, tc.address)
			if got := egress.Classify(err); got != tc.class {
				t.Errorf("DialContext(%s, %s) = %v (class %q), want class %q", tc.network, tc.address, err, got, tc.class)
			}
		})
	}
	if d := n.dials(); len(d) != 0 {
		t.Errorf("dialed %v, want nothing dialed", d)
	}
}

// A name whose answer changes after it was checked is dialed at the
// address checked: the guard asks once per connection and dials what it got.
func TestDialContextRebinding(t *testing.T) {
	n := newNetwork(t, nil)
	n.answer("rebind.test", "203.0.113.10")
	n.answer("rebind.test", "127.0.0.1")
	g := n.guard(t)
	c, err := g.DialContext(context.Background(), "tcp", "rebind.test:80")
	if err != nil {
		t.Fatalf("first dial: %v", err)
	}
	c.Close()
	_, err = g.DialContext(context.Background(), "tcp", "rebind.test:80")
	var blocked *egress.BlockedError
	if !errors.As(err, &blocked) || blocked.Range.Kind != "loopback" {
		t.Fatalf("second dial = %v, want the loopback answer refused", err)
	}
	if d := n.dials(); len(d) != 1 || d[0] != "203.0.113.10:80" {
		t.Errorf("dialed %v, want only [203.0.113.10:80]", d)
	}
}

func TestCheck(t *testing.T) {
	n := newNetwork(t, map[string][]string{"inside.test": {"10.1.2.3"}, "public.test": {"203.0.113.10"}})
	g := n.guard(t, "inside.test:8443", "127.0.0.1:9000")
	for _, tc := range []struct {
		url   string
		class egress.Class // "" when admitted
	}{
		{"https://public.test/hook", ""},
		{"https://inside.test:8443/hook", ""},
		{"https://inside.test/hook", egress.ClassBlocked},
		{"http://inside.test:8443/hook", ""},
		{"http://127.0.0.1:9000/hook", ""},
		{"http://127.0.0.1/hook", egress.ClassBlocked},
		{"http://[::ffff:7f00:1]:9000/hook", ""},
		{"http://[::1]:9000/hook", egress.ClassBlocked},
		{"http://169.254.169.254/latest/meta-data/", egress.ClassBlocked},
		{"http://nowhere.test/", egress.ClassDNS},
	} {
		t.Run(tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			err = g.Check(context.Background(), u)
			if got := egress.Classify(err); got != tc.class {
				t.Errorf("Check(%s) = %v, want class %q", tc.url, err, tc.class)
			}
		})
	}
	if d := n.dials(); len(d) != 0 {
		t.Errorf("Check dialed %v, want nothing dialed", d)
	}
}

func TestBlockedErrorReason(t *testing.T) {
	n := newNetwork(t, map[string][]string{"db.internal": {"10.9.8.7"}})
	g := n.guard(t)
	for _, tc := range []struct{ address, reason string }{
		{"127.0.0.1:80", "127.0.0.1 is a loopback address (127.0.0.0/8)"},
		{"[::ffff:169.254.169.254]:80", "::ffff:169.254.169.254 is a link-local address (169.254.0.0/16)"},
		{"100.64.1.1:80", "100.64.1.1 is a CGNAT address (100.64.0.0/10)"},
		{"db.internal:80", "db.internal is not a public host"},
	} {
		_, err := g.DialContext(context.Background(), "tcp", tc.address)
		var blocked *egress.BlockedError
		if !errors.As(err, &blocked) {
			t.Fatalf("DialContext(%s) = %v, want a BlockedError", tc.address, err)
		}
		if got := blocked.Reason(); got != tc.reason {
			t.Errorf("Reason() = %q, want %q", got, tc.reason)
		}
	}
}

func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  egress.Option
		ok   bool
	}{
		{"CIDR", egress.WithAllow("10.0.0.0/8"), true},
		{"IPv6 CIDR", egress.WithAllow("fd00::/8"), true},
		{"address", egress.WithAllow("127.0.0.1"), true},
		{"address and port", egress.WithAllow("127.0.0.1:8080"), true},
		{"IPv6 address and port", egress.WithAllow("[::1]:8080"), true},
		{"name", egress.WithAllow("hooks.internal"), true},
		{"name and port", egress.WithAllow("hooks.internal:8443"), true},
		{"spaces around", egress.WithAllow(" hooks.internal "), true},
		{"empty", egress.WithAllow(""), false},
		{"bad CIDR", egress.WithAllow("10.0.0.0/33"), false},
		{"URL", egress.WithAllow("http://hooks.internal/"), false},
		{"port zero", egress.WithAllow("hooks.internal:0"), false},
		{"port out of range", egress.WithAllow("hooks.internal:70000"), false},
		{"wildcard", egress.WithAllow("*.internal"), false},
		{"empty label", egress.WithAllow("hooks..internal"), false},
		{"nil resolver", egress.WithResolver(nil), false},
		{"nil dialer", egress.WithDialer(nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := egress.New(tc.opt)
			if (err == nil) != tc.ok {
				t.Errorf("New(%s) = %v, want ok %v", tc.name, err, tc.ok)
			}
		})
	}
}

// client returns g's client, closing its connections when the test ends.
func client(t *testing.T, g *egress.Guard) *http.Client {
	t.Helper()
	c := g.Client()
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func get(t *testing.T, c *http.Client, target string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func TestClientAllowlistAdmitsLoopbackReceiver(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/inside":
			http.Redirect(w, r, "http://10.1.2.3/", http.StatusFound)
		case "/other":
			http.Redirect(w, r, other.URL, http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	n := newNetwork(t, nil)
	c := client(t, n.guard(t, srv.Listener.Addr().String()))
	if resp, err := get(t, c, srv.URL+"/"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the allowed receiver = %v, %v, want 200", resp, err)
	}
	if resp, err := get(t, c, srv.URL+"/here"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET a redirect to the allowed receiver = %v, %v, want 200", resp, err)
	}
	for _, path := range []string{"/inside", "/other"} {
		_, err := get(t, c, srv.URL+path)
		if got := egress.Classify(err); got != egress.ClassBlocked {
			t.Errorf("GET %s, a redirect inside = %v (class %q), want %q", path, err, got, egress.ClassBlocked)
		}
	}
	// The same receiver without the allowlist.
	_, err := get(t, client(t, n.guard(t)), srv.URL+"/")
	if got := egress.Classify(err); got != egress.ClassBlocked {
		t.Errorf("GET a loopback receiver without the allowlist = %v (class %q), want %q", err, got, egress.ClassBlocked)
	}
	for _, d := range n.dials() {
		if d != srv.Listener.Addr().String() {
			t.Errorf("dialed %s, want only the allowed receiver", d)
		}
	}
}

// TestClientIgnoresProxy: a proxy from the environment would be dialed in
// place of the receiver.
func TestClientIgnoresProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://203.0.113.99:3128")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	n := newNetwork(t, nil)
	if _, err := get(t, client(t, n.guard(t, srv.Listener.Addr().String())), srv.URL); err != nil {
		t.Fatalf("GET: %v", err)
	}
	if d := n.dials(); len(d) != 1 || d[0] != srv.Listener.Addr().String() {
		t.Errorf("dialed %v, want only the receiver", d)
	}
}

func TestClientFailureClasses(t *testing.T) {
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}()
	nats := egresstest.NATS(t)
	hangup := egresstest.Listen(t, func(c net.Conn) {
		_, _ = bufio.NewReader(c).ReadString('\n')
	})
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)

	n := newNetwork(t, map[string][]string{"slow.test": {"203.0.113.50"}})
	n.hang["203.0.113.50:80"] = true
	g := n.guard(t, "127.0.0.1")
	c := client(t, g)
	c.Timeout = 30 * time.Second
	// The timeout is the behaviour under test here, and the dial waits
	// for it whatever it is.
	quick := client(t, g)
	quick.Timeout = 100 * time.Millisecond
	for _, tc := range []struct {
		name, url string
		want      egress.Class
	}{
		{"refused", "http://" + closed + "/", egress.ClassRefused},
		{"timeout", "http://slow.test/", egress.ClassTimeout},
		{"dns", "http://nowhere.test/", egress.ClassDNS},
		{"not HTTP", "http://" + nats + "/", egress.ClassProtocol},
		{"closed without an answer", "http://" + hangup + "/", egress.ClassClosed},
		{"untrusted certificate", tlsSrv.URL + "/", egress.ClassTLS},
		{"blocked", "http://10.0.0.1/", egress.ClassBlocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := c
			if tc.want == egress.ClassTimeout {
				cl = quick
			}
			_, err := get(t, cl, tc.url)
			got := egress.Classify(err)
			if got != tc.want {
				t.Fatalf("GET %s = %v, class %q, want %q", tc.url, err, got, tc.want)
			}
			if strings.Contains(string(got), "NBANNER") || !got.Valid() {
				t.Errorf("class %q holds remote text or is not a class", got)
			}
		})
	}
	for _, d := range n.dials() {
		if ap := netip.MustParseAddrPort(d); !ap.Addr().IsLoopback() && d != "203.0.113.50:80" {
			t.Errorf("dialed %s outside loopback", d)
		}
	}
}

func TestClassValid(t *testing.T) {
	for _, tc := range []struct {
		class egress.Class
		want  bool
	}{
		{egress.ClassRefused, true},
		{egress.StatusClass(503), true},
		{egress.StatusClass(204), true},
		{"status 5000", false},
		{"status abc", false},
		{"dial tcp 127.0.0.1:4222: connection refused", false},
		{"malformed HTTP response \"INFO {}\"", false},
		{"", false},
	} {
		if got := tc.class.Valid(); got != tc.want {
			t.Errorf("Class(%q).Valid() = %v, want %v", tc.class, got, tc.want)
		}
	}
	if got := egress.StatusClass(503); got != "status 503" {
		t.Errorf("StatusClass(503) = %q, want %q", got, "status 503")
	}
	for _, tc := range []struct {
		class egress.Class
		want  string
	}{
		{egress.ClassRefused, "the connection was refused"},
		{egress.StatusClass(503), "the answer had status 503"},
		{"malformed HTTP response", "the request failed"},
	} {
		if got := tc.class.Describe(); got != tc.want {
			t.Errorf("Class(%q).Describe() = %q, want %q", tc.class, got, tc.want)
		}
	}
	if got := egress.Classify(nil); got != "" {
		t.Errorf("Classify(nil) = %q, want empty", got)
	}
}
