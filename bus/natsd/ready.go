package natsd

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// AllPowerful says what a token of `toolbus nats` and `toolbus dev`
// allows, under the lines that join with it.
const AllPowerful = "this token is all-powerful: a client with it can publish calls as any caller, answer any call and read every job record"

// WriteReady writes the ready lines to w: the server's URL, its store and
// monitoring address, and the commands that join an ingress and a worker
// to it, with the credentials each part presents: a role user's password
// file, said to be made now or kept from an earlier start. The lines go
// to w in one write, so that whoever reads them as they come, a person's
// terminal or a supervisor waiting for the first line, never sees the
// ready line without the ones that say how to join.
func (s *Server) WriteReady(out io.Writer) {
	var w bytes.Buffer
	defer func() { _, _ = out.Write(w.Bytes()) }()
	a, opts := s.access, s.opts
	url := s.URL()
	fmt.Fprintf(&w, "toolbus nats ready: %s\n", url)
	if store, err := filepath.Abs(opts.StoreDir); err == nil {
		fmt.Fprintf(&w, "JetStream store: %s\n", store)
	}
	if m := s.srv.MonitorAddr(); m != nil {
		scheme := "http"
		if opts.HTTPSPort != 0 {
			scheme = "https"
		}
		fmt.Fprintf(&w, "monitoring: %s://%s/healthz\n", scheme, reachable(m))
	}
	header, note := "join with:", ""
	// auth is the flags of each part, by the user it joins as, or by ""
	// for every part.
	auth := map[string]string{}
	switch {
	case a.open:
		fmt.Fprintln(&w, "this bus is open (--no-auth): anyone who reaches it can act as any caller and any worker")
	case a.users != "":
		header = fmt.Sprintf("join as a user of %s (add --nats-user and --nats-password, --nats-nkey or --nats-creds):", a.users)
	case len(a.roles) > 0:
		kept := "kept from an earlier start"
		if a.made {
			kept = "made now"
		}
		header = "join with (each part as its own NATS user; passwords " + kept + ", and kept across restarts):"
		for _, r := range a.roles {
			path, err := filepath.Abs(r.passwordFile)
			if err != nil {
				path = r.passwordFile
			}
			auth[r.user] = " --nats-user " + ShellQuote(r.user) + " --nats-password-file " + ShellQuote(path)
		}
	case a.tokenFile != "":
		path, err := filepath.Abs(a.tokenFile)
		if err != nil {
			path = a.tokenFile
		}
		auth[""] = " --token-file " + ShellQuote(path)
		note = AllPowerful
		if a.made {
			note += " (made now, and kept in the file across restarts)"
		} else {
			note += " (kept in the file from an earlier start)"
		}
	default:
		auth[""] = " --nats-token " + ShellQuote(a.token)
		note = AllPowerful
	}
	fmt.Fprintln(&w, header)
	for _, part := range []string{"ingress", "worker"} {
		as, ok := auth[part]
		if !ok {
			as = auth[""]
		}
		fmt.Fprintf(&w, "  toolbus %s --nats %s%s\n", part, url, as)
	}
	if note != "" {
		fmt.Fprintln(&w, note)
	}
}

// reachable returns addr as a host:port a client on this machine can
// dial: an unspecified address (0.0.0.0, ::) becomes the loopback one.
func reachable(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	ip := tcp.IP
	switch {
	case ip == nil, ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

// shellSafe matches the words a POSIX shell reads unchanged.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+-]+$`)

// ShellQuote returns s as one word for a POSIX shell, unchanged when the
// shell reads it so: the join lines quote paths and tokens with it.
func ShellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
