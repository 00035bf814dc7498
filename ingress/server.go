package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/ingress/a2a"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/ingress/mcp"
	"github.com/toolbus/toolbus/ingress/quota"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/schema"
)

// Timeouts of the HTTP server started by [Server.Serve]. The write timeout
// runs from the end of the request headers to the end of the response, so it
// covers reading the body, the longest call deadline and writing the answer:
// readTimeout + max timeout + writeSlack.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = time.Minute
	idleTimeout       = 2 * time.Minute
	writeSlack        = 30 * time.Second
)

// Server is the HTTP ingress. Create it with [New]; its methods are safe for
// concurrent use.
type Server struct {
	// dispatcher is the chain every transport hands its calls to (see
	// [Server.chain]).
	dispatcher schema.Dispatcher
	cfg        config
	log        *slog.Logger
	mux        *http.ServeMux
	srv        *http.Server
	limit      schema.Limits
	// step is yield, bound once, for the steps a large batch is parsed
	// in (a method value made per request would be an allocation).
	step func()

	// router routes extension methods; nil without extensions.
	router *router
	// mcp is the MCP front door; nil without [WithRegistry].
	mcp *mcp.Server
	// a2a is the A2A front door; nil without [WithA2A].
	a2a *a2a.Server
	// dash answers the dashboard, served at /ui/ unless it is off.
	dash *dashboard.Dashboard

	// auth checks credentials (nil without [WithAuth]); limiter holds
	// the callers' token buckets (nil without rate limits).
	auth    *auth.Authenticator
	limiter *quota.Limiter
	handler http.Handler

	// conns counts the connections of Serve's listeners per address;
	// bytes the answers held for each caller until they are written.
	conns *quota.Conns
	bytes *quota.Bytes

	// closing is set when Shutdown starts, so /readyz turns 503 while
	// requests in flight are still being answered.
	closing atomic.Bool

	// ws holds the WebSocket connections, which the HTTP server forgets
	// once they are hijacked, for Shutdown to drain.
	wsMu sync.Mutex
	ws   map[*wsConn]struct{}

	// Observability (observe.go): the replica's id, its tracer, its
	// metrics (nil without [WithMetrics]), the dashboard's statistics, the
	// bounded method labels, and the calls in flight.
	id       string
	tracer   trace.Tracer
	metrics  *metrics
	stats    *callstats.Set
	labels   callstats.Names
	codes    callstats.Codes
	inFlight atomic.Int64
}

