package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/internal/ctxwait"
	"github.com/toolbus/toolbus/schema"
)

// The goals of `toolbus bench tenants`: what a victim calling alone keeps
// while another caller floods the same ingress.
const (
	// GoalTenantsP99Ratio is the most the victim's p99 under the flood may
	// be, as a multiple of its p99 without it.
	GoalTenantsP99Ratio = 3.0
	// GoalTenantsRateShare is the least share of its call rate without the
	// flood that the victim must keep under it.
	GoalTenantsRateShare = 0.40
)

// TenantsConfig configures [Tenants]. The ingress behind URL must
// authenticate API keys (X-Api-Key): VictimKey may call echo, FloodKey
// echo and the rpc.jobs methods. It travels as JSON to a load generator
// process, without RSS and Progress.
type TenantsConfig struct {
	URL                 string
	VictimKey, FloodKey string
	// VictimAddr and FloodAddr are the local IP addresses the two callers
	// connect from (default: any), so that a bound on connections per
	// client address counts them apart.
	VictimAddr, FloodAddr string
	// Concurrency is the victim's number of callers, each with one echo
	// call in flight (default 1).
	Concurrency int
	// Duration is the length of each round (default 3s).
	Duration time.Duration
	// Rounds is the number of quiet-then-flood pairs (default 2).
	Rounds int
	// Alone leaves the flood out: all 2×Rounds rounds measure the victim
	// calling alone, as the cost of the ingress's scheduling when there is
	// nothing to share.
	Alone bool
	// FloodConns is the number of connections sending the flood's batches,
	// each waiting for one batch's answer before it sends the next
	// (default 4).
	FloodConns int
	// BatchSize is the number of echo calls in a flood batch (default
	// 500).
	BatchSize int
	// Hostile adds the rest of a hostile caller's flood to the batches:
	// job submits, echo calls under a new Idempotency-Key each, echo calls
	// with answers of WSAnswerBytes on a WebSocket it never reads, and
	// SlowConns connections that send a 100 KB header slowly.
	Hostile bool
	// WSAnswerBytes is the size of the echo answers the hostile flood's
	// WebSocket asks for and never reads (default 256 KiB).
	WSAnswerBytes int
	// SlowConns is the number of connections of the hostile flood that
	// send a 100 KB header slowly (default 100).
	SlowConns int
	// RSS, when not nil, reports the resident memory of the process
	// serving URL; it is sampled during every round.
	RSS func() (uint64, error) `json:"-"`
	// Progress, when not nil, counts the victim's calls. Optional.
	Progress *Progress `json:"-"`
}

// TenantsRound is what one round measured.
type TenantsRound struct {
	// Flood says whether the flooder ran during the round.
	Flood bool
	// Victim is the victim's echo calls; its Errors are counted by class
	// in [TenantsResult.VictimErrors].
	Victim Result
	// RSS is the most resident memory seen during the round, 0 when it
	// could not be read.
	RSS uint64
}

// TenantsResult is what [Tenants] measured.
type TenantsResult struct {
	Concurrency, FloodConns, BatchSize, SlowConns, WSAnswerBytes int
	Hostile, Alone                                               bool
	Duration                                                     time.Duration
	Rounds                                                       []TenantsRound
	// Quiet and Flooded merge the victim's rounds without and with the
	// flood.
	Quiet, Flooded Result
	// VictimErrors counts the victim's failed calls by class ("-32002
	// caller_max_in_flight", "transport"); FirstVictimError is one of
	// them.
	VictimErrors     map[string]int64
	FirstVictimError error
	// FloodAnswers counts what the flood got, by what it sent and the
	// class of the answer ("batch call: ok", "batch call: -32002
	// caller_max_in_flight", "slow header: HTTP 431").
	FloodAnswers map[string]int64
	// RSSQuiet is the most resident memory seen in the first round,
	// before any flood (a Go process keeps memory it once used, so later
	// quiet rounds show the flood's high-water mark); RSSFlood the most
	// seen in the rounds with the flood. RSSError says why they are 0.
	RSSQuiet, RSSFlood uint64
	RSSError           error
}

