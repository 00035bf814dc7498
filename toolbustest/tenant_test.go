package toolbustest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/fair"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// The budgets of the hostile-tenant cluster: small, so that the flood
// reaches each of them within seconds.
const (
	tenantMaxInFlight  = 200 // a caller's share: 100
	tenantMaxBody      = 256 << 10
	tenantMaxBytes     = 16 << 20 // a caller's share: 8 MiB
	tenantWSUnsent     = 1 << 20
	tenantWSConns      = 2
	tenantMaxHeader    = 8 << 10
	tenantConnsPerAddr = 32
	tenantFloodAddrs   = 2 // the flood's client addresses
	tenantIdemRecords  = 100
	tenantQueuedJobs   = 150
	tenantRunSlots     = 2
	tenantJobMillis    = 300
)

// tenantFloodAnswer is the size of the large answers the flood asks for.
const tenantFloodAnswer = 64 << 10

// tenantBudget is what the ingress may hold because of the flood, by the
// configured bounds: the answers waiting to be written, the unread answers
// of the flood's WebSocket connections, the headers and bodies of its
// connections being read, and a few KiB per call in flight. As the test
// runs the workers and NATS in the same process, whose heap is all it can
// measure, it adds their copies of the flood's calls in flight (its share
// of max_in_flight, each answer encoded by the worker, carried by the
// server and decoded for the ingress), which an ingress process alone
// would not hold.
func tenantBudget() int64 {
	conns := int64(tenantConnsPerAddr * tenantFloodAddrs)
	ingress := tenantMaxBytes +
		tenantWSConns*tenantWSUnsent +
		conns*(tenantMaxHeader+4<<10) +
		conns*tenantMaxBody +
		tenantMaxInFlight*4<<10
	inProcess := int64(tenantMaxInFlight/2) * tenantFloodAnswer * 4
	return ingress + inProcess
}

func tenantTools(rt *worker.Runtime) error {
	if err := rt.HandleFunc("echo", func(_ context.Context, req *worker.Request) (any, error) {
		return req.Params, nil
	}); err != nil {
		return err
	}
	type wait struct {
		MS int `json:"ms"`
	}
	hold := func(ctx context.Context, req *worker.Request) (any, error) {
		var p wait
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, err
		}
		t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
			return "held", nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := rt.HandleFunc("hold", hold); err != nil {
		return err
	}
	if err := rt.HandleFunc("work", hold); err != nil {
		return err
	}
	return rt.HandleFunc("big", func(_ context.Context, req *worker.Request) (any, error) {
		var p struct {
			Bytes int `json:"bytes"`
		}
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, err
		}
		return strings.Repeat("x", p.Bytes), nil
	})
}

// tenantClient is a caller's HTTP client from one loopback address.
type tenantClient struct {
	url, key string
	hc       *http.Client
	dialer   *net.Dialer
}

func newTenantClient(t *testing.T, url, key, ip string) *tenantClient {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 8, Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &tenantClient{url: url, key: key, hc: &http.Client{Transport: tr, Timeout: time.Minute}, dialer: d}
}

// post sends body and returns the answers, or an error when the request
// failed or the answer is not JSON-RPC.
func (c *tenantClient) post(ctx context.Context, body string, header ...string) ([]schema.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", c.key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var rs []schema.Response
		return rs, json.Unmarshal(b, &rs)
	}
	var r schema.Response
	return []schema.Response{r}, json.Unmarshal(b, &r)
}

// call sends one call and returns its answer.
func (c *tenantClient) call(ctx context.Context, method, params string, header ...string) (schema.Response, error) {
	rs, err := c.post(ctx, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, method, params), header...)
	if err != nil {
		return schema.Response{}, err
	}
	return rs[0], nil
}

