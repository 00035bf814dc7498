package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/internal/testwait"
	"github.com/toolbus/toolbus/schema"
)

// gate is a dispatcher whose every call waits until the test opens it,
// so that the test decides when a seat of the window frees. It hands
// each call to the test as it arrives, in order.
type gate struct {
	arrivals chan arrival
	timeout  time.Duration // what Timeout tells; zero: an hour
}

// arrival is a call that reached the gate, and what lets it answer.
type arrival struct {
	call schema.Call
	open chan struct{}
}

func newGate() *gate { return &gate{arrivals: make(chan arrival, 4096)} }

func (g *gate) Dispatch(ctx context.Context, calls []schema.Call, emit func(i int, r schema.Response)) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range calls {
		a := arrival{call: c, open: make(chan struct{})}
		g.arrivals <- a
		if c.IsNotification() {
			continue
		}
		wg.Go(func() {
			r := schema.Response{ID: c.ID, Result: json.RawMessage(`"done"`)}
			select {
			case <-a.open:
			case <-ctx.Done():
				r = schema.Response{ID: c.ID, Error: schema.ErrorFrom(ctx.Err())}
			}
			mu.Lock()
			defer mu.Unlock()
			emit(i, r)
		})
	}
	wg.Wait()
}

// Timeout is the deadline policy of the gate's server ([WithDeadline]):
// the deadline requested when shorter than g.timeout (an hour when zero),
// as the aggregator's is.
func (g *gate) Timeout(_ string, requested time.Duration) time.Duration {
	d := g.timeout
	if d == 0 {
		d = time.Hour
	}
	if requested > 0 && requested < d {
		d = requested
	}
	return d
}

// next returns the next call to arrive, failing the test after a generous
// bound.
func (g *gate) next(t *testing.T) arrival {
	t.Helper()
	select {
	case a := <-g.arrivals:
		return a
	case <-time.After(testwait.Limit):
		t.Fatalf("no call reached the dispatcher within %v", testwait.Limit)
		return arrival{}
	}
}

// fairKeys are the callers of the fairness tests: "flood" and "victim"
// of weight 1, "heavy" of weight 3 and the exempt "health".
var fairKeys = auth.Config{Keys: []auth.APIKey{
	{Name: "flood", SHA256: auth.HashAPIKey("flood-key"), Allow: []string{"*"}},
	{Name: "victim", SHA256: auth.HashAPIKey("victim-key"), Allow: []string{"*"}},
	{Name: "heavy", SHA256: auth.HashAPIKey("heavy-key"), Allow: []string{"*"}, Weight: 3},
	{Name: "health", SHA256: auth.HashAPIKey("health-key"), Allow: []string{"*"}, Exempt: true},
}}

// newFairServer returns a server with fairness f over g, authenticating
// [fairKeys] under g's deadline policy, and its chain, in which the
// fairness layer is.
func newFairServer(t *testing.T, g *gate, f Fairness, opts ...Option) (*Server, schema.Dispatcher) {
	t.Helper()
	s, err := New(g, append([]Option{WithLogger(discard), WithAuth(fairKeys), WithFairness(f), WithDeadline(g.Timeout)}, opts...)...)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	return s, s.dispatcher
}

// calls returns n calls of method for caller, ids 1 to n, with timeout.
func fairCalls(caller string, n int, timeout time.Duration) []schema.Call {
	cs := make([]schema.Call, n)
	for i := range cs {
		cs[i] = schema.Call{Request: schema.Request{ID: json.RawMessage(fmt.Sprint(i + 1)), Method: "work", Params: json.RawMessage(`[1]`)},
			Caller: caller, Timeout: timeout}
	}
	return cs
}

// callerCtx is a context that carries principal p, as the ingress gives
// its chain.
func callerCtx(ctx context.Context, name string) context.Context {
	for _, k := range fairKeys.Keys {
		if k.Name == name {
			return context.WithValue(ctx, callerKey{}, &auth.Principal{Name: name, Weight: k.Weight, Exempt: k.Exempt})
		}
	}
	return ctx
}

// answers collects a dispatch's answers by index.
type answers struct {
	mu sync.Mutex
	by map[int]schema.Response
	ch chan int
}

func newAnswers() *answers { return &answers{by: map[int]schema.Response{}, ch: make(chan int, 4096)} }

func (a *answers) emit(i int, r schema.Response) {
	a.mu.Lock()
	a.by[i] = r
	a.mu.Unlock()
	a.ch <- i
}