// Tenants measures how much a flooding caller costs another: the victim
// calls echo in a closed loop of Concurrency callers, in rounds that
// alternate without the flood and with it (with Alone, every round is
// without). The flood sends batches of BatchSize echo calls on FloodConns
// connections, each the next as soon as the last is answered; with
// Hostile, it sends at the same time job submits, echo calls under a new
// Idempotency-Key each, echo calls with large answers on a WebSocket it
// never reads (dialled again when the server closes it), and SlowConns
// connections that send 100 KB of headers a kilobyte at a time. The flood
// ignores retry_after_ms, as a hostile caller would. Tenants runs both
// callers in this process; `toolbus bench tenants` runs each in load
// generator processes of its own.
//
// Before each round Tenants waits, at most a minute, until the victim's
// echo is answered: a worker that joined over TCP announces its tools a
// moment after the ingress is ready. It returns an error when the victim
// or the flood could not run at all; the victim's failed calls after that
// are counted, not returned.
func Tenants(ctx context.Context, cfg TenantsConfig) (TenantsResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return TenantsResult{}, err
	}
	sides := newLocalSides(cfg)
	defer sides.close()
	return tenants(ctx, cfg, sides)
}

// withDefaults checks cfg and fills in the defaults its fields document.
func (cfg TenantsConfig) withDefaults() (TenantsConfig, error) {
	if err := checkURL(cfg.URL); err != nil {
		return cfg, fmt.Errorf("bench: tenants: %w", err)
	}
	if cfg.VictimKey == "" || cfg.FloodKey == "" || cfg.VictimKey == cfg.FloodKey {
		return cfg, errors.New("bench: tenants: the victim and the flood need API keys of their own")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 2
	}
	if cfg.FloodConns <= 0 {
		cfg.FloodConns = 4
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.WSAnswerBytes <= 0 {
		cfg.WSAnswerBytes = 256 << 10
	}
	if cfg.SlowConns <= 0 {
		cfg.SlowConns = 100
	}
	return cfg, nil
}

// settle is the time before each round is measured: the victim calls, and
// the flood of a flooded round runs, but nothing is counted.
func (cfg TenantsConfig) settle() time.Duration { return cfg.Duration / 4 }

// tenantSides are the two callers of the scenario. [Tenants] runs both in
// its process (localSides); `toolbus bench tenants` runs each in load
// generator processes of its own (loadSides), so that the flood's client
// work never delays the victim's calls.
type tenantSides interface {
	// victimRound waits until the victim's echo is answered, then runs
	// one round of its calls, and counts its failed calls on errs.
	victimRound(ctx context.Context, errs *tally) (Result, error)
	// flood starts the flood of round; stop ends it, waits for its end
	// and counts its answers on answers.
	flood(ctx context.Context, round int, answers *tally) (stop func() error, err error)
}

// tenants runs the rounds of cfg, checked and with its defaults, on sides.
func tenants(ctx context.Context, cfg TenantsConfig, sides tenantSides) (TenantsResult, error) {
	res := TenantsResult{Concurrency: cfg.Concurrency, FloodConns: cfg.FloodConns, BatchSize: cfg.BatchSize,
		Hostile: cfg.Hostile, Alone: cfg.Alone, Duration: cfg.Duration,
		Quiet: Result{hist: new(histogram)}, Flooded: Result{hist: new(histogram)}}
	if cfg.Hostile {
		res.SlowConns, res.WSAnswerBytes = cfg.SlowConns, cfg.WSAnswerBytes
	}
	var victimErrs, floodAnswers tally
	cfg.Progress.planTime(time.Duration(2*cfg.Rounds)*(cfg.Duration+cfg.settle()), "req")
	for i := range 2 * cfg.Rounds {
		flooded := i%2 == 1 && !cfg.Alone
		rctx, endRound := context.WithCancel(ctx)
		var rss rssPeak
		var bg sync.WaitGroup
		if cfg.RSS != nil {
			bg.Go(func() { rss.sample(rctx, cfg.RSS) })
		}
		stopFlood := func() error { return nil }
		var err error
		if flooded {
			if stopFlood, err = sides.flood(rctx, i, &floodAnswers); err != nil {
				endRound()
				bg.Wait()
				return res.finish(&victimErrs, &floodAnswers), err
			}
		}
		r, err := sides.victimRound(ctx, &victimErrs)
		err = errors.Join(err, stopFlood())
		endRound()
		bg.Wait()
		res.Rounds = append(res.Rounds, TenantsRound{Flood: flooded, Victim: r, RSS: rss.max})
		sum := &res.Quiet
		if flooded {
			sum = &res.Flooded
		}
		sum.merge(r)
		if rss.err != nil && res.RSSError == nil {
			res.RSSError = rss.err
		}
		if flooded {
			res.RSSFlood = max(res.RSSFlood, rss.max)
		} else if i == 0 {
			res.RSSQuiet = rss.max
		}
		if err != nil {
			return res.finish(&victimErrs, &floodAnswers), err
		}
	}
	return res.finish(&victimErrs, &floodAnswers), nil
}

// localSides runs both callers of the scenario in this process, each with
// connections of its own.
type localSides struct {
	cfg             TenantsConfig
	victim, flooder *tenant
}

var _ tenantSides = (*localSides)(nil)

func newLocalSides(cfg TenantsConfig) *localSides {
	return &localSides{cfg: cfg,
		victim:  newTenant(cfg.URL, cfg.VictimKey, cfg.VictimAddr, cfg.Concurrency),
		flooder: newTenant(cfg.URL, cfg.FloodKey, cfg.FloodAddr, cfg.FloodConns+4)}
}

func (s *localSides) close() {
	s.victim.close()
	s.flooder.close()
}

func (s *localSides) victimRound(ctx context.Context, errs *tally) (Result, error) {
	if err := s.victim.waitEcho(ctx, time.Minute); err != nil {
		return Result{}, err
	}
	return Loop(ctx, LoopConfig{Concurrency: s.cfg.Concurrency, Duration: s.cfg.Duration, Warmup: s.cfg.settle(), progress: s.cfg.Progress},
		s.victim.echoOp(errs))
}

func (s *localSides) flood(ctx context.Context, round int, answers *tally) (func() error, error) {
	fctx, cancel := context.WithCancel(ctx)
	var bg sync.WaitGroup
	runFlood(fctx, &bg, s.flooder, s.cfg, round, answers)
	return func() error {
		cancel()
		bg.Wait()
		return nil
	}, nil
}

func (r TenantsResult) finish(victimErrs, floodAnswers *tally) TenantsResult {
	r.VictimErrors, r.FirstVictimError = victimErrs.snapshot()
	r.FloodAnswers, _ = floodAnswers.snapshot()
	r.Quiet.Concurrency, r.Flooded.Concurrency = r.Concurrency, r.Concurrency
	return r
}

// merge adds o's calls and latencies to r.
func (r *Result) merge(o Result) {
	r.Requests += o.Requests
	r.Errors += o.Errors
	if r.FirstError == nil {
		r.FirstError = o.FirstError
	}
	r.Elapsed += o.Elapsed
	if r.Elapsed > 0 {
		r.Throughput = float64(r.Requests) / r.Elapsed.Seconds()
	}
	if o.hist != nil {
		r.hist.merge(o.hist)
	}
	r.setLatencies()
}

// tally counts outcomes by class; safe for concurrent use.
type tally struct {
	mu    sync.Mutex
	n     map[string]int64
	first error
}

func (t *tally) add(class string, n int64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = make(map[string]int64)
	}
	t.n[class] += n
	if t.first == nil && err != nil {
		t.first = err
	}
}

