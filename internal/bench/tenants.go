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

// GoalTenantsP99Ratio is the most the victim's p99 under the flood may be,
// as a multiple of its p99 without it.
const GoalTenantsP99Ratio = 2.0

// TenantsConfig configures [Tenants]. The ingress behind URL must
// authenticate API keys (X-Api-Key): VictimKey may call echo, FloodKey
// echo and the rpc.jobs methods.
type TenantsConfig struct {
	URL                 string
	VictimKey, FloodKey string
	// VictimAddr and FloodAddr are the local IP addresses the two callers
	// connect from (default: any), so that a bound on connections per
	// client address counts them apart.
	VictimAddr, FloodAddr string
	// Concurrency is the victim's number of callers, each with one echo
	// call in flight (default 4).
	Concurrency int
	// Duration is the length of each round (default 3s).
	Duration time.Duration
	// Rounds is the number of quiet-then-flood pairs (default 2).
	Rounds int
	// FloodConns is the number of connections sending the flood's batches,
	// each waiting for one batch's answer before it sends the next
	// (default 4).
	FloodConns int
	// BatchSize is the number of echo calls in a flood batch (default
	// 1000).
	BatchSize int
	// WSAnswerBytes is the size of the echo answers the flood's WebSocket
	// asks for and never reads (default 256 KiB).
	WSAnswerBytes int
	// SlowConns is the number of connections that send a 100 KB header
	// slowly (default 100).
	SlowConns int
	// RSS, when not nil, reports the resident memory of the process
	// serving URL; it is sampled during every round.
	RSS func() (uint64, error)
	// Progress, when not nil, counts the victim's calls. Optional.
	Progress *Progress
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
// alternate without the flood and with it. The flood sends, all at once,
// batches of BatchSize echo calls on FloodConns connections, job submits,
// echo calls under a new Idempotency-Key each, echo calls with large
// answers on a WebSocket it never reads (dialled again when the server
// closes it), and SlowConns connections that send 100 KB of headers a
// kilobyte at a time. The flood ignores retry_after_ms, as a hostile
// caller would. Tenants returns an error when the victim or the flood
// could not run at all; the victim's failed calls are counted, not
// returned.
func Tenants(ctx context.Context, cfg TenantsConfig) (TenantsResult, error) {
	if err := checkURL(cfg.URL); err != nil {
		return TenantsResult{}, fmt.Errorf("bench: tenants: %w", err)
	}
	if cfg.VictimKey == "" || cfg.FloodKey == "" || cfg.VictimKey == cfg.FloodKey {
		return TenantsResult{}, errors.New("bench: tenants: the victim and the flood need API keys of their own")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
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
		cfg.BatchSize = 1000
	}
	if cfg.WSAnswerBytes <= 0 {
		cfg.WSAnswerBytes = 256 << 10
	}
	if cfg.SlowConns <= 0 {
		cfg.SlowConns = 100
	}
	res := TenantsResult{Concurrency: cfg.Concurrency, FloodConns: cfg.FloodConns, BatchSize: cfg.BatchSize,
		SlowConns: cfg.SlowConns, WSAnswerBytes: cfg.WSAnswerBytes, Duration: cfg.Duration,
		Quiet: Result{hist: new(histogram)}, Flooded: Result{hist: new(histogram)}}
	victim := newTenant(cfg.URL, cfg.VictimKey, cfg.VictimAddr, cfg.Concurrency)
	defer victim.close()
	flood := newTenant(cfg.URL, cfg.FloodKey, cfg.FloodAddr, cfg.FloodConns+4)
	defer flood.close()
	var victimErrs, floodAnswers tally

	settle := cfg.Duration / 4
	cfg.Progress.planTime(time.Duration(2*cfg.Rounds)*(cfg.Duration+settle), "req")
	for i := range 2 * cfg.Rounds {
		flooded := i%2 == 1
		rctx, endRound := context.WithCancel(ctx)
		var rss rssPeak
		var bg sync.WaitGroup
		if cfg.RSS != nil {
			bg.Go(func() { rss.sample(rctx, cfg.RSS) })
		}
		if flooded {
			runFlood(rctx, &bg, flood, cfg, i, &floodAnswers)
		}
		r, err := Loop(ctx, LoopConfig{Concurrency: cfg.Concurrency, Duration: cfg.Duration, Warmup: settle, progress: cfg.Progress},
			victim.echoOp(&victimErrs))
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

// Verdicts judges r: the victim's p99 under the flood against
// [GoalTenantsP99Ratio] times its p99 without it, and no failed call of
// the victim.
func (r TenantsResult) Verdicts() []Verdict {
	lat := Verdict{Goal: fmt.Sprintf("victim p99 under the flood ≤ %.0f× without it", GoalTenantsP99Ratio)}
	if r.Quiet.Requests == 0 || r.Flooded.Requests == 0 {
		lat.Margin = "not judged: a round had no successful call"
	} else {
		ratio := float64(r.Flooded.P99) / float64(r.Quiet.P99)
		lat.Got = fmt.Sprintf("%s vs %s (%.2f×)", formatDuration(r.Flooded.P99), formatDuration(r.Quiet.P99), ratio)
		lat.Pass = ratio <= GoalTenantsP99Ratio
		lat.Margin = fmt.Sprintf("%.2f× to spare", GoalTenantsP99Ratio-ratio)
		if !lat.Pass {
			lat.Margin = fmt.Sprintf("missed by %.2f×", ratio-GoalTenantsP99Ratio)
		}
	}
	var n int64
	for _, c := range r.VictimErrors {
		n += c
	}
	errs := Verdict{Goal: "victim calls failed = 0", Got: strconv.FormatInt(n, 10), Pass: n == 0, Margin: "none refused"}
	if n > 0 {
		errs.Margin = fmt.Sprintf("first: %v", r.FirstVictimError)
	}
	return []Verdict{lat, errs}
}

// ReportTenants writes a table of r's rounds to w, its verdicts, the
// victim's failures and the flood's answers by class, the served process's
// resident memory, and a histogram of the victim's latencies.
func ReportTenants(w io.Writer, r TenantsResult) error {
	fmt.Fprintf(w, "tenants: a victim calls echo from %d callers; a flooder sends %d-call echo batches on %d connections, job submits, calls with new idempotency keys, %d KiB answers on a WebSocket it never reads, and 100 KB headers slowly on %d connections\n",
		r.Concurrency, r.BatchSize, r.FloodConns, r.WSAnswerBytes>>10, r.SlowConns)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "round\tflood\tcalls/s\tp50\tp90\tp99\tmax\tcalls\tfailed\tserver RSS")
	row := func(name, flood string, v Result, rss uint64) {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", name, flood, v.Throughput,
			formatDuration(v.P50), formatDuration(v.P90), formatDuration(v.P99), formatDuration(v.Max), v.Requests, v.Errors, mib(rss))
	}
	for i, rd := range r.Rounds {
		flood := "no"
		if rd.Flood {
			flood = "yes"
		}
		row(strconv.Itoa(i+1), flood, rd.Victim, rd.RSS)
	}
	row("all", "no", r.Quiet, 0)
	row("all", "yes", r.Flooded, 0)
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := writeVerdicts(w, r.Verdicts()...); err != nil {
		return err
	}
	writeClasses(w, "victim failures", r.VictimErrors)
	writeClasses(w, "flood answers", r.FloodAnswers)
	if r.RSSError != nil {
		fmt.Fprintf(w, "server RSS: not read: %v\n", r.RSSError)
	} else {
		fmt.Fprintf(w, "server RSS: %s before the first flood, %s at most under it\n", mib(r.RSSQuiet), mib(r.RSSFlood))
	}
	return writeChart(w, "victim echo latency", chartSeries{"quiet", r.Quiet}, chartSeries{"flood", r.Flooded})
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