// wait returns the next answer's index and answer, failing after a
// generous bound.
func (a *answers) wait(t *testing.T) (int, schema.Response) {
	t.Helper()
	select {
	case i := <-a.ch:
		a.mu.Lock()
		defer a.mu.Unlock()
		return i, a.by[i]
	case <-time.After(testwait.Limit):
		t.Fatalf("no answer within %v", testwait.Limit)
		return 0, schema.Response{}
	}
}

// dispatch runs calls on d for caller in the background; the test ends
// only once it has returned.
func dispatch(t *testing.T, ctx context.Context, d schema.Dispatcher, caller string, calls []schema.Call) *answers {
	t.Helper()
	a := newAnswers()
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Dispatch(callerCtx(ctx, caller), calls, a.emit)
	}()
	t.Cleanup(func() { <-done })
	return a
}

// queued waits until caller has n entries queued.
func queued(t *testing.T, s *Server, caller string, n int) {
	t.Helper()
	testwait.Eventually(t, func() bool {
		for _, f := range s.FairStats().Flows {
			if f.Name == caller {
				return f.Queued == n
			}
		}
		return n == 0
	}, fmt.Sprintf("%s has %d calls queued", caller, n))
}

// TestFairVictimNotBehindFlood: a caller's single call, sent while
// another's batch of a hundred fills the window and its queue, takes one
// of the next seats to free, and the two then share the window call for
// call.
func TestFairVictimNotBehindFlood(t *testing.T) {
	g := newGate()
	s, d := newFairServer(t, g, Fairness{Seats: 2, HoldMin: time.Hour, HoldMax: time.Hour})
	dispatch(t, t.Context(), d, "flood", fairCalls("flood", 100, 0))
	held := []arrival{g.next(t), g.next(t)}
	queued(t, s, "flood", 98)
	flooded := 2
	for round := range 10 {
		dispatch(t, t.Context(), d, "victim", fairCalls("victim", 1, 0))
		queued(t, s, "victim", 1)
		// One of the next two seats to free goes to the victim's call:
		// the two callers take turns.
		for freed := 1; ; freed++ {
			close(held[0].open)
			a := g.next(t)
			held = append(held[1:], a)
			if a.call.Caller == "victim" {
				break
			}
			flooded++
			if freed == 2 {
				t.Fatalf("round %d: the %d seats freed since the victim's call came went to the flood's calls", round, freed)
			}
		}
	}
	for _, a := range held {
		close(a.open)
	}
	for range 100 - flooded { // the rest of the flood
		close(g.next(t).open)
	}
}

func TestFairShares(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want map[string]int // of 40 admissions
	}{
		{name: "equal weights", a: "flood", b: "victim", want: map[string]int{"flood": 20, "victim": 20}},
		{name: "weights 1 and 3", a: "flood", b: "heavy", want: map[string]int{"flood": 10, "heavy": 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate()
			s, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour})
			dispatch(t, t.Context(), d, tt.a, fairCalls(tt.a, 60, 0))
			first := g.next(t)
			queued(t, s, tt.a, 59)
			// b's calls come one batch each, on many "connections".
			for range 60 {
				dispatch(t, t.Context(), d, tt.b, fairCalls(tt.b, 1, 0))
			}
			queued(t, s, tt.b, 60)
			close(first.open)
			got := map[string]int{}
			for range 40 {
				a := g.next(t)
				got[a.call.Caller]++
				close(a.open)
			}
			for name, want := range tt.want {
				if d := got[name] - want; d < -1 || d > 1 {
					t.Errorf("%s got %d of 40 seats, want %d (±1); all: %v", name, got[name], want, got)
				}
			}
			for range 120 - 41 {
				close(g.next(t).open)
			}
		})
	}
}

// TestFairExempt: an exempt caller's call goes past a full window.
func TestFairExempt(t *testing.T) {
	g := newGate()
	_, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour})
	dispatch(t, t.Context(), d, "flood", fairCalls("flood", 10, 0))
	held := g.next(t)
	dispatch(t, t.Context(), d, "health", fairCalls("health", 1, 0))
	if a := g.next(t); a.call.Caller != "health" {
		t.Fatalf("the call after the seat was taken was %s's, want the exempt caller's", a.call.Caller)
	} else {
		close(a.open)
	}
	close(held.open)
	for range 9 {
		close(g.next(t).open)
	}
}