// merge adds the counts of m, and first when no error was kept yet.
func (t *tally) merge(m map[string]int64, first error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = make(map[string]int64)
	}
	for class, n := range m {
		t.n[class] += n
	}
	if t.first == nil {
		t.first = first
	}
}

func (t *tally) snapshot() (map[string]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.n), t.first
}

// errorClass names a JSON-RPC error by its code and the limit or reason
// its data gives.
func errorClass(e *schema.Error) string {
	var d struct {
		Limit  string `json:"limit"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(e.Data, &d)
	class := strconv.Itoa(e.Code)
	for _, s := range []string{d.Limit, d.Reason} {
		if s != "" {
			class += " " + s
		}
	}
	return class
}

// transportClass names a failed request without its addresses.
func transportClass(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrStatus):
		return strings.TrimPrefix(err.Error(), ErrStatus.Error()+": ")
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return "connection error"
}

// rssPeak keeps the most resident memory seen.
type rssPeak struct {
	max uint64
	err error
}

func (p *rssPeak) sample(ctx context.Context, rss func() (uint64, error)) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := rss()
		if err != nil {
			p.err = err
			return
		}
		p.max = max(p.max, v)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// tenant is one caller: its key, and connections from its address.
type tenant struct {
	url, key string
	dialer   *net.Dialer
	client   *http.Client
	header   http.Header
}

func newTenant(rawURL, key, addr string, conns int) *tenant {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if addr != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(addr)}
	}
	h := requestHeader(nil)
	h.Set("X-Api-Key", key)
	return &tenant{url: rawURL, key: key, dialer: d, header: h, client: &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}}}
}

func (t *tenant) close() { t.client.CloseIdleConnections() }

// call posts body, with the extra header pairs, and decodes the answers:
// one, or a batch's.
func (t *tenant) call(ctx context.Context, body []byte, buf *bytes.Buffer, header ...string) ([]schema.Response, error) {
	h := t.header
	if len(header) > 0 {
		h = h.Clone()
		for i := 0; i+1 < len(header); i += 2 {
			h.Set(header[i], header[i+1])
		}
	}
	if err := post(ctx, t.client, t.url, h, body, buf); err != nil {
		return nil, err
	}
	b := bytes.TrimSpace(buf.Bytes())
	if len(b) > 0 && b[0] == '[' {
		var rs []schema.Response
		if err := json.Unmarshal(b, &rs); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotJSONRPC, err)
		}
		return rs, nil
	}
	var r schema.Response
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotJSONRPC, err)
	}
	return []schema.Response{r}, nil
}

// echoOp is the victim's call: one echo, whose result must be its params.
func (t *tenant) echoOp(errs *tally) Op {
	var seq atomic.Int64
	return func(ctx context.Context, _ int) error {
		n := seq.Add(1)
		params := "[" + strconv.FormatInt(n, 10) + "]"
		var buf bytes.Buffer
		rs, err := t.call(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":`+params+`}`), &buf)
		switch {
		case err != nil:
			errs.add(transportClass(err), 1, err)
			return err
		case rs[0].Error != nil:
			errs.add(errorClass(rs[0].Error), 1, rs[0].Error)
			return rs[0].Error
		case string(rs[0].Result) != params:
			err := fmt.Errorf("bench: echo %s answered %s", params, rs[0].Result)
			errs.add("wrong result", 1, err)
			return err
		}
		return nil
	}
}

