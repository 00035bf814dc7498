package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// pprofEnv names the variable that makes `toolbus dev` serve the Go
// profiler's endpoints (/debug/pprof/...) on a loopback address, to
// profile it under load. It is off when unset and refused for an address
// that is not loopback: a profile shows everything the process holds.
const pprofEnv = "TOOLBUS_PPROF"

// servePprof serves the profiler on the loopback address in [pprofEnv],
// when it is set, until the process ends. The handlers go on a mux of
// their own; net/http/pprof also registers them on http.DefaultServeMux,
// which toolbus never serves.
func servePprof() error {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", pprofEnv, addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s=%q: want a loopback address such as 127.0.0.1:6060", pprofEnv, addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", pprofEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	slog.Info("profiler listening", "url", "http://"+l.Addr().String()+"/debug/pprof/")
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(l)
	return nil
}
