package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// Defaults of [Config].
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
)

// Runtime is where a [Kernel] registers its methods; a
// [*worker.Runtime] is one.
type Runtime interface {
	Handle(pattern string, h worker.Handler, opts ...worker.HandleOption) error
}

var _ Runtime = (*worker.Runtime)(nil)

// Adapter reaches the remote server for a [Kernel].
type Adapter interface {
	// Connect opens a connection to the server, under ctx. An error is
	// a sentence a person reads: what could not be reached, and what to
	// check.
	Connect(ctx context.Context) (Conn, error)
}

// Conn is one connection to the remote server. The kernel lists on it
// from one goroutine at a time, calls its tools from many, and closes it
// once.
type Conn interface {
	// List returns the tools the server offers now. An error wrapped by
	// [Lost] says the server is gone, and the kernel connects again;
	// any other leaves the connection, and the listing before, in place.
	List(ctx context.Context) ([]Tool, error)
	// Wait returns when the connection has ended: the server went away,
	// or Close was called.
	Wait()
	// Close ends the connection and what it started (such as a command's
	// process).
	Close() error
}

// Tool is one tool of the remote server, as a listing found it.
type Tool struct {
	// Name is the tool's name on the server. The method is named after
	// it (see [schema.FitMethodName]).
	Name string
	// Descriptor describes the method in discovery; its Name is ignored.
	// The descriptor of the listing that registered the method stays.
	Descriptor schema.Descriptor
	// Call forwards a call of the method to the tool, over the connection
	// that listed it. An error wrapped by [Lost] says the server is gone:
	// the call is answered with the error inside, and the kernel connects
	// again.
	Call worker.Handler
}

// Lost marks err as the sign that the server is gone: returned by
// [Conn.List] or a [Tool.Call], it makes the kernel answer calls -32003
// at once and connect again. The error is answered, and matched by
// [errors.Is] and [errors.As], as err itself.
func Lost(err error) error {
	if err == nil {
		return nil
	}
	return &lostError{err}
}

// lostError is the error [Lost] makes.
type lostError struct{ err error }

func (e *lostError) Error() string { return e.err.Error() }
func (e *lostError) Unwrap() error { return e.err }

// Config is how a [Kernel] names its methods, waits and logs. The zero
// value of each field but Remote is its default.
type Config struct {
	// Remote names the kind of server in answers and logs, such as "MCP
	// server" or "A2A agent". Required.
	Remote string
	// Prefix, with a dot, comes before every method name ("fs" serves
	// the tool read_file as fs.read_file). It must follow the method
	// grammar and not be "rpc". Default none.
	Prefix string
	// MinBackoff and MaxBackoff bound the wait before connecting again,
	// which doubles after each failure (defaults [DefaultMinBackoff] and
	// [DefaultMaxBackoff]).
	MinBackoff, MaxBackoff time.Duration
	// Relist is how often the tools are listed again. Default zero: only
	// on a new connection and when [Kernel.Relist] is called.
	Relist time.Duration
	// Logger receives the kernel's warnings (default slog.Default()).
	Logger *slog.Logger
}