// TestFairQueueFull: the calls past a caller's queue are refused -32002
// at once, naming the limit, while the others wait their turn.
func TestFairQueueFull(t *testing.T) {
	g := newGate()
	reg := prometheus.NewRegistry()
	_, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour, CallerMaxQueued: 3}, WithMetrics(reg), WithMetricsCallers(true))
	ans := dispatch(t, t.Context(), d, "flood", fairCalls("flood", 10, 0))
	held := g.next(t)
	refused := map[int]bool{}
	for range 6 {
		i, r := ans.wait(t)
		if r.Error == nil || r.Error.Code != schema.CodeOverloaded {
			t.Fatalf("answer %d = %+v, want -32002", i, r)
		}
		var data struct {
			Limit        string `json:"limit"`
			Max          int    `json:"max"`
			RetryAfterMS *int64 `json:"retry_after_ms"`
			Retryable    bool   `json:"retryable"`
		}
		if err := json.Unmarshal(r.Error.Data, &data); err != nil {
			t.Fatal(err)
		}
		if data.Limit != "caller_max_queued" || data.Max != 3 || data.RetryAfterMS == nil || *data.RetryAfterMS < 1 || !data.Retryable {
			t.Errorf("refusal data = %s, want limit caller_max_queued, max 3, retryable, retry_after_ms ≥ 1", r.Error.Data)
		}
		refused[i] = true
	}
	for i := 4; i < 10; i++ {
		if !refused[i] {
			t.Errorf("call %d was not refused; want the 6 past the queue (indexes 4 to 9)", i)
		}
	}
	close(held.open)
	for range 3 {
		close(g.next(t).open)
	}
	if got := fairSeries(t, reg, "toolbus_fair_refused_total", "flood"); got != 6 {
		t.Errorf("toolbus_fair_refused_total{caller=flood} = %v, want 6", got)
	}
}

// fairSeries returns the value of the series name{caller} in reg, 0
// when there is none.
func fairSeries(t *testing.T, reg prometheus.Gatherer, name, caller string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "caller" && l.GetValue() == caller {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// TestFairDeadlineInQueue: a call whose deadline comes while it waits in
// its queue is answered -32001 from there and never reaches the
// dispatcher.
func TestFairDeadlineInQueue(t *testing.T) {
	g := newGate()
	g.timeout = time.Hour
	s, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour})
	dispatch(t, t.Context(), d, "flood", fairCalls("flood", 1, 0))
	held := g.next(t)
	ans := dispatch(t, t.Context(), d, "victim", fairCalls("victim", 3, 30*time.Millisecond))
	for range 3 {
		i, r := ans.wait(t)
		if r.Error == nil || r.Error.Code != schema.CodeTimeout || !strings.Contains(string(r.Error.Data), `"method":"work"`) {
			t.Errorf("answer %d = %+v, want -32001 naming work", i, r)
		}
	}
	close(held.open)
	// Another call goes through once the seat is free; none of the
	// expired ones did before it.
	dispatch(t, t.Context(), d, "victim", fairCalls("victim", 1, 0))
	if a := g.next(t); a.call.Caller != "victim" || a.call.Timeout > time.Hour {
		t.Fatalf("the next call to arrive was %s's %s, want the victim's last", a.call.Caller, a.call.ID)
	} else {
		close(a.open)
	}
	queued(t, s, "victim", 0)
}

// TestFairCanceled: the calls of a set whose context ends while they are
// queued are answered -32004 and never reach the dispatcher.
func TestFairCanceled(t *testing.T) {
	g := newGate()
	_, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour})
	dispatch(t, t.Context(), d, "flood", fairCalls("flood", 1, 0))
	held := g.next(t)
	ctx, cancel := context.WithCancel(t.Context())
	ans := dispatch(t, ctx, d, "victim", fairCalls("victim", 2, 0))
	cancel()
	for range 2 {
		if i, r := ans.wait(t); r.Error == nil || r.Error.Code != schema.CodeCanceled {
			t.Errorf("answer %d = %+v, want -32004", i, r)
		}
	}
	close(held.open)
	dispatch(t, t.Context(), d, "flood", fairCalls("flood", 1, 0))
	if a := g.next(t); a.call.Caller != "flood" {
		t.Fatalf("after the cancel, %s's call reached the dispatcher, want only flood's", a.call.Caller)
	} else {
		close(a.open)
	}
}

