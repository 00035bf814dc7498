package egress_test

import (
	"net/netip"
	"testing"

	"github.com/toolbus/toolbus/internal/egress"
)

func TestDenied(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		want       string // the kind of the denying range; "" for admitted
	}{
		{"loopback", "127.0.0.1", "loopback"},
		{"loopback, anywhere in 127/8", "127.255.0.9", "loopback"},
		{"private 10/8", "10.1.2.3", "private"},
		{"private 172.16/12", "172.31.255.255", "private"},
		{"private 192.168/16", "192.168.0.1", "private"},
		{"link-local, cloud metadata", "169.254.169.254", "link-local"},
		{"CGNAT", "100.64.0.1", "CGNAT"},
		{"CGNAT, top", "100.127.255.254", "CGNAT"},
		{"multicast", "224.0.0.1", "multicast"},
		{"unspecified", "0.0.0.0", "unspecified"},
		{"this network", "0.1.2.3", "unspecified"},
		{"broadcast", "255.255.255.255", "broadcast"},
		{"reserved", "240.0.0.1", "reserved"},

		{"IPv6 loopback", "::1", "loopback"},
		{"IPv6 unspecified", "::", "unspecified"},
		{"IPv6 unique local", "fd00:ec2::254", "private"},
		{"IPv6 unique local, fc half", "fc00::1", "private"},
		{"IPv6 link-local", "fe80::1", "link-local"},
		{"IPv6 link-local with a zone", "fe80::1%eth0", "link-local"},
		{"IPv6 site-local", "fec0::1", "private"},
		{"IPv6 multicast", "ff02::1", "multicast"},
		{"IPv4-compatible", "::7f00:1", "reserved"},
		{"local-use NAT64", "64:ff9b:1::a00:1", "private"},

		{"IPv4-mapped loopback", "::ffff:127.0.0.1", "loopback"},
		{"IPv4-mapped private", "::ffff:10.0.0.1", "private"},
		{"IPv4-mapped link-local", "::ffff:169.254.169.254", "link-local"},
		{"IPv4-mapped CGNAT", "::ffff:100.64.0.1", "CGNAT"},
		{"IPv4-mapped unspecified", "::ffff:0.0.0.0", "unspecified"},
		{"IPv4-mapped broadcast", "::ffff:255.255.255.255", "broadcast"},
		{"NAT64 of loopback", "64:ff9b::7f00:1", "loopback"},
		{"6to4 of private", "2002:c0a8:101::1", "private"},

		{"public IPv4", "93.184.215.14", ""},
		{"just past CGNAT", "100.128.0.1", ""},
		{"just past 172.16/12", "172.32.0.1", ""},
		{"public IPv6", "2606:4700:4700::1111", ""},
		{"IPv4-mapped public", "::ffff:8.8.8.8", ""},
		{"NAT64 of public", "64:ff9b::808:808", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, denied := egress.Denied(netip.MustParseAddr(tc.addr))
			if got := r.Kind; got != tc.want || denied != (tc.want != "") {
				t.Errorf("Denied(%s) = %q %v, want %q", tc.addr, got, denied, tc.want)
			}
		})
	}
}