// waitEcho calls echo until it is answered with its params, at most
// within; the calls before are not counted anywhere.
func (t *tenant) waitEcho(ctx context.Context, within time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	op := t.echoOp(new(tally))
	for {
		err := op(wctx, 0)
		if err == nil {
			return nil
		}
		if !ctxwait.Sleep(wctx, 50*time.Millisecond) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("bench: tenants: the victim's echo was not answered within %v: %w", within, err)
		}
	}
}

// runFlood starts every part of the flood on bg; each stops when ctx ends.
func runFlood(ctx context.Context, bg *sync.WaitGroup, t *tenant, cfg TenantsConfig, round int, out *tally) {
	var batch bytes.Buffer
	batch.WriteByte('[')
	for i := range cfg.BatchSize {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"jsonrpc":"2.0","id":%d,"method":"echo","params":[%d]}`, i, i)
	}
	batch.WriteByte(']')
	for range cfg.FloodConns {
		bg.Go(func() {
			floodLoop(ctx, "batch call", out, func(buf *bytes.Buffer) ([]schema.Response, error) { return t.call(ctx, batch.Bytes(), buf) })
		})
	}
	if !cfg.Hostile {
		return
	}
	job := []byte(`{"jsonrpc":"2.0","id":1,"method":"rpc.jobs.submit","params":{"method":"echo","params":["job"]}}`)
	bg.Go(func() {
		floodLoop(ctx, "job submit", out, func(buf *bytes.Buffer) ([]schema.Response, error) { return t.call(ctx, job, buf) })
	})
	var key atomic.Int64
	keyed := []byte(`{"jsonrpc":"2.0","id":1,"method":"echo","params":["keyed"]}`)
	bg.Go(func() {
		floodLoop(ctx, "keyed call", out, func(buf *bytes.Buffer) ([]schema.Response, error) {
			return t.call(ctx, keyed, buf, "Idempotency-Key", fmt.Sprintf("flood-%d-%d-%d", time.Now().UnixNano(), round, key.Add(1)))
		})
	})
	bg.Go(func() { t.unreadWebSocket(ctx, cfg.WSAnswerBytes, out) })
	for range cfg.SlowConns {
		bg.Go(func() { t.slowHeaders(ctx, out) })
	}
}

// floodLoop sends one request after another until ctx ends, and counts
// every answer by class.
func floodLoop(ctx context.Context, kind string, out *tally, send func(*bytes.Buffer) ([]schema.Response, error)) {
	var buf bytes.Buffer
	for ctx.Err() == nil {
		rs, err := send(&buf)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			out.add(kind+": "+transportClass(err), 1, nil)
			continue
		}
		classes := map[string]int64{}
		for _, r := range rs {
			if r.Error != nil {
				classes[errorClass(r.Error)]++
			} else {
				classes["ok"]++
			}
		}
		for c, n := range classes {
			out.add(kind+": "+c, n, nil)
		}
	}
}

// unreadWebSocket sends echo calls with answers of size bytes on a
// WebSocket connection and reads nothing, until the server closes it; then
// it dials again.
func (t *tenant) unreadWebSocket(ctx context.Context, size int, out *tally) {
	u, err := url.Parse(t.url)
	if err != nil {
		return
	}
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	pad := strings.Repeat("x", size)
	for ctx.Err() == nil {
		conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
			HTTPClient: t.client, HTTPHeader: http.Header{"X-Api-Key": {t.key}}})
		if err != nil {
			if ctx.Err() == nil {
				out.add("websocket: dial refused", 1, nil)
				ctxwait.Sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		out.add("websocket: connections", 1, nil)
		for i := 0; ; i++ {
			msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"echo","params":[%q]}`, i, pad)
			if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				if ctx.Err() == nil {
					out.add("websocket: closed by the server", 1, nil)
				}
				break
			}
			out.add("websocket: calls sent", 1, nil)
		}
		conn.CloseNow()
	}
}