// TestFairDeadlinePolicy: the layer queues a call under the deadline of
// the declared policy, and gives each call what is left of it.
func TestFairDeadlinePolicy(t *testing.T) {
	g := newGate()
	g.timeout = 7 * time.Second
	_, d := newFairServer(t, g, Fairness{})
	dispatch(t, t.Context(), d, "flood", fairCalls("flood", 1, 0))
	a := g.next(t)
	if a.call.Timeout <= 0 || a.call.Timeout > 7*time.Second {
		t.Errorf("the call reached the dispatcher with Timeout %v, want what is left of 7s", a.call.Timeout)
	}
	close(a.open)
}

// TestFairNotification: a notification waits its turn like a call, gets
// no answer, and gives its seat back once handed on.
func TestFairNotification(t *testing.T) {
	g := newGate()
	s, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour})
	calls := fairCalls("flood", 2, 0)
	calls[0].ID = nil
	ans := dispatch(t, t.Context(), d, "flood", calls)
	if a := g.next(t); !a.call.IsNotification() {
		t.Fatalf("first arrival %s, want the notification", a.call.ID)
	}
	a := g.next(t)
	close(a.open)
	if i, _ := ans.wait(t); i != 1 {
		t.Errorf("answered call %d, want only the call (1)", i)
	}
	testwait.Eventually(t, func() bool { return s.FairStats().Used == 0 }, "every seat is free")
}

