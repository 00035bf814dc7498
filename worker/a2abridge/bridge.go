package a2abridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/toolbus/toolbus/internal/options"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/bridge"
)

// Defaults of [New].
const (
	DefaultMinBackoff  = bridge.DefaultMinBackoff
	DefaultMaxBackoff  = bridge.DefaultMaxBackoff
	DefaultCardRefresh = 5 * time.Minute
	// DefaultAPIKeyHeader is the header [WithAPIKey] sets when given no
	// name.
	DefaultAPIKeyHeader = "X-API-Key"
)

// cardTimeout bounds reading the agent's card.
const cardTimeout = 30 * time.Second

// SkillMetadataKey is the key of the message metadata that names the skill
// a call of the bridge asks for; A2A itself has no field for it.
const SkillMetadataKey = "skill"

// ParamsSchema is the JSON Schema of the params of every bridged skill: a
// text, a JSON object, or both, sent to the agent as a text part and a
// data part of one message.
var ParamsSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"text":{"type":"string","description":"sent to the agent as a text part"},` +
	`"data":{"type":"object","description":"sent to the agent as a data part"}},` +
	`"anyOf":[{"required":["text"]},{"required":["data"]}],"additionalProperties":false}`)

type config struct {
	kernel      bridge.Config
	poll        time.Duration
	client      *http.Client
	credentials http.Header
}

// Option configures [New].
type Option func(*config) error

// WithPrefix puts prefix and a dot before every method name ("travel"
// serves the skill book_flight as travel.book_flight). The prefix must
// follow the method grammar and not start with "rpc". Default none.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		c.kernel.Prefix = prefix
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("a2abridge: nil logger")
		}
		c.kernel.Logger = l
		return nil
	}
}

// WithBackoff sets the bounds of the wait between attempts to read the
// card of an agent that went away, which doubles from minWait up to
// maxWait. A zero bound takes its default ([DefaultMinBackoff],
// [DefaultMaxBackoff]); [New] refuses bounds that are negative or out of
// order, as the bridge kernel checks them.
func WithBackoff(minWait, maxWait time.Duration) Option {
	return func(c *config) error {
		c.kernel.MinBackoff, c.kernel.MaxBackoff = minWait, maxWait
		return nil
	}
}

// WithCardRefresh sets how often the agent's card is read again, to serve
// skills it added and withdraw those it dropped (default
// [DefaultCardRefresh]).
func WithCardRefresh(every time.Duration) Option {
	return func(c *config) error {
		if every <= 0 {
			return fmt.Errorf("a2abridge: card refresh interval must be positive, got %v", every)
		}
		c.kernel.Relist = every
		return nil
	}
}

// WithPollInterval sets how often the task of an agent that cannot stream
// is read (default [DefaultPollInterval]).
func WithPollInterval(every time.Duration) Option {
	return func(c *config) error {
		if every <= 0 {
			return fmt.Errorf("a2abridge: poll interval must be positive, got %v", every)
		}
		c.poll = every
		return nil
	}
}

// WithHTTPClient sets the HTTP client the bridge reaches the agent with
// (default: one of its own, with no overall timeout: each call is bounded
// by its deadline).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) error {
		if hc == nil {
			return errors.New("a2abridge: nil HTTP client")
		}
		c.client = hc
		return nil
	}
}

// WithBearerToken sends "Authorization: Bearer token" with every request
// to the agent, and reads the agent's extended card when it has one.
func WithBearerToken(token string) Option {
	return func(c *config) error {
		if strings.TrimSpace(token) == "" {
			return errors.New("a2abridge: the bearer token is empty")
		}
		c.credentials.Set("Authorization", "Bearer "+token)
		return nil
	}
}

// WithAPIKey sends key in the header name (default [DefaultAPIKeyHeader]
// when empty) with every request to the agent, and reads the agent's
// extended card when it has one.
func WithAPIKey(name, key string) Option {
	return func(c *config) error {
		if name == "" {
			name = DefaultAPIKeyHeader
		}
		if strings.TrimSpace(key) == "" {
			return errors.New("a2abridge: the API key is empty")
		}
		c.credentials.Set(name, key)
		return nil
	}
}

// Bridge serves the skills of one remote A2A agent on a runtime. Make one
// with [New], then [Bridge.Start] before the runtime's Start;
// [Bridge.Close] when done. Its methods are safe for concurrent use.
type Bridge struct {
	kernel *bridge.Kernel
}

// defaultConfig is what a bridge is made with before its options.
func defaultConfig() config {
	return config{
		kernel: bridge.Config{Remote: "A2A agent", Logger: slog.Default(), MinBackoff: DefaultMinBackoff, MaxBackoff: DefaultMaxBackoff,
			Relist: DefaultCardRefresh},
		poll: DefaultPollInterval, client: &http.Client{}, credentials: http.Header{}}
}

// checkAgentURL checks the agent's URL, which must be http:// or
// https://.
func checkAgentURL(agentURL string) error {
	u, err := url.Parse(agentURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("a2abridge: the agent URL %q is not an http:// or https:// URL", agentURL)
	}
	return nil
}

// CheckOptions reports the agent URL or the first of opts that [New]
// would refuse, so that a configuration is checked before anything
// connects or starts.
func CheckOptions(agentURL string, opts ...Option) error {
	if err := checkAgentURL(agentURL); err != nil {
		return err
	}
	_, err := newConfig(opts)
	return err
}

// newConfig returns the config opts make of the defaults, or the first
// refusal.
func newConfig(opts []Option) (config, error) {
	return options.Apply(defaultConfig(), opts)
}

// New returns a bridge that will serve the skills of the A2A agent at
// agentURL on rt. agentURL is the agent's base URL, under which its card
// is read at /.well-known/agent-card.json, or the URL of the card itself
// when it ends in ".json".
func New(rt *worker.Runtime, agentURL string, opts ...Option) (*Bridge, error) {
	if rt == nil {
		return nil, errors.New("a2abridge: nil runtime")
	}
	if err := checkAgentURL(agentURL); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	hc := *cfg.client
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = statusTransport{base}
	cfg.kernel.Logger = cfg.kernel.Logger.With("component", "a2abridge", "agent", agentURL)
	a := &adapter{url: agentURL, cfg: cfg, log: cfg.kernel.Logger, http: &hc}
	k, err := bridge.New(rt, a, cfg.kernel)
	if err != nil {
		return nil, fmt.Errorf("a2abridge: %w", err)
	}
	return &Bridge{kernel: k}, nil
}

// Start reads the agent's card, registers its skills on the runtime, and
// keeps them in step with the agent until [Bridge.Close]. It fails when
// the first reading fails, or ctx ends first.
func (b *Bridge) Start(ctx context.Context) error { return b.kernel.Start(ctx) }

// Methods returns the toolbus methods registered for the agent's skills.
func (b *Bridge) Methods() []string { return b.kernel.Methods() }

// Close stops following the agent. Calls afterwards are answered -32003.
// It does not shut the runtime down.
func (b *Bridge) Close() error { return b.kernel.Close() }

// adapter reaches the A2A agent for the bridge's kernel.
type adapter struct {
	url  string
	cfg  config
	log  *slog.Logger
	http *http.Client
}

var _ bridge.Adapter = (*adapter)(nil)

// agent is one reading of the remote agent's card and the client made
// from it.
type agent struct {
	card   *a2a.AgentCard
	client *a2aclient.Client
}

// Connect begins a hold on the agent. A2A's requests stand alone, so
// there is no connection to open: each listing reads the card.
func (a *adapter) Connect(context.Context) (bridge.Conn, error) {
	return &conn{a: a, closed: make(chan struct{})}, nil
}

// conn is the bridge's hold on the agent: it lasts from a reading of the
// card until the agent cannot be reached.
type conn struct {
	a      *adapter
	closed chan struct{}
	once   sync.Once
}

var _ bridge.Conn = (*conn)(nil)

// List reads the agent's card and lists its skills. A card that cannot be
// read takes the agent out of service until it can.
func (c *conn) List(ctx context.Context) ([]bridge.Tool, error) {
	ag, err := c.a.read(ctx)
	if err != nil {
		return nil, bridge.Lost(err)
	}
	tools := make([]bridge.Tool, 0, len(ag.card.Skills))
	for _, skill := range ag.card.Skills {
		tools = append(tools, bridge.Tool{
			Name:       skill.ID,
			Descriptor: schema.Descriptor{Description: describe(skill), Version: ag.card.Version, Params: ParamsSchema},
			Call:       c.a.caller(ag, skill.ID),
		})
	}
	return tools, nil
}

// Wait returns once the hold is closed: the agent does not end it.
func (c *conn) Wait() { <-c.closed }

// Close ends the hold.
func (c *conn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// read reads the agent's card (the extended card when the bridge has
// credentials and the agent offers one) and makes a client from it.
func (a *adapter) read(ctx context.Context) (*agent, error) {
	ctx, cancel := context.WithTimeout(ctx, cardTimeout)
	defer cancel()
	base, opts := a.url, []agentcard.ResolveOption(nil)
	if strings.HasSuffix(a.url, ".json") {
		u, _ := url.Parse(a.url) // parsed in New
		base = u.Scheme + "://" + u.Host
		opts = append(opts, agentcard.WithPath(u.EscapedPath()))
	}
	for name := range a.cfg.credentials {
		opts = append(opts, agentcard.WithRequestHeader(name, a.cfg.credentials.Get(name)))
	}
	card, err := agentcard.NewResolver(a.http).Resolve(ctx, base, opts...)
	if err != nil {
		return nil, fmt.Errorf("a2abridge: cannot read the agent card under %s; check that the agent runs and that the URL is its base URL or its card's URL: %w", a.url, err)
	}
	if card.PreferredTransport == "" {
		// A2A's default binding.
		card.PreferredTransport = a2a.TransportProtocolJSONRPC
	}
	// The bridge speaks the JSON-RPC binding only.
	c, err := a2aclient.NewFromCard(ctx, card,
		a2aclient.WithDefaultsDisabled(),
		a2aclient.WithJSONRPCTransport(a.http),
		a2aclient.WithConfig(a2aclient.Config{Polling: true}),
		a2aclient.WithInterceptors(Headers(a.cfg.credentials)))
	if err != nil {
		return nil, fmt.Errorf("a2abridge: the agent at %s offers no JSON-RPC endpoint, the only binding the bridge speaks: %w", a.url, err)
	}
	if card.SupportsAuthenticatedExtendedCard && len(a.cfg.credentials) > 0 {
		ext, err := c.GetAgentCard(ctx)
		if err != nil {
			a.log.Warn("cannot read the agent's extended card; serving the skills of its public card", "err", err)
		} else {
			card = ext
		}
	}
	return &agent{card: card, client: c}, nil
}

// Headers is an [a2aclient.CallInterceptor] that adds its headers (such
// as credentials) to every request of the client.
type Headers http.Header

// Before adds the headers to the request.
func (h Headers) Before(ctx context.Context, req *a2aclient.Request) (context.Context, error) {
	for name, vs := range h {
		req.Meta[name] = vs
	}
	return ctx, nil
}

// After does nothing.
func (Headers) After(context.Context, *a2aclient.Response) error { return nil }

var _ a2aclient.CallInterceptor = Headers(nil)

// describe is the description of a skill's method: its description, or
// its name when it has none, and its examples.
func describe(s a2a.AgentSkill) string {
	d := s.Description
	if d == "" {
		d = s.Name
	}
	if len(s.Examples) > 0 {
		d += "\n\nExamples: " + strings.Join(s.Examples, "; ")
	}
	return d
}

// callParams is the params of a bridged skill; see [ParamsSchema].
type callParams struct {
	Text *string        `json:"text"`
	Data map[string]any `json:"data"`
}

// message is the message a call with params p sends for skill.
func message(skill string, p json.RawMessage) (*a2a.Message, error) {
	trimmed := bytes.TrimSpace(p)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, worker.InvalidParams("", `an A2A skill takes an object with "text", "data" or both`)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	// Numbers reach the agent spelled as the caller wrote them.
	dec.UseNumber()
	var cp callParams
	if err := dec.Decode(&cp); err != nil {
		return nil, worker.InvalidParams("", `an A2A skill takes an object with "text" (a string), "data" (an object) or both: `+err.Error())
	}
	var parts []a2a.Part
	if cp.Text != nil {
		parts = append(parts, a2a.TextPart{Text: *cp.Text})
	}
	if cp.Data != nil {
		parts = append(parts, a2a.DataPart{Data: cp.Data})
	}
	if len(parts) == 0 {
		return nil, worker.InvalidParams("", `an A2A skill needs "text", "data" or both in its params`)
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, parts...)
	msg.Metadata = map[string]any{SkillMetadataKey: skill}
	return msg, nil
}

// caller sends calls of a method to the skill of the agent ag read.
func (a *adapter) caller(ag *agent, skill string) worker.Handler {
	return worker.HandlerFunc(func(ctx context.Context, req *worker.Request) (any, error) {
		msg, err := message(skill, req.Params)
		if err != nil {
			return nil, err
		}
		out, err := Follow(ctx, ag.client, msg, FollowOptions{
			Streaming:    ag.card.Capabilities.Streaming,
			PollInterval: a.cfg.poll,
			OnUpdate: func(u Update) {
				worker.Progress(ctx, 0, progressMessage(u))
			},
		})
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			return nil, a.failure(req.Method, err)
		}
		if out.Task != nil && out.Task.Status.State != a2a.TaskStateCompleted {
			return nil, taskError(out.Task)
		}
		return Result(out)
	})
}

// progressMessage is the progress a status change reports: the state and
// the status's text.
func progressMessage(u Update) string {
	if u.Message == "" {
		return string(u.State)
	}
	return string(u.State) + ": " + u.Message
}

// unavailable is the -32003 answer of a call while the agent cannot be
// reached.
func (a *adapter) unavailable(method, why string) error {
	return schema.NewError(schema.CodeUnavailable, "unavailable: the A2A agent behind "+method+" "+why,
		map[string]any{"retryable": true, "retry_after_ms": a.cfg.kernel.MinBackoff.Milliseconds(), "method": method})
}

// failure is the answer of a call whose exchange with the agent failed.
// When the agent could not be reached, the bridge reads its card again
// before sending it more calls.
func (a *adapter) failure(method string, err error) error {
	var se *StatusError
	if errors.As(err, &se) && se.Code < 500 {
		return schema.NewError(schema.CodeUnavailable, fmt.Sprintf(
			"unavailable: the A2A agent behind %s refused the request with HTTP %d; check the bridge's URL and credentials (--a2a-url, --a2a-token, --a2a-api-key)",
			method, se.Code), map[string]any{"retryable": false, "method": method, "http_status": se.Code})
	}
	var ue *url.Error
	if errors.As(err, &ue) || errors.As(err, &se) {
		a.log.Warn("cannot reach the A2A agent", "method", method, "err", err)
		return bridge.Lost(a.unavailable(method, "went away ("+err.Error()+"); the bridge is reading its card again"))
	}
	return schema.NewError(schema.CodeToolError, "tool error: the A2A agent behind "+method+" answered with an error: "+err.Error(),
		map[string]any{"method": method})
}

// taskError is the answer of a call whose task ended without completing.
func taskError(t *a2a.Task) error {
	msg := Text(t.Status.Message)
	data := map[string]any{"task_id": t.ID, "context_id": t.ContextID, "state": t.Status.State}
	if msg != "" {
		data["message"] = msg
	}
	var what string
	switch t.Status.State {
	case a2a.TaskStateFailed:
		what = "the A2A agent's task failed"
	case a2a.TaskStateRejected:
		what = "the A2A agent rejected the task"
	case a2a.TaskStateCanceled:
		what = "the A2A agent canceled the task"
	case a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired:
		what = "the A2A agent's task stopped for input that a tool call cannot give (" + string(t.Status.State) + ")"
	default:
		what = "the A2A agent's task ended in state " + string(t.Status.State)
	}
	if msg != "" {
		what += ": " + msg
	}
	return schema.NewError(schema.CodeToolError, "tool error: "+what, data)
}

// StatusError is the error of a request the agent's HTTP server answered
// with a status other than 2xx.
type StatusError struct {
	Code   int
	Status string
}

func (e *StatusError) Error() string { return "the agent answered HTTP " + e.Status }

// statusTransport turns an HTTP answer other than 2xx into a
// [*StatusError], so that a failure of the agent's server can be told from
// an error the agent answers.
type statusTransport struct{ base http.RoundTripper }

func (t statusTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.StatusCode/100 == 2 {
		return resp, err
	}
	resp.Body.Close()
	return nil, &StatusError{Code: resp.StatusCode, Status: resp.Status}
}