// slowHeaders sends a request whose headers grow by a kilobyte every 50ms
// up to 100 KB, and counts what the server does with it; then it starts
// again on a new connection.
func (t *tenant) slowHeaders(ctx context.Context, out *tally) {
	chunk := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
	for ctx.Err() == nil {
		conn, err := t.dialer.DialContext(ctx, "tcp", hostOf(t.url))
		if err != nil {
			if ctx.Err() == nil {
				out.add("slow header: dial refused", 1, nil)
				ctxwait.Sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		class := slowHeaderRequest(ctx, conn, t.key, chunk)
		stop()
		conn.Close()
		if class == "stopped" {
			class = "held open until the round ended"
		}
		out.add("slow header: "+class, 1, nil)
	}
}

func slowHeaderRequest(ctx context.Context, conn net.Conn, key, chunk string) string {
	sent := func() string {
		// The server may have answered before it closed: read what it said.
		conn.SetReadDeadline(time.Now().Add(time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return "closed without an answer"
		}
		resp.Body.Close()
		return "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	if _, err := fmt.Fprintf(conn, "POST /rpc HTTP/1.1\r\nHost: bench\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\n", key); err != nil {
		return sent()
	}
	for range 100 {
		if _, err := io.WriteString(conn, chunk); err != nil {
			return sent()
		}
		if !ctxwait.Sleep(ctx, 50*time.Millisecond) {
			return "stopped"
		}
	}
	if _, err := io.WriteString(conn, "Content-Length: 2\r\n\r\n[]"); err != nil {
		return sent()
	}
	return sent()
}

func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Host
}

// Verdicts judges r against the goals: the victim's p99 under the flood
// against [GoalTenantsP99Ratio] times its p99 without it, its calls per
// second under the flood against [GoalTenantsRateShare] of its rate
// without it, and no failed call of the victim. A result measured Alone
// is judged on its failed calls only.
func (r TenantsResult) Verdicts() []Verdict {
	var n int64
	for _, c := range r.VictimErrors {
		n += c
	}
	errs := Verdict{Goal: "victim calls failed = 0", Got: strconv.FormatInt(n, 10), Pass: n == 0, Margin: "none refused"}
	if n > 0 {
		errs.Margin = fmt.Sprintf("first: %v", r.FirstVictimError)
	}
	if r.Alone {
		return []Verdict{errs}
	}
	lat := Verdict{Goal: fmt.Sprintf("victim p99 under the flood ≤ %.0f× without it", GoalTenantsP99Ratio)}
	switch {
	case r.Quiet.Requests == 0:
		lat.Margin = "not judged: no call succeeded without the flood"
	case r.Flooded.Requests == 0:
		lat.Got, lat.Margin = "no call succeeded under the flood", "missed"
	default:
		ratio := float64(r.Flooded.P99) / float64(r.Quiet.P99)
		lat.Got = fmt.Sprintf("%s vs %s (%.2f×)", formatDuration(r.Flooded.P99), formatDuration(r.Quiet.P99), ratio)
		lat.Pass = ratio <= GoalTenantsP99Ratio
		lat.Margin = fmt.Sprintf("%.2f× to spare", GoalTenantsP99Ratio-ratio)
		if !lat.Pass {
			lat.Margin = fmt.Sprintf("missed by %.2f×", ratio-GoalTenantsP99Ratio)
		}
	}
	rate := Verdict{Goal: fmt.Sprintf("victim calls/s under the flood ≥ %.0f%% of without it", 100*GoalTenantsRateShare)}
	if r.Quiet.Throughput == 0 {
		rate.Margin = "not judged: no call succeeded without the flood"
	} else {
		share := r.Flooded.Throughput / r.Quiet.Throughput
		rate.Got = fmt.Sprintf("%.0f vs %.0f (%.0f%%)", r.Flooded.Throughput, r.Quiet.Throughput, 100*share)
		rate.Pass = share >= GoalTenantsRateShare
		rate.Margin = fmt.Sprintf("%.0f points to spare", 100*(share-GoalTenantsRateShare))
		if !rate.Pass {
			rate.Margin = fmt.Sprintf("missed by %.0f points", 100*(GoalTenantsRateShare-share))
		}
	}
	return []Verdict{lat, rate, errs}
}

// ReportTenants writes a table of r's rounds to w, its verdicts, the
// victim's failures and the flood's answers by class, the served process's
// resident memory, and a histogram of the victim's latencies.
func ReportTenants(w io.Writer, r TenantsResult) error {
	fmt.Fprintf(w, "tenants: a victim calls echo from %d %s, one call in flight each; ", r.Concurrency, plural(r.Concurrency, "caller"))
	switch {
	case r.Alone:
		fmt.Fprintln(w, "nobody else calls")
	case r.Hostile:
		fmt.Fprintf(w, "a flooder sends %d-call echo batches on %d connections, job submits, calls with new idempotency keys, %d KiB answers on a WebSocket it never reads, and 100 KB headers slowly on %d connections\n",
			r.BatchSize, r.FloodConns, r.WSAnswerBytes>>10, r.SlowConns)
	default:
		fmt.Fprintf(w, "a flooder sends %d-call echo batches on %d connections, each the next as soon as the last is answered\n", r.BatchSize, r.FloodConns)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "round\tflood\tcalls/s\tp50\tp90\tp99\tmax\tcalls\tfailed\tserver RSS")
	row := func(name, flood string, v Result, rss uint64) {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", name, flood, v.Throughput,
			formatDuration(v.P50), formatDuration(v.P90), formatDuration(v.P99), formatDuration(v.Max), v.Requests, v.Errors, mib(rss))
	}
	for i, rd := range r.Rounds {
		row(strconv.Itoa(i+1), yesNo(rd.Flood), rd.Victim, rd.RSS)
	}
	row("all", "no", r.Quiet, 0)
	if !r.Alone {
		row("all", "yes", r.Flooded, 0)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeVerdicts(w, r.Verdicts()...); err != nil {
		return err
	}
	writeClasses(w, "victim failures", r.VictimErrors)
	if !r.Alone {
		writeClasses(w, "flood answers", r.FloodAnswers)
	}
	switch {
	case r.RSSError != nil:
		fmt.Fprintf(w, "server RSS: not read: %v\n", r.RSSError)
	case r.Alone:
		fmt.Fprintf(w, "server RSS: %s at most in the first round\n", mib(r.RSSQuiet))
	default:
		fmt.Fprintf(w, "server RSS: %s before the first flood, %s at most under it\n", mib(r.RSSQuiet), mib(r.RSSFlood))
	}
	if r.Alone {
		return writeChart(w, "victim echo latency", chartSeries{"alone", r.Quiet})
	}
	return writeChart(w, "victim echo latency", chartSeries{"quiet", r.Quiet}, chartSeries{"flood", r.Flooded})
}

// TenantsRun is one run of [Tenants] in the table of [ReportTenantsRuns]:
// the deployment it measured and whether the ingress shared itself fairly.
type TenantsRun struct {
	Deployment string
	Fair       bool
	Result     TenantsResult
}

// ReportTenantsRuns writes the figures the goals judge of every run side
// by side, one row each, with each run's verdicts.
func ReportTenantsRuns(w io.Writer, runs []TenantsRun) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "deployment\tfair\tcalls/s quiet\tcalls/s flood\tkept\tp99 quiet\tp99 flood\tratio\tfailed\tverdicts")
	for _, run := range runs {
		r := run.Result
		kept, ratio := "-", "-"
		if r.Quiet.Throughput > 0 {
			kept = fmt.Sprintf("%.0f%%", 100*r.Flooded.Throughput/r.Quiet.Throughput)
		}
		if r.Quiet.P99 > 0 && r.Flooded.Requests > 0 {
			ratio = fmt.Sprintf("%.1f×", float64(r.Flooded.P99)/float64(r.Quiet.P99))
		}
		var failed int64
		for _, n := range r.VictimErrors {
			failed += n
		}
		vs := r.Verdicts()
		// The verdicts come in this order; a result measured alone has
		// the last only.
		names := []string{"p99", "rate", "failed"}[3-len(vs):]
		var verdicts []string
		for i, v := range vs {
			verdicts = append(verdicts, names[i]+" "+v.Word())
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%d\t%s\n", run.Deployment, onOff(run.Fair),
			r.Quiet.Throughput, r.Flooded.Throughput, kept, formatDuration(r.Quiet.P99), formatDuration(r.Flooded.P99),
			ratio, failed, strings.Join(verdicts, ", "))
	}
	return tw.Flush()
}