// TestFairBody: a batch body waits for its caller's turn before it is
// parsed, so that a single call sent while another caller's batch waits
// behind a full window goes first; a body past its caller's queue, or past
// its deadline in the queue, is answered as a whole.
func TestFairBody(t *testing.T) {
	g := newGate()
	g.timeout = time.Hour
	reg := prometheus.NewRegistry()
	// The flood's batch of 500 takes the seat and fills its queue.
	s, _ := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour, CallerMaxQueued: 499}, WithMetrics(reg), WithMetricsCallers(true))
	h := s.Handler()
	batch := func(from, n int) string {
		var b strings.Builder
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"work","params":[%d]}`, from+i, i)
		}
		return b.String() + "]"
	}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	send := func(key, body string, header ...string) chan *httptest.ResponseRecorder {
		out := make(chan *httptest.ResponseRecorder, 1)
		r := post(body, append([]string{auth.APIKeyHeader, key}, header...)...).WithContext(t.Context())
		wg.Go(func() { out <- serve(h, r) })
		return out
	}
	first := send("flood-key", batch(0, 2))
	held := g.next(t)
	queued(t, s, "flood", 1)
	// The flood's batch of 500 waits, unparsed, behind its own call;
	// the victim's call goes first. (A seat that frees between the end
	// of the victim body's turn and its call's arrival in the queue goes
	// to the flood's last call of its first batch.)
	second := send("flood-key", batch(1000, 500))
	queued(t, s, "flood", 2)
	victim := send("victim-key", `{"jsonrpc":"2.0","id":"v","method":"work","params":[]}`)
	queued(t, s, "victim", 1)
	close(held.open)
	floodSeen := 1
	for {
		a := g.next(t)
		close(a.open)
		if a.call.Caller == "victim" {
			break
		}
		floodSeen++
		if string(a.call.ID) != "1" {
			t.Fatalf("the flood's call %s reached the dispatcher before the victim's; want only the first batch's 1", a.call.ID)
		}
	}
	if rec := <-victim; decodeOne(t, rec.Body.Bytes()).Result != `"done"` {
		t.Errorf("victim's answer = %s", rec.Body)
	}
	// The victim's body, one small call, was parsed at once, so its call
	// may have gone before the flood's call 1, which then comes next.
	for ; floodSeen < 2; floodSeen++ {
		a := g.next(t)
		if string(a.call.ID) != "1" {
			t.Fatalf("the flood's call %s reached the dispatcher before its call 1", a.call.ID)
		}
		close(a.open)
	}

	// Another body of the flood finds its queue full: answered whole.
	queued(t, s, "flood", 499)
	rec := serve(h, post(batch(2000, 200), auth.APIKeyHeader, "flood-key"))
	if a := decodeOne(t, rec.Body.Bytes()); a.Code != schema.CodeOverloaded || a.Data["limit"] != "caller_max_queued" {
		t.Errorf("a body past the caller's queue = %s, want -32002 naming caller_max_queued", rec.Body)
	}
	// A body whose deadline comes while it waits: answered -32001. (A
	// batch: a body of one small call is parsed at once, and its call
	// waits instead.)
	rec = serve(h, post(`[{"jsonrpc":"2.0","id":1,"method":"work"}]`, auth.APIKeyHeader, "victim-key", schema.HeaderTimeout, "30ms"))
	if a := decodeOne(t, rec.Body.Bytes()); a.Code != schema.CodeTimeout || a.ID != "null" {
		t.Errorf("a body past its deadline in the queue = %s, want -32001 with a null id", rec.Body)
	}
	for ; floodSeen < 502; floodSeen++ {
		close(g.next(t).open)
	}
	for _, ch := range []chan *httptest.ResponseRecorder{first, second} {
		if rec := <-ch; rec.Code != http.StatusOK {
			t.Errorf("flood batch = HTTP %d", rec.Code)
		}
	}
	if got := fairSeries(t, reg, "toolbus_fair_admitted_total", "victim"); got != 1 {
		t.Errorf("toolbus_fair_admitted_total{caller=victim} = %v, want 1 (calls, not bodies)", got)
	}
	if got := fairSeries(t, reg, "toolbus_fair_expired_total", "victim"); got != 1 {
		t.Errorf("toolbus_fair_expired_total{caller=victim} = %v, want 1", got)
	}
}

// TestFairWebSocketBody: a WebSocket message waits for its caller's turn
// before it is parsed, as a POST body does: while the flood's first batch
// has the window, its next batches on the same connection wait in its
// queue unparsed, one entry each, and the victim's single call, sent
// after them on a connection of its own, is let in before any of them is
// parsed.
func TestFairWebSocketBody(t *testing.T) {
	const n = 300 // calls per batch: about 45 KB, well past parseAtOnce
	g := newGate()
	s, _ := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour}, WithWebSocketMaxInFlight(4*n))
	batch := func(from int) string {
		var b strings.Builder
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"work","params":{"pad":"%0100d"}}`, from+i, i)
		}
		return b.String() + "]"
	}
	flood := dialWS(t, s, auth.APIKeyHeader, "flood-key")
	victim := dialWS(t, s, auth.APIKeyHeader, "victim-key")

	send(t, flood, batch(0))
	held := g.next(t)
	queued(t, s, "flood", n-1)
	send(t, flood, batch(1000))
	send(t, flood, batch(2000))
	// The second batch is one entry in the flood's queue, a body not
	// parsed yet rather than its calls; the third waits behind it on
	// its connection, unread by the queue.
	queued(t, s, "flood", n-1+1)

	send(t, victim, `{"jsonrpc":"2.0","id":"v","method":"work","params":[]}`)
	queued(t, s, "victim", 1)
	close(held.open)
	seen := 1
	for {
		a := g.next(t)
		close(a.open)
		if a.call.Caller == "victim" {
			break
		}
		seen++
		var id int
		if _, err := fmt.Sscan(string(a.call.ID), &id); err != nil || id >= n {
			t.Fatalf("the flood's call %s reached the dispatcher before the victim's; want only its first batch's", a.call.ID)
		}
	}
	if got := receiveOne(t, victim); got.Result != `"done"` {
		t.Errorf("the victim's answer = %+v, want done", got)
	}
	for _, f := range s.FairStats().Flows {
		if f.Name == "flood" && f.Queued > n-seen+1 {
			t.Errorf("when the victim's call was let in, the flood had %d entries queued, want at most %d: its later batches were parsed ahead of the victim's call", f.Queued, n-seen+1)
		}
	}
	for ; seen < 3*n; seen++ {
		close(g.next(t).open)
	}
	for range 3 {
		if batch, as := receive(t, flood); !batch || len(as) != n {
			t.Fatalf("the flood got %d answers (batch %v), want a batch of %d", len(as), batch, n)
		}
	}
}