// New returns a server that hands calls to d. It fails when d is nil or an
// option is invalid.
func New(d schema.Dispatcher, opts ...Option) (*Server, error) {
	if d == nil {
		return nil, errors.New("ingress: nil dispatcher")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	tp := cfg.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	id := cfg.id
	if id == "" {
		id = nuid.Next()
	}
	s := &Server{
		id:      id,
		tracer:  tp.Tracer(tracerName),
		stats:   callstats.New(),
		labels:  callstats.Names{Max: DefaultMetricsMaxMethods, Other: labelOther},
		cfg:     cfg,
		log:     cfg.logger.With("component", "ingress"),
		limit:   schema.Limits{MaxBatchItems: cfg.limits.MaxBatchItems, MaxDepth: cfg.limits.MaxDepth},
		ws:      map[*wsConn]struct{}{},
		auth:    cfg.auth,
		limiter: quota.NewLimiter(cfg.rate, cfg.callerRates),
	}
	s.step = s.yield
	if cfg.registry != nil {
		// rpc.discover shows each caller what it may see, which takes the
		// authentication configured by any option.
		cfg.extensions[discovery.Method] = s.discoverer()
	}
	s.router = newRouter(cfg.extensions, s.deadline)
	s.conns = quota.NewConns(cfg.maxConnsPerAddr, s.countRefusal)
	s.bytes = quota.NewBytes(cfg.maxBytes, cfg.callerMaxBytes)
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("/rpc", s.serveRPC)
	s.mux.HandleFunc(restPattern, s.serveREST)
	s.mux.HandleFunc("GET /healthz", s.serveHealth)
	s.mux.HandleFunc("GET /readyz", s.serveReady)
	s.dispatcher = s.chain(d)
	if err := s.setupMetrics(); err != nil {
		return nil, fmt.Errorf("ingress: metrics: %w", err)
	}
	if cfg.registry != nil {
		s.mux.Handle("GET /openrpc.json", s.discoverer())
		m, err := s.newMCP()
		if err != nil {
			return nil, fmt.Errorf("ingress: %w", err)
		}
		s.mcp = m
		s.mux.Handle(mcp.Path, m)
	}
	if cfg.a2aOn {
		a, err := s.newA2A()
		if err != nil {
			s.mcp.Close()
			return nil, fmt.Errorf("ingress: %w", err)
		}
		s.a2a = a
		s.mux.Handle("POST "+a2a.Path, a)
		s.mux.Handle(a2a.CardPath, a)
	}
	s.setupDashboard()
	s.handler = traced(s.authMiddleware(s.idempotency(s.mux)))
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      readTimeout + cfg.maxTimeout + writeSlack,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    cfg.maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// chain returns the path every dispatched call takes to d, listed once,
// in call order. Before it, [Server.plan] has parsed each message, answered
// what can never be routed, admitted each call (authorization, the
// caller's byte budget and rate limit) and settled its deadline
// ([WithDeadline]); the aggregator, last, applies the in-flight caps and
// runs the call on the bus. The fairness layer comes before any work a
// call costs the ingress, checking its params first of all, so that a
// caller's calls cost it in its own share.
func (s *Server) chain(d schema.Dispatcher) schema.Dispatcher {
	return schema.Chain(d,
		s.observe,                    // spans, metrics, dashboard statistics, message log
		s.cfg.fair.layer(s.deadline), // per-caller queues and the window of seats (WithFairness); rpc.* methods pass
		discovery.Layer(s.cfg.registry, !s.cfg.noValidate), // params and deadline of advertised tools; -32003 for one no worker serves
		s.router.layer(), // rpc.* extensions (rpc.jobs.*, rpc.discover) and calls promoted to jobs
	)
}

// Handler returns the routes of the ingress: POST /rpc (JSON or
// server-sent events), GET /rpc (WebSocket), POST /v1/tools/{method}/invoke,
// GET /healthz and GET /readyz, and with [WithRegistry] GET /openrpc.json
// and the MCP front door at /mcp, and with [WithA2A] POST /a2a and GET
// /.well-known/agent-card.json. Use it to mount the ingress in a server of one's own; [Serve]
// uses it too.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve accepts connections on l until [Server.Shutdown] is called, with
// timeouts that let the slowest allowed call finish: the write timeout
// exceeds the maximum call deadline ([WithMaxTimeout]), and with the bounds
// of [WithMaxHeaderBytes] and [WithMaxConnsPerAddr]. Serve may be called
// for several listeners; the connections of one address are counted
// across them. It returns nil once Shutdown has been called, and
// otherwise the error that stopped it.
func (s *Server) Serve(l net.Listener) error {
	err := s.srv.Serve(s.conns.Listener(l))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("ingress: serve: %w", err)
}

// Shutdown stops the server gracefully: /readyz answers 503 at once, the
// listeners close, requests in flight are answered, and WebSocket
// connections answer the calls they have in flight, refuse new ones -32003
// and close with status 1001 (going away), all before Shutdown returns.
// When ctx ends first, Shutdown closes the remaining connections, which
// cancels their calls, and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.wsMu.Lock()
	s.closing.Store(true)
	s.wsMu.Unlock()
	wsDone := make(chan error, 1)
	go func() { wsDone <- s.drainWebSockets(ctx) }()
	s.mcp.Close()
	s.a2a.Close()
	err := s.srv.Shutdown(ctx)
	wsErr := <-wsDone
	if s.cfg.fair != nil {
		s.cfg.fair.poll.close()
	}
	if err != nil {
		// Close cannot fail in a way that matters more than the deadline
		// the caller set; report that.
		_ = s.srv.Close()
		return fmt.Errorf("ingress: shutdown: %w", err)
	}
	if wsErr != nil {
		return fmt.Errorf("ingress: shutdown: %w", wsErr)
	}
	return nil
}