// TenantsAlone is the victim calling alone against two servers of one
// deployment, one with the ingress's fairness on and one with it off, in
// runs that alternate between them so that other work on the machine
// falls on both alike. Its zero value is ready to [TenantsAlone.Add] to.
type TenantsAlone struct {
	Deployment string
	// On and Off merge the victim's calls with fairness on and off.
	On, Off Result
	// OnCPU and OffCPU are the CPU time the servers' processes used in
	// those runs, their settling quarter included ([TenantsAlone.AddCPU]);
	// CPUError says why they are missing (no /proc).
	OnCPU, OffCPU time.Duration
	CPUError      error
}

// AddCPU adds the CPU time d the servers used in a run with fairness on
// or off.
func (a *TenantsAlone) AddCPU(on bool, d time.Duration) {
	if on {
		a.OnCPU += d
	} else {
		a.OffCPU += d
	}
}

// cpuPerCall is the servers' CPU time per call the victim counted, or 0
// when either is missing. The CPU time includes each run's settling
// quarter, whose calls are not counted, so it is a quarter or so above the
// true cost; fairness on and off are measured alike, and their ratio is
// the figure to read.
func cpuPerCall(cpu time.Duration, r Result) time.Duration {
	if cpu <= 0 || r.Requests <= 0 {
		return 0
	}
	return cpu / time.Duration(r.Requests)
}