// TestFairRESTBody: a REST body of 16 KiB or more waits for its caller's
// turn before it is parsed, behind the caller's calls already queued: one
// that is not JSON is answered once its turn comes, not at once.
func TestFairRESTBody(t *testing.T) {
	g := newGate()
	s, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour})
	dispatch(t, t.Context(), d, "flood", fairCalls("flood", 2, 0))
	held := g.next(t)
	queued(t, s, "flood", 1)
	answered := make(chan *httptest.ResponseRecorder, 1)
	// 16 KiB or more: a body of one call smaller than that is parsed at
	// once, and only its call waits.
	notJSON := `{"p":"` + strings.Repeat("x", parseAtOnce)
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/tools/work/invoke", strings.NewReader(notJSON))
	r.Header.Set(auth.APIKeyHeader, "flood-key")
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	wg.Go(func() { answered <- serve(s.Handler(), r) })
	// The body waits, unparsed, behind the flood's queued call.
	queued(t, s, "flood", 2)
	close(held.open)
	if a := g.next(t); string(a.call.ID) != "2" {
		t.Fatalf("call %s reached the dispatcher, want the flood's queued call 2", a.call.ID)
	} else {
		close(a.open)
	}
	select {
	case rec := <-answered:
		var a restAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || a.Success || a.Error == nil || a.Error.Code != schema.CodeParseError {
			t.Errorf("answer to a body that is not JSON = %s, want -32700", rec.Body)
		}
	case <-time.After(testwait.Limit):
		t.Fatalf("no answer to the REST call within %v", testwait.Limit)
	}
}

// TestFairMetricsCallers: /metrics names no caller in the fairness
// series unless WithMetricsCallers allows it, counting every caller
// together under "_all"; FairMetrics names each, for the dashboard.
func TestFairMetricsCallers(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			g := newGate()
			reg := prometheus.NewRegistry()
			s, d := newFairServer(t, g, Fairness{Seats: 1, HoldMin: time.Hour, HoldMax: time.Hour, CallerMaxQueued: 1},
				WithMetrics(reg), WithMetricsCallers(named))
			dispatch(t, t.Context(), d, "flood", fairCalls("flood", 5, 0))
			close(g.next(t).open)
			close(g.next(t).open)
			dispatch(t, t.Context(), d, "victim", fairCalls("victim", 1, 0))
			close(g.next(t).open)
			// flood: 2 admitted, 3 refused; victim: 1 admitted.
			testwait.Eventually(t, func() bool { return s.FairStats().Used == 0 }, "every seat is free")
			want := map[string]float64{"flood": 2, "victim": 1, labelAllCallers: 0}
			if !named {
				want = map[string]float64{"flood": 0, "victim": 0, labelAllCallers: 3}
			}
			for caller, n := range want {
				if got := fairSeries(t, reg, "toolbus_fair_admitted_total", caller); got != n {
					t.Errorf("/metrics toolbus_fair_admitted_total{caller=%q} = %v, want %v", caller, got, n)
				}
			}
			if got, want := fairSeries(t, reg, "toolbus_fair_refused_total", map[bool]string{false: labelAllCallers, true: "flood"}[named]), 3.0; got != want {
				t.Errorf("/metrics toolbus_fair_refused_total = %v, want %v", got, want)
			}
			for caller, n := range map[string]float64{"flood": 2, "victim": 1} {
				if got := fairSeries(t, s.FairMetrics(), "toolbus_fair_admitted_total", caller); got != n {
					t.Errorf("FairMetrics toolbus_fair_admitted_total{caller=%q} = %v, want %v", caller, got, n)
				}
			}
		})
	}
}