// limitOf returns the limit an error names.
func limitOf(e *schema.Error) string {
	if e == nil {
		return ""
	}
	var d struct {
		Limit string `json:"limit"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Limit
}

// refusals reads toolbus_limit_refusals_total{limit} from reg.
func refusals(t *testing.T, reg *prometheus.Registry, limit string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "toolbus_limit_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// backOff waits as long as the first refusal among rs asks, when every
// call of rs was refused: the flood obeys retry_after_ms only so as not to
// take the CPU the two callers share in this one process (a flood of
// refused calls that only burns CPU is --rate-limit's business).
func backOff(ctx context.Context, rs []schema.Response) {
	var wait int64
	for _, r := range rs {
		if r.Error == nil {
			return
		}
		var d struct {
			RetryAfter int64 `json:"retry_after_ms"`
		}
		if json.Unmarshal(r.Error.Data, &d) == nil && wait == 0 {
			wait = d.RetryAfter
		}
	}
	if wait <= 0 {
		return
	}
	t := time.NewTimer(time.Duration(wait) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// event is closed once, the first time its flood reaches its limit.
type event struct {
	name string
	once sync.Once
	ch   chan struct{}
}

func newEvent(name string) *event { return &event{name: name, ch: make(chan struct{})} }
func (e *event) fire()            { e.once.Do(func() { close(e.ch) }) }

// liveHeap returns the bytes live on the heap after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// quietRound is what the second caller does: echo calls, one after the
// other, and calls with idempotency keys of its own. Every one must
// succeed; it returns the echo calls' latencies.
func quietRound(t *testing.T, ctx context.Context, quiet *tenantClient, round string, n int) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, 0, n)
	for i := range n {
		start := time.Now()
		r, err := quiet.call(ctx, "echo", `[`+strconv.Itoa(i)+`]`)
		lat = append(lat, time.Since(start))
		if err != nil || r.Error != nil || string(r.Result) != `[`+strconv.Itoa(i)+`]` {
			t.Errorf("%s: quiet echo %d = %+v, %v; want its result (limit %q)", round, i, r, err, limitOf(r.Error))
		}
		if i%10 == 0 {
			key := strings.ReplaceAll(round, " ", "-") + "-" + strconv.Itoa(i)
			r, err := quiet.call(ctx, "echo", `["keyed"]`, schema.HeaderIdempotencyKey, key)
			if err != nil || r.Error != nil {
				t.Errorf("%s: quiet echo with Idempotency-Key %s = %+v, %v; want its result (limit %q)", round, key, r, err, limitOf(r.Error))
			}
		}
	}
	return lat
}

func p99(lat []time.Duration) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)*99)/100-1]
}

// TestHostileTenant: one caller floods every way it can (batches that fill
// its share of the calls in flight, jobs up to its queue bound, calls with
// new idempotency keys up to its records, WebSocket connections whose
// answers it never reads, connections that send part of their headers and
// stop) while a second caller's calls keep running: every one of them
// succeeds, its job starts before the flood's backlog drains, and the live
// heap grows by no more than the configured budgets and half as much
// again. The second caller's p99 with and without the flood is printed.
func TestHostileTenant(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := toolbustest.Start(t,
		toolbustest.WithTools(tenantTools),
		toolbustest.WithJobs(),
		toolbustest.WithIdempotency(time.Hour),
		toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.Jobs.CallerMaxQueued, c.Jobs.Concurrency = tenantQueuedJobs, tenantRunSlots
			c.MaxInFlight = tenantMaxInFlight
			// A caller's queue stays as long as the fair scheduler's own
			// default, not --max-in-flight's.
			c.CallerMaxQueued = fair.DefaultFlowMaxQueued
			c.Idempotency.CallerMaxRecords, c.Idempotency.CallerMaxBytes = tenantIdemRecords, 64<<20
			c.Limits = ingress.Limits{MaxBodyBytes: tenantMaxBody}
			c.MaxBytesInFlight = tenantMaxBytes
			c.WSMaxUnsentBytes = tenantWSUnsent
			c.WSWriteTimeout = 2 * time.Second
			c.MaxHeaderBytes = tenantMaxHeader
			c.MaxConnsPerAddr = tenantConnsPerAddr
		}),
		toolbustest.WithAuth(auth.Config{Keys: []auth.APIKey{
			{Name: "flood", SHA256: auth.HashAPIKey("flood-key"), Allow: []string{"echo", "hold", "big", "work", "rpc.jobs.*"}},
			{Name: "quiet", SHA256: auth.HashAPIKey("quiet-key"), Allow: []string{"echo", "work", "rpc.jobs.*"}},
		}}),
		toolbustest.WithMetrics(reg))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := newTenantClient(t, c.URL, "quiet-key", "127.0.0.1")
	flood := newTenantClient(t, c.URL, "flood-key", "127.0.0.2")
	host := strings.TrimPrefix(c.BaseURL, "http://")

	quietRound(t, ctx, quiet, "warm-up", 20)
	base := quietRound(t, ctx, quiet, "without flood", 100)
	baseHeap := liveHeap()

	fctx, stopFlood := context.WithCancel(ctx)
	var floods sync.WaitGroup
	defer floods.Wait()
	defer stopFlood()
	events := map[string]*event{}
	for _, name := range []string{"caller_max_in_flight", "caller_max_bytes_in_flight", "caller_max_queued_jobs",
		"idempotency_caller_max_records", "ws_closed", "max_conns_per_addr", "max_header_bytes"} {
		events[name] = newEvent(name)
	}
	spawn := func(f func()) {
		floods.Add(1)
		go func() { defer floods.Done(); f() }()
	}

	// The live heap, sampled while the flood lasts.
	var peak atomic.Uint64
	spawn(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-tick.C:
			}
			if h := liveHeap(); h > peak.Load() {
				peak.Store(h)
			}
		}
	})

	// WebSocket connections that ask for answers without end and read
	// none, until the server closes them. They go first, while the flood's
	// share of the calls in flight is free, so that their answers come.
	for range tenantWSConns {
		ws, _, err := websocket.Dial(fctx, "ws://"+host+"/rpc", &websocket.DialOptions{
			HTTPClient: flood.hc, HTTPHeader: http.Header{"X-Api-Key": {"flood-key"}}})
		if err != nil {
			t.Fatalf("the flood's WebSocket: %v", err)
		}
		defer ws.CloseNow()
		spawn(func() {
			for i := 0; fctx.Err() == nil; i++ {
				msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"big","params":{"bytes":%d}}`, i, tenantFloodAnswer)
				if ws.Write(fctx, websocket.MessageText, []byte(msg)) != nil {
					return // the server closed it
				}
			}
		})
	}
	toolbustest.Eventually(t, func() bool {
		return refusals(t, reg, "ws_max_unsent_bytes")+refusals(t, reg, "ws_write_timeout") > 0
	}, "the flood's WebSocket connections are closed")
	events["ws_closed"].fire()

	// Batches of 1000 calls that hold their slot 200ms each.
	var batch strings.Builder
	batch.WriteByte('[')
	for i := range 1000 {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"jsonrpc":"2.0","id":%d,"method":"hold","params":{"ms":200}}`, i)
	}
	batch.WriteByte(']')
	spawn(func() {
		for fctx.Err() == nil {
			rs, err := flood.post(fctx, batch.String())
			if err != nil {
				continue
			}
			for _, r := range rs {
				if limitOf(r.Error) == "caller_max_in_flight" {
					events["caller_max_in_flight"].fire()
				}
			}
			backOff(fctx, rs)
		}
	})

	// Jobs until the caller's queue is full, then again as it drains.
	spawn(func() {
		for fctx.Err() == nil {
			r, err := flood.call(fctx, schema.MethodJobsSubmit, fmt.Sprintf(`{"method":"work","params":{"ms":%d}}`, tenantJobMillis))
			if err == nil && limitOf(r.Error) == "caller_max_queued_jobs" {
				events["caller_max_queued_jobs"].fire()
				select {
				case <-fctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	})

	// A new idempotency key every call.
	spawn(func() {
		for i := 0; fctx.Err() == nil; i++ {
			r, err := flood.call(fctx, "echo", `["flood"]`, schema.HeaderIdempotencyKey, "flood-"+strconv.Itoa(i))
			if err == nil && limitOf(r.Error) == "idempotency_caller_max_records" {
				events["idempotency_caller_max_records"].fire()
				select {
				case <-fctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	})

	// Connections from another address that send part of a request's
	// headers and stop; one sends more headers than allowed.
	slow := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	partial := "POST /rpc HTTP/1.1\r\nHost: x\r\nX-Api-Key: flood-key\r\nX-Pad: " + strings.Repeat("a", tenantMaxHeader/2)
	var held []net.Conn
	defer func() {
		for _, conn := range held {
			conn.Close()
		}
	}()
	for range tenantConnsPerAddr + 8 {
		conn, err := slow.DialContext(fctx, "tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
		if _, err := io.WriteString(conn, partial); err != nil {
			continue // refused over max_conns_per_addr and closed
		}
	}
	spawn(func() {
		conn, err := flood.dialer.DialContext(fctx, "tcp", host)
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, partial+strings.Repeat("a", 2*tenantMaxHeader)+"\r\n\r\n")
		if b, _ := io.ReadAll(io.LimitReader(conn, 64)); bytes.Contains(b, []byte(" 431 ")) {
			events["max_header_bytes"].fire()
		}
	})
	toolbustest.Eventually(t, func() bool { return refusals(t, reg, "max_conns_per_addr") > 0 }, "a connection is refused for max_conns_per_addr")
	events["max_conns_per_addr"].fire()

	for name, e := range events {
		if name == "caller_max_bytes_in_flight" {
			continue
		}
		select {
		case <-e.ch:
		case <-ctx.Done():
			t.Fatalf("the flood never reached %s", e.name)
		}
	}

	// Last, as it closes the flood's other ways: requests for 6 MiB of
	// answers whose responses are never read, which hold the flood's
	// share of the bytes the ingress keeps for writing. Their calls take
	// what slots the batches leave, so more are sent until the share is
	// held.
	var bigBatch strings.Builder
	bigBatch.WriteByte('[')
	for i := range 96 {
		if i > 0 {
			bigBatch.WriteByte(',')
		}
		fmt.Fprintf(&bigBatch, `{"jsonrpc":"2.0","id":%d,"method":"big","params":{"bytes":%d}}`, i, tenantFloodAnswer)
	}
	bigBatch.WriteByte(']')
	full := func() bool {
		r, err := flood.call(ctx, "echo", `[1]`)
		return err == nil && limitOf(r.Error) == "caller_max_bytes_in_flight"
	}
	for attempt := 0; !full(); attempt++ {
		if attempt == tenantConnsPerAddr/2 {
			t.Fatal("the flood never held its share of the bytes in flight")
		}
		conn, err := flood.dialer.DialContext(fctx, "tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
		fmt.Fprintf(conn, "POST /rpc HTTP/1.1\r\nHost: x\r\nX-Api-Key: flood-key\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			bigBatch.Len(), bigBatch.String())
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) && !full() {
			time.Sleep(20 * time.Millisecond)
		}
	}
	events["caller_max_bytes_in_flight"].fire()

	// The second caller, while every flood goes on.
	during := quietRound(t, ctx, quiet, "during the flood", 100)
	r, err := quiet.call(ctx, schema.MethodJobsSubmit, fmt.Sprintf(`{"method":"work","params":{"ms":%d}}`, tenantJobMillis))
	if err != nil || r.Error != nil {
		t.Fatalf("the quiet caller's job submit = %+v, %v; want it queued", r, err)
	}
	var job schema.JobSubmitResult
	if err := json.Unmarshal(r.Result, &job); err != nil {
		t.Fatal(err)
	}
	submitted := time.Now()
	toolbustest.Eventually(t, func() bool {
		g, err := quiet.call(ctx, schema.MethodJobsGet, fmt.Sprintf(`{"id":%q}`, job.ID))
		if err != nil || g.Error != nil {
			t.Fatalf("the quiet caller's job = %+v, %v", g, err)
		}
		var rec schema.JobRecord
		if err := json.Unmarshal(g.Result, &rec); err != nil {
			t.Fatal(err)
		}
		return rec.State != schema.JobQueued
	}, "the quiet caller's job starts")
	started := time.Since(submitted)
	// Asked of the service itself: the flood's own budgets may refuse it
	// at the ingress.
	l, lerr := c.Jobs.ServeRPC(ctx, schema.Call{Request: schema.Request{ID: json.RawMessage(`1`), Method: schema.MethodJobsList,
		Params: json.RawMessage(`{"state":"queued","limit":200}`)}, Caller: "flood"})
	if lerr != nil {
		t.Fatalf("list the flood's queued jobs: %v", lerr)
	}
	var list struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(l, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) == 0 {
		t.Errorf("the flood's backlog drained before the quiet caller's job started")
	}

	growth := int64(peak.Load()) - int64(baseHeap)
	budget := tenantBudget()
	bound := budget + budget/2
	t.Logf("bench: quiet caller p99 %v without the flood, %v during it (%.1fx); its job started %v after submit with %d of the flood's jobs still queued",
		p99(base), p99(during), float64(p99(during))/float64(p99(base)), started.Round(time.Millisecond), len(list.Jobs))
	t.Logf("bench: live heap %d MiB before the flood, peak %d MiB during it: grew %d MiB, bound %d MiB (budgets %d MiB and half again)",
		baseHeap>>20, peak.Load()>>20, growth>>20, bound>>20, budget>>20)
	for _, name := range []string{"caller_max_in_flight", "caller_max_bytes_in_flight", "caller_max_queued_jobs", "idempotency_caller_max_records",
		"ws_max_unsent_bytes", "ws_write_timeout", "max_conns_per_addr", "max_header_bytes"} {
		t.Logf("bench: refusals of %s: %v", name, refusals(t, reg, name))
	}
	if growth > bound {
		t.Errorf("the live heap grew %d MiB under the flood, over the bound of %d MiB", growth>>20, bound>>20)
	}
}
