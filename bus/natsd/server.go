package natsd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/internal/cause"
	"github.com/toolbus/toolbus/internal/listen"
)

const (
	// readyPoll is how often [Start] asks whether JetStream is ready.
	readyPoll = 20 * time.Millisecond
	// patience is how long [Start] waits before it logs why JetStream is
	// not ready yet (in a cluster, the other nodes may not be up).
	patience = 5 * time.Second
)

// Server is a NATS server of [Start] whose JetStream is ready. Its
// methods are safe to call from any goroutine.
type Server struct {
	srv    *server.Server
	opts   *server.Options
	access access
	log    *slog.Logger
	fatal  chan string
}

// Run starts a server with cfg, writes the lines that join an ingress and
// a worker to it to out once JetStream is ready, and shuts it down when
// ctx ends, returning nil, or when the server fails. It installs no
// signal handler: end ctx on the signals that should stop the server.
func Run(ctx context.Context, cfg Config, out io.Writer, log *slog.Logger) error {
	s, err := Start(ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil
		}
		return err
	}
	if s.access.open {
		log.Warn("the NATS server is open (--no-auth): anyone who reaches it can act as any caller and any worker")
	}
	s.WriteReady(out)
	return s.Wait(ctx)
}

// Start checks cfg, makes the JetStream store and the files that keep the
// token or the passwords, starts a server and waits until JetStream is
// ready (in a cluster: until the nodes have elected a meta leader), as
// the server's /healthz tells. A start refused before the server runs
// leaves nothing behind. When ctx ends first, Start stops the server and
// returns ctx's error. The server logs to log.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts, access, err := cfg.options(log)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, access: access, log: log, fatal: make(chan string, 1)}
	if s.srv, err = server.NewServer(opts); err != nil {
		return nil, fmt.Errorf("the NATS server refused its settings (%v): fix the flags or the configuration file", err)
	}
	debug := opts.Debug || log.Enabled(ctx, slog.LevelDebug)
	s.srv.SetLoggerV2(serverLog{log: log, fatal: s.fatal}, debug, opts.Trace, opts.TraceVerbose)
	s.srv.Start()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	patient := time.Now().Add(patience)
	var waiting string
	for {
		h := s.srv.Healthz(nil)
		if h.StatusCode == http.StatusOK {
			return s, nil
		}
		if time.Now().After(patient) && h.Error != waiting {
			waiting = h.Error
			log.Info("waiting for JetStream", "reason", waiting)
		}
		select {
		case msg := <-s.fatal:
			s.Shutdown()
			return nil, fmt.Errorf("the NATS server did not start: %s", msg)
		case <-ctx.Done():
			s.Shutdown()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// Wait serves until ctx ends, when it shuts the server down and returns
// nil, or until the server fails, when it returns why.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		s.log.Info("shutting down the NATS server")
		s.Shutdown()
		return nil
	case msg := <-s.fatal:
		s.Shutdown()
		return fmt.Errorf("the NATS server stopped: %s", msg)
	}
}

// Shutdown stops the server and waits until it has stopped.
func (s *Server) Shutdown() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// URL is the address a client on this machine dials: nats:// or, with
// TLS, tls://.
func (s *Server) URL() string {
	scheme := "nats"
	if s.opts.TLSConfig != nil {
		scheme = "tls"
	}
	return scheme + "://" + reachable(s.srv.Addr())
}