// TestFairRounds: while two callers are busy, the window admits in rounds
// that each wait for the ingress to read its connections again; the two
// share the window, every call is answered, and the rounds show in
// toolbus_fair_rounds_total.
func TestFairRounds(t *testing.T) {
	g := newGate()
	reg := prometheus.NewRegistry()
	s, d := newFairServer(t, g, Fairness{Seats: 4, HoldMin: time.Hour, HoldMax: time.Hour, Round: 2}, WithMetrics(reg))
	flood := dispatch(t, t.Context(), d, "flood", fairCalls("flood", 20, 0))
	var held []arrival
	for range 4 {
		held = append(held, g.next(t)) // the flood alone takes every seat
	}
	queued(t, s, "flood", 16)
	victim := dispatch(t, t.Context(), d, "victim", fairCalls("victim", 20, 0))
	queued(t, s, "victim", 20)
	for _, a := range held {
		close(a.open)
	}
	var order []string
	for range 36 {
		a := g.next(t)
		order = append(order, a.call.Caller)
		close(a.open)
	}
	if n := count(order[:20]); n["flood"] < 8 || n["victim"] < 8 {
		t.Errorf("the first 20 admissions while both callers were busy = %v, want about half each", n)
	}
	for _, a := range []*answers{flood, victim} {
		for range 20 {
			if _, r := a.wait(t); r.Error != nil {
				t.Fatalf("answer %+v, want done", r)
			}
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	rounds := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "toolbus_fair_rounds_total" {
			rounds = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if rounds < 1 {
		t.Errorf("toolbus_fair_rounds_total = %v after two callers competed, want at least 1", rounds)
	}
}

// count returns how many of values each value is.
func count(values []string) map[string]int {
	n := map[string]int{}
	for _, v := range values {
		n[v]++
	}
	return n
}

// TestFairAlone: the calls of a caller alone go to the dispatcher without
// queueing, each with what is left of its deadline; they hold their seats
// until answered and are counted as admitted without a wait. A second
// caller that comes while they hold the window does not skip the queue:
// it waits for a seat like any call.
func TestFairAlone(t *testing.T) {
	g := newGate()
	reg := prometheus.NewRegistry()
	s, d := newFairServer(t, g, Fairness{Seats: 3, HoldMin: time.Hour, HoldMax: time.Hour}, WithMetrics(reg), WithMetricsCallers(true))
	ans := dispatch(t, t.Context(), d, "flood", fairCalls("flood", 3, 2*time.Second))
	var held []arrival
	for range 3 {
		a := g.next(t)
		if a.call.Timeout <= 0 || a.call.Timeout > 2*time.Second {
			t.Errorf("call %s reached the dispatcher with Timeout %v, want what is left of 2s", a.call.ID, a.call.Timeout)
		}
		held = append(held, a)
	}
	if st := s.FairStats(); st.Used != 3 {
		t.Errorf("seats used with the batch at the dispatcher = %d, want 3", st.Used)
	}
	if got := fairSeries(t, reg, "toolbus_fair_queued", "flood"); got != 0 {
		t.Errorf("toolbus_fair_queued{caller=flood} = %v, want 0: its calls never queued", got)
	}
	if got := fairSeries(t, reg, "toolbus_fair_admitted_total", "flood"); got != 3 {
		t.Errorf("toolbus_fair_admitted_total{caller=flood} = %v, want 3", got)
	}
	// The window is full: the victim's call queues.
	victim := dispatch(t, t.Context(), d, "victim", fairCalls("victim", 1, 0))
	queued(t, s, "victim", 1)
	close(held[0].open)
	if i, r := ans.wait(t); r.Error != nil {
		t.Errorf("flood call %d answered %+v, want a result", i, r.Error)
	}
	a := g.next(t)
	if a.call.Caller != "victim" {
		t.Fatalf("the freed seat went to %q, want the victim", a.call.Caller)
	}
	close(a.open)
	victim.wait(t)
	for _, h := range held[1:] {
		close(h.open)
		ans.wait(t)
	}
	testwait.Eventually(t, func() bool { return s.FairStats().Used == 0 }, "every seat is free")
	if n := len(s.FairStats().Flows); n != 0 {
		t.Errorf("flows with anything queued or inside at the end = %d, want 0", n)
	}
}

// TestFairAloneSeatsBackFromAMisbehavingNext: the seats of a caller
// alone's calls are all given back when next answers one call twice and
// another never, and when next panics.
func TestFairAloneSeatsBackFromAMisbehavingNext(t *testing.T) {
	tests := []struct {
		name string
		next schema.DispatcherFunc
	}{
		{name: "one call answered twice, one never", next: func(_ context.Context, calls []schema.Call, emit func(int, schema.Response)) {
			emit(0, schema.Response{ID: calls[0].ID, Result: json.RawMessage(`1`)})
			emit(0, schema.Response{ID: calls[0].ID, Result: json.RawMessage(`1`)})
		}},
		{name: "a panic", next: func(context.Context, []schema.Call, func(int, schema.Response)) {
			panic("next failed")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.next, WithLogger(discard), WithAuth(fairKeys), WithFairness(Fairness{Seats: 4, HoldMin: time.Hour, HoldMax: time.Hour}))
			if err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() { _ = recover() }()
				s.dispatcher.Dispatch(callerCtx(t.Context(), "flood"), fairCalls("flood", 2, 0), func(int, schema.Response) {})
			}()
			if st := s.FairStats(); st.Used != 0 || len(st.Flows) != 0 {
				t.Errorf("after the dispatch the window is %+v, want every seat given back", st)
			}
		})
	}
}
