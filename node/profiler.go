package node

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// checkProfiler checks the address of --pprof: empty (no profiler) or a
// loopback address, since a profile shows everything the process holds.
func checkProfiler(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof %q: %w: give a loopback address such as 127.0.0.1:6060", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--pprof %q is not a loopback address: a profile shows everything the process holds, so give one such as 127.0.0.1:6060", addr)
	}
	return nil
}

// ServeProfiler serves the Go profiler's endpoints (/debug/pprof/...) on
// addr, a loopback address ([DevConfig.Pprof]), until the process ends,
// and logs where; an empty addr serves nothing. The handlers go on a mux
// of their own: net/http/pprof also registers them on
// http.DefaultServeMux, which toolbus never serves.
func ServeProfiler(addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	if err := checkProfiler(addr); err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	log.Info("profiler listening", "url", "http://"+l.Addr().String()+"/debug/pprof/")
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(l)
	return nil
}