// options reads the configuration file, if any, applies the settings it
// overrides and the defaults of what the file leaves out, settles how
// clients authenticate, and checks that the server can store and listen
// where it is told to.
func (c Config) options(log *slog.Logger) (*server.Options, access, error) {
	opts := &server.Options{}
	if c.File != "" {
		if err := readConfig(opts, c.File, log); err != nil {
			return nil, access{}, err
		}
	}
	// fromFlag records the settings taken from a flag (given, or its
	// default), so that an error names what to change.
	fromFlag := map[string]bool{}
	if c.Overrides.Listen || (opts.Host == "" && opts.Port == 0) {
		host, port, err := splitListen("--nats-listen", c.Listen)
		if err != nil {
			return nil, access{}, err
		}
		opts.Host, opts.Port, fromFlag["nats-listen"] = host, port, true
	}
	if c.Overrides.Monitor || c.File == "" {
		opts.HTTPHost, opts.HTTPPort, opts.HTTPSPort, fromFlag["monitor-listen"] = "", 0, 0, true
		if c.Monitor != "" {
			host, port, err := splitListen("--monitor-listen", c.Monitor)
			if err != nil {
				return nil, access{}, err
			}
			opts.HTTPHost, opts.HTTPPort = host, port
		}
	}
	if c.Overrides.Data || opts.StoreDir == "" {
		if c.Data == "" {
			return nil, access{}, errEmptyData
		}
		opts.StoreDir, fromFlag["data"] = c.Data, true
	}
	if c.Overrides.MaxPayload || opts.MaxPayload == 0 {
		if err := c.checkMaxPayload(); err != nil {
			return nil, access{}, err
		}
		opts.MaxPayload = c.MaxPayload
	}
	opts.JetStream = true
	// The caller handles the signals; the server's own handler would end
	// the process without the orderly shutdown.
	opts.NoSigs = true

	a, err := c.access(opts)
	if err != nil {
		return nil, access{}, err
	}
	// fix says what to change about a setting: the flag it came from, or
	// the file's item and the flag that overrides it.
	fix := func(flag, item, noun string) string {
		switch {
		case fromFlag[flag]:
			return fmt.Sprintf("choose another %s with --%s", noun, flag)
		case flag != "":
			return fmt.Sprintf("change %s in %s, or override it with --%s", item, c.File, flag)
		}
		return fmt.Sprintf("change %s in %s", item, c.File)
	}
	for _, l := range []struct {
		host       string
		port       int
		flag, item string
	}{
		{opts.Host, opts.Port, "nats-listen", "listen"},
		{opts.HTTPHost, max(opts.HTTPPort, opts.HTTPSPort), "monitor-listen", "http"},
		{opts.Cluster.Host, opts.Cluster.Port, "", "the cluster's listen"},
	} {
		if l.port <= 0 {
			continue // none, or a free port the server picks
		}
		if err := listen.Check(net.JoinHostPort(l.host, strconv.Itoa(l.port)), fix(l.flag, l.item, "address")); err != nil {
			return nil, access{}, err
		}
	}
	// The store, the token file and the password files come last, so that
	// a start refused for any other reason leaves nothing behind.
	if err := os.MkdirAll(opts.StoreDir, 0o750); err != nil {
		return nil, access{}, fmt.Errorf("cannot create the JetStream store %s (%v): %s", opts.StoreDir, cause.Root(err), fix("data", "store_dir", "directory"))
	}
	if a.tokenFile != "" {
		if a.token, a.made, err = tokenFromFile(a.tokenFile); err != nil {
			return nil, access{}, err
		}
		opts.Authorization = a.token
	}
	if len(a.roles) > 0 {
		if opts.Users, a.made, err = roleUsers(a.roles); err != nil {
			return nil, access{}, err
		}
	}
	return opts, a, nil
}

// readConfig reads the nats-server configuration file path into opts. It
// logs the file's warnings (an unknown item, say) and returns its errors
// as one line.
func readConfig(opts *server.Options, path string, log *slog.Logger) error {
	err := opts.ProcessConfigFile(path)
	if err == nil {
		return nil
	}
	var list interface {
		Errors() []error
		Warnings() []error
	}
	if !errors.As(err, &list) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("cannot read --config %s (%w): give the path of a nats-server configuration file", path, pe.Err)
		}
		return fmt.Errorf("--config %s is not a usable NATS configuration: %s", path, strings.TrimSpace(err.Error()))
	}
	for _, w := range list.Warnings() {
		log.Warn("NATS configuration", "config", path, "warning", w.Error())
	}
	if len(list.Errors()) == 0 {
		return nil
	}
	errs := make([]string, len(list.Errors()))
	for i, e := range list.Errors() {
		errs[i] = e.Error()
	}
	return fmt.Errorf("--config %s is not a usable NATS configuration: %s", path, strings.Join(errs, "; "))
}

// serverLog passes the NATS server's log to slog, and its fatal errors,
// which would end the process under the server's own logger, to fatal.
type serverLog struct {
	log   *slog.Logger
	fatal chan string
}

var _ server.Logger = serverLog{}

func (l serverLog) Noticef(format string, v ...any) { l.log.Info(fmt.Sprintf(format, v...)) }
func (l serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l serverLog) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l serverLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l serverLog) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }

func (l serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default: // the first fatal error is the one reported
	}
}