// Validate reports the first field of c that cannot be used, naming it.
func (c Config) Validate() error {
	badPrefix := schema.ValidateMethod(c.Prefix)
	switch {
	case c.Remote == "":
		return errors.New("the Remote of a bridge's config is empty; name the kind of server, such as \"MCP server\"")
	case c.Prefix != "" && badPrefix != nil:
		return fmt.Errorf("prefix %q: %w", c.Prefix, badPrefix)
	case c.Prefix != "" && (c.Prefix == "rpc" || schema.IsReserved(c.Prefix+".x")):
		return fmt.Errorf("prefix %q is reserved for the ingress; choose another", c.Prefix)
	case c.MinBackoff < 0 || c.MaxBackoff < 0 || (c.MinBackoff > 0 && c.MaxBackoff > 0 && c.MaxBackoff < c.MinBackoff):
		return fmt.Errorf("backoff bounds must be positive and ordered, got %v and %v", c.MinBackoff, c.MaxBackoff)
	case c.Relist < 0:
		return fmt.Errorf("the relist interval must be positive, got %v", c.Relist)
	}
	return nil
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
		if c.MaxBackoff > 0 {
			c.MinBackoff = min(c.MinBackoff, c.MaxBackoff)
		}
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinBackoff)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Kernel serves the tools of one remote server on a runtime. Make one
// with [New], then [Kernel.Start] before the runtime's Start;
// [Kernel.Close] when done. Its methods are safe for concurrent use.
type Kernel struct {
	rt      Runtime
	adapter Adapter
	cfg     Config
	log     *slog.Logger

	// relist asks the supervisor to list again; lost tells it that the
	// current connection is gone. Each holds at most one signal, and
	// only ever one about the current connection.
	relist chan struct{}
	lost   chan struct{}

	mu      sync.Mutex
	conn    Conn              // nil while disconnected
	offered map[string]Tool   // tool name → the tool, of the latest listing
	methods map[string]string // method → tool name, of every tool registered
	started bool
	// closeErr is the error of closing the last connection, for Close.
	closeErr error

	// ctx spans the kernel's life, for connecting in the background;
	// Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a kernel that will serve, on rt, the tools of the server
// adapter reaches, or the error of cfg's first unusable field.
func New(rt Runtime, adapter Adapter, cfg Config) (*Kernel, error) {
	if rt == nil || adapter == nil {
		return nil, errors.New("bridge: nil runtime or adapter")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// The kernel's context spans its life, not any request.
	ctx, cancel := context.WithCancel(context.Background())
	return &Kernel{
		rt:      rt,
		adapter: adapter,
		cfg:     cfg,
		log:     cfg.Logger,
		relist:  make(chan struct{}, 1),
		lost:    make(chan struct{}, 1),
		offered: map[string]Tool{},
		methods: map[string]string{},
		ctx:     ctx,
		cancel:  cancel,
		done:    make(chan struct{}),
	}, nil
}

// Start connects, registers the tools the server offers on the runtime,
// and keeps them in step with the server until [Kernel.Close]. It fails
// when the first connection or listing fails, or ctx ends first.
func (k *Kernel) Start(ctx context.Context) error {
	k.mu.Lock()
	if k.started {
		k.mu.Unlock()
		return errors.New("bridge: Start was called twice (or after Close); make a new bridge to start again")
	}
	k.started = true
	k.mu.Unlock()
	c, err := k.connect(ctx)
	if err != nil {
		close(k.done)
		return err
	}
	go k.supervise(c)
	return nil
}

// Methods returns the methods registered for the server's tools, sorted.
func (k *Kernel) Methods() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	ms := make([]string, 0, len(k.methods))
	for m := range k.methods {
		ms = append(ms, m)
	}
	slices.Sort(ms)
	return ms
}

// Relist asks the kernel to list the server's tools again, as soon as it
// can; asking again before it has done so asks nothing more. An adapter
// calls it when the server says its tools changed.
func (k *Kernel) Relist() {
	select {
	case k.relist <- struct{}{}:
	default:
	}
}

// Close ends the connection and the reconnecting, and waits for the
// kernel's goroutines to end. Calls afterwards are answered -32003. It
// does not shut the runtime down; it returns the error of closing the
// connection.
func (k *Kernel) Close() error {
	k.cancel()
	k.mu.Lock()
	k.conn = nil
	started := k.started
	k.started = true
	k.mu.Unlock()
	if !started {
		return nil
	}
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closeErr
}

// connect connects, lists, and makes the connection the one calls go
// to, unless the kernel was closed meanwhile.
func (k *Kernel) connect(ctx context.Context) (Conn, error) {
	c, err := k.adapter.Connect(ctx)
	if err != nil {
		return nil, err
	}
	tools, err := c.List(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	k.mu.Lock()
	if k.ctx.Err() != nil {
		k.mu.Unlock()
		c.Close()
		return nil, fmt.Errorf("bridge: closed while connecting to the %s", k.cfg.Remote)
	}
	// Signals before now were about an earlier connection, or asked
	// for the listing just made.
	drain(k.lost)
	drain(k.relist)
	k.conn, k.offered = c, byName(tools)
	k.mu.Unlock()
	k.register(tools)
	return c, nil
}

// supervise holds each connection until it is gone, then connects again,
// until Close.
func (k *Kernel) supervise(c Conn) {
	defer close(k.done)
	var tick <-chan time.Time
	if k.cfg.Relist > 0 {
		t := time.NewTicker(k.cfg.Relist)
		defer t.Stop()
		tick = t.C
	}
	for {
		ended := make(chan struct{})
		go func() {
			c.Wait()
			close(ended)
		}()
		k.hold(c, ended, tick)
		k.mu.Lock()
		if k.conn == c {
			k.conn = nil
		}
		k.mu.Unlock()
		// An ended connection still holds what it set up (a process, a
		// listener for notifications) until closed.
		err := c.Close()
		<-ended
		if k.ctx.Err() != nil {
			k.mu.Lock()
			k.closeErr = err
			k.mu.Unlock()
			return
		}
		k.log.Warn("the " + k.cfg.Remote + " went away; connecting again")
		if c = k.reconnect(); c == nil {
			return
		}
	}
}

// hold lists c's tools again when asked to, until c has ended, is lost,
// or the kernel is closed.
func (k *Kernel) hold(c Conn, ended <-chan struct{}, tick <-chan time.Time) {
	for {
		select {
		case <-k.ctx.Done():
			return
		case <-ended:
			return
		case <-k.lost:
			return
		case <-tick:
		case <-k.relist:
		}
		tools, err := c.List(k.ctx)
		var lost *lostError
		switch {
		case errors.As(err, &lost):
			if k.ctx.Err() == nil {
				k.log.Warn("cannot list the "+k.cfg.Remote+"'s tools again; its tools are unavailable until it answers", "err", err)
			}
			return
		case err != nil:
			k.log.Warn("cannot list the "+k.cfg.Remote+"'s tools again; serving those it listed before", "err", err)
		default:
			k.mu.Lock()
			if k.conn == c {
				k.offered = byName(tools)
			}
			k.mu.Unlock()
			k.register(tools)
		}
	}
}

// reconnect connects again, waiting longer after each failure, and
// returns the new connection, or nil once the kernel is closed.
func (k *Kernel) reconnect() Conn {
	wait := k.cfg.MinBackoff
	for {
		if !ctxwait.Sleep(k.ctx, wait) {
			return nil
		}
		c, err := k.connect(k.ctx)
		if err == nil {
			k.log.Info("the " + k.cfg.Remote + " answers again")
			return c
		}
		if k.ctx.Err() != nil {
			return nil
		}
		k.log.Warn("cannot reach the "+k.cfg.Remote, "err", err, "retry_in", wait)
		wait = min(2*wait, k.cfg.MaxBackoff)
	}
}

// byName indexes a listing by the tools' names.
func byName(tools []Tool) map[string]Tool {
	m := make(map[string]Tool, len(tools))
	for _, t := range tools {
		m[t.Name] = t
	}
	return m
}

// register registers the tools not registered yet. Their listing is in
// force already, so that no call of a new method finds its tool missing.
func (k *Kernel) register(tools []Tool) {
	for _, t := range tools {
		method, ok := schema.FitMethodName(k.cfg.Prefix, t.Name)
		if !ok {
			k.log.Warn("the tool's name cannot be made a method name; skipped", "tool", t.Name)
			continue
		}
		k.mu.Lock()
		prev, registered := k.methods[method]
		k.mu.Unlock()
		if registered {
			if prev != t.Name {
				k.log.Warn("two tools map to one method; the second is skipped", "method", method, "tool", t.Name, "other", prev)
			}
			continue
		}
		if err := k.rt.Handle(method, k.handler(t.Name), worker.Describe(t.Descriptor)); err != nil {
			k.log.Warn("cannot register the tool", "tool", t.Name, "method", method, "err", err)
			continue
		}
		k.mu.Lock()
		k.methods[method] = t.Name
		k.mu.Unlock()
	}
}

// handler answers calls of the method of the tool named name: -32003
// while disconnected, -32601 while the server does not offer the tool,
// else what the tool answers.
func (k *Kernel) handler(name string) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, req *worker.Request) (any, error) {
		k.mu.Lock()
		c := k.conn
		tool, offered := k.offered[name]
		k.mu.Unlock()
		if c == nil {
			return nil, schema.NewError(schema.CodeUnavailable,
				"unavailable: the "+k.cfg.Remote+" behind "+req.Method+" cannot be reached now; the bridge is connecting again",
				map[string]any{"retryable": true, "retry_after_ms": k.cfg.MinBackoff.Milliseconds(), "method": req.Method})
		}
		if !offered {
			return nil, schema.NewError(schema.CodeMethodNotFound, "method not found: the "+k.cfg.Remote+" no longer offers "+name,
				map[string]any{"reason": schema.ReasonToolWithdrawn, "method": req.Method})
		}
		res, err := tool.Call.ServeCall(ctx, req)
		var lost *lostError
		if errors.As(err, &lost) {
			k.lose(c)
			return nil, lost.err
		}
		return res, err
	})
}

// lose takes c out of service, if it is the connection calls go to, and
// tells the supervisor.
func (k *Kernel) lose(c Conn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.conn != c {
		return
	}
	k.conn = nil
	select {
	case k.lost <- struct{}{}:
	default:
	}
}

// drain empties a channel of signals.
func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}
