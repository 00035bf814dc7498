// Package egress guards the HTTP requests toolbus makes on a caller's
// behalf (job completion callbacks, the demo toolset's fetch_page, and any
// later push of notifications to a URL a caller gives) so that they cannot
// reach inside the network toolbus runs in.
//
// A [Guard] is an allowlist and a dialer. Its [Guard.DialContext] resolves
// the host of every connection itself, refuses it when any resolved address
// is in a denied range and not admitted by the allowlist, and then dials the
// very addresses it checked: a name that resolves inside is caught, and a
// name whose DNS answer changes between the check and the dial (DNS
// rebinding) gains nothing, since the second answer is never asked for.
// [Guard.Client] is an http.Client whose every connection, redirects
// included, goes through that dialer, and which uses no proxy. [Guard.Check]
// applies the same rule to a URL before anything is sent, for a submit that
// should be refused at once.
//
// The denied ranges ([Denied]) are loopback, private (RFC 1918 and
// fc00::/7), link-local, CGNAT (100.64.0.0/10), multicast, unspecified,
// broadcast and reserved addresses; an IPv4 address written in IPv6 form
// (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) is judged
// by the IPv4 address inside. An operator admits internal receivers with
// allowlist entries: a CIDR (10.0.0.0/8), an address (127.0.0.1), an
// address with a port (127.0.0.1:8080), or a host name with an optional port
// (hooks.internal, hooks.internal:8443), which is admitted whatever it
// resolves to.
//
// A request that fails is reduced to a [Class] by [Classify]: timeout,
// refused, blocked, dns, tls, status 503 and a few more. A class holds no
// text from the remote side, so it may be shown to the caller that asked
// for the request; the full error is for the operator's log only. A
// receiver that answers with something other than HTTP (the greeting of a
// NATS server, say) is the class "protocol", and none of its words reach
// the caller.
//
// Resolving and dialing go through a [Resolver] and a [DialFunc] that tests
// replace ([WithResolver], [WithDialer]), so the deny logic can be tested
// without sending a packet anywhere.
package egress
