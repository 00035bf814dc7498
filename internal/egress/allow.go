package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// allowlist is what an operator admits although it is in a denied range.
// Its zero value admits nothing.
type allowlist struct {
	prefixes  []netip.Prefix
	addrPorts map[netip.AddrPort]bool
	// hosts holds names ("hooks.internal") and names with a port
	// ("hooks.internal:8443"), lower-case and without a final dot.
	hosts map[string]bool
}

// add parses one entry: a CIDR, an address, an address with a port, or a
// host name with an optional port.
func (l *allowlist) add(entry string) error {
	e := strings.TrimSpace(entry)
	if p, err := netip.ParsePrefix(e); err == nil {
		l.prefixes = append(l.prefixes, unmapPrefix(p.Masked()))
		return nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		a = a.Unmap().WithZone("")
		l.prefixes = append(l.prefixes, netip.PrefixFrom(a, a.BitLen()))
		return nil
	}
	if ap, err := netip.ParseAddrPort(e); err == nil && ap.Port() != 0 {
		if l.addrPorts == nil {
			l.addrPorts = map[netip.AddrPort]bool{}
		}
		l.addrPorts[netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())] = true
		return nil
	}
	host, port := e, ""
	if h, p, err := net.SplitHostPort(e); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return entryError(entry)
		}
		host, port = h, p
	}
	host = normalHost(host)
	if !validHost(host) {
		return entryError(entry)
	}
	if l.hosts == nil {
		l.hosts = map[string]bool{}
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	}
	l.hosts[host] = true
	return nil
}

func entryError(entry string) error {
	return fmt.Errorf("allow entry %q is not a CIDR (10.0.0.0/8), an address (127.0.0.1), "+
		"an address with a port (127.0.0.1:8080) or a host name with an optional port (hooks.internal:8443)", entry)
}

// admitsAddr reports whether a, dialed on port, is admitted.
func (l *allowlist) admitsAddr(a netip.Addr, port uint16) bool {
	a = a.Unmap().WithZone("")
	for _, p := range l.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return l.addrPorts[netip.AddrPortFrom(a, port)]
}

// admitsHost reports whether the name host (normalised), on port, is
// admitted whatever it resolves to.
func (l *allowlist) admitsHost(host string, port uint16) bool {
	return l.hosts[host] || l.hosts[net.JoinHostPort(host, strconv.Itoa(int(port)))]
}

// unmapPrefix writes an IPv4-mapped prefix as the IPv4 prefix it covers,
// since addresses are unmapped before they are checked.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// normalHost returns a host name in the form entries and URLs are compared
// in: lower-case, without a final dot.
func normalHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// validHost reports whether h is a host name: dot-separated labels of
// letters, digits, hyphens and underscores, none empty.
func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
