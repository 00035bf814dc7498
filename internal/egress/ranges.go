package egress

import (
	"net/netip"
)

// Range is a block of addresses a [Guard] refuses unless its allowlist
// admits them.
type Range struct {
	// Kind names the rule: "loopback", "private", "link-local", "CGNAT",
	// "multicast", "unspecified", "broadcast" or "reserved".
	Kind   string
	Prefix netip.Prefix
}

// ranges are the denied blocks, the narrower before the wider where they
// overlap, so that the first that holds an address names it best. IPv4
// addresses written in IPv6 form are judged by the IPv4 address inside
// (see [Denied]) and have no entry of their own.
var ranges = []Range{
	{"broadcast", netip.MustParsePrefix("255.255.255.255/32")},
	{"unspecified", netip.MustParsePrefix("0.0.0.0/8")},
	{"private", netip.MustParsePrefix("10.0.0.0/8")},
	{"CGNAT", netip.MustParsePrefix("100.64.0.0/10")},
	{"loopback", netip.MustParsePrefix("127.0.0.0/8")},
	{"link-local", netip.MustParsePrefix("169.254.0.0/16")},
	{"private", netip.MustParsePrefix("172.16.0.0/12")},
	{"private", netip.MustParsePrefix("192.168.0.0/16")},
	{"multicast", netip.MustParsePrefix("224.0.0.0/4")},
	{"reserved", netip.MustParsePrefix("240.0.0.0/4")},

	{"unspecified", netip.MustParsePrefix("::/128")},
	{"loopback", netip.MustParsePrefix("::1/128")},
	// IPv4-compatible addresses (deprecated) and local-use NAT64.
	{"reserved", netip.MustParsePrefix("::/96")},
	{"private", netip.MustParsePrefix("64:ff9b:1::/48")},
	{"private", netip.MustParsePrefix("fc00::/7")},
	{"link-local", netip.MustParsePrefix("fe80::/10")},
	// Site-local addresses (deprecated), private in all but name.
	{"private", netip.MustParsePrefix("fec0::/10")},
	{"multicast", netip.MustParsePrefix("ff00::/8")},
}

// Prefixes whose addresses carry an IPv4 address: NAT64's well-known
// prefix in the last 32 bits, 6to4 in bits 16 to 47.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Denied reports the range that holds a, if any. An IPv4-mapped, NAT64 or
// 6to4 address is judged by the IPv4 address it carries; a zone is
// ignored.
func Denied(a netip.Addr) (Range, bool) {
	a = embedded(a.WithZone(""))
	for _, r := range ranges {
		if r.Prefix.Contains(a) {
			return r, true
		}
	}
	return Range{}, false
}

// embedded returns the IPv4 address that a carries in IPv6 form, or a.
func embedded(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if !a.Is6() {
		return a
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16]))
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return a
}