// Add merges the victim's calls of r, measured with fairness on or off.
func (a *TenantsAlone) Add(on bool, r TenantsResult) {
	side := &a.Off
	if on {
		side = &a.On
	}
	if side.hist == nil {
		side.hist = new(histogram)
	}
	side.merge(r.Quiet)
	side.Concurrency = r.Concurrency
}

// ReportTenantsAlone writes the victim's figures alone with fairness on
// and off, and their ratios, for each deployment.
func ReportTenantsAlone(w io.Writer, alone []TenantsAlone) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "deployment\tfair\tcalls/s\tp50\tp90\tp99\tcalls\tfailed\tserver CPU/call")
	for _, a := range alone {
		for _, s := range []struct {
			name string
			r    Result
			cpu  time.Duration
		}{{"on", a.On, a.OnCPU}, {"off", a.Off, a.OffCPU}} {
			perCall := "-"
			if c := cpuPerCall(s.cpu, s.r); c > 0 {
				perCall = formatDuration(c)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%d\t%d\t%s\n", a.Deployment, s.name, s.r.Throughput,
				formatDuration(s.r.P50), formatDuration(s.r.P90), formatDuration(s.r.P99), s.r.Requests, s.r.Errors, perCall)
		}
		ratio := func(on, off float64) string {
			if off == 0 {
				return "-"
			}
			return fmt.Sprintf("%.3f×", on/off)
		}
		fmt.Fprintf(tw, "%s\ton/off\t%s\t%s\t%s\t%s\t\t\t%s\n", a.Deployment, ratio(a.On.Throughput, a.Off.Throughput),
			ratio(float64(a.On.P50), float64(a.Off.P50)), ratio(float64(a.On.P90), float64(a.Off.P90)), ratio(float64(a.On.P99), float64(a.Off.P99)),
			ratio(float64(cpuPerCall(a.OnCPU, a.On)), float64(cpuPerCall(a.OffCPU, a.Off))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range alone {
		if a.CPUError != nil {
			fmt.Fprintf(w, "%s: server CPU/call not measured: %v\n", a.Deployment, a.CPUError)
		}
	}
	fmt.Fprintln(w, "server CPU/call: the servers' user and system time over each run, its settling quarter included, per call counted; compare on with off")
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func writeClasses(w io.Writer, title string, m map[string]int64) {
	if len(m) == 0 {
		fmt.Fprintf(w, "%s: none\n", title)
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(w, "  %-60s %d\n", k, m[k])
	}
}

func mib(b uint64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}
