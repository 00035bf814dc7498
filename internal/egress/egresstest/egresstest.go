// Package egresstest has the receivers that tests of outbound requests
// talk to: raw TCP listeners on loopback, such as one that greets every
// connection as a NATS server does, whose words must never reach a caller.
package egresstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Banner is what a NATS server says first on any connection. Its server
// id, NBANNERSECRET, is what a test looks for to prove the text did not
// leak.
const Banner = `INFO {"server_id":"NBANNERSECRET","version":"2.11.0","max_payload":1048576}`

// Listen opens a TCP listener on loopback that serve handles, one
// connection at a time, and closes each connection after serve returns.
// It returns the listener's host:port and stops when the test ends.
func Listen(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			serve(c)
			c.Close()
		}
	})
	return l.Addr().String()
}

// NATS is a listener on loopback that greets every connection with
// [Banner] and reads until the client hangs up.
func NATS(t testing.TB) string {
	t.Helper()
	return Listen(t, func(c net.Conn) {
		io.WriteString(c, Banner+"\r\n")
		_, _ = io.Copy(io.Discard, c)
	})
}
