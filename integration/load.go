//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Outcome is what became of one request id.
type Outcome int

// The outcomes a [Tally] counts.
const (
	// Unanswered: no answer carried the id (the request failed, the
	// answer was not JSON-RPC, or it left the id out).
	Unanswered Outcome = iota
	// AnsweredOK: a result came back for the id.
	AnsweredOK
	// AnsweredError: an error object came back for the id.
	AnsweredError
)

func (o Outcome) String() string {
	switch o {
	case AnsweredOK:
		return "answered-ok"
	case AnsweredError:
		return "answered-error"
	}
	return "unanswered"
}

// Call is one call of a batch: its method and params (JSON).
type Call struct {
	Method string
	Params string
}

// Mix returns the calls of the default load: mostly sleeps of up to
// maxSleep, which hold a worker's slot as a slow backend does, and echoes.
func Mix(maxSleep time.Duration) func(r *rand.Rand) Call {
	return func(r *rand.Rand) Call {
		if r.IntN(4) == 0 {
			return Call{"echo", fmt.Sprintf(`{"n":%d}`, r.IntN(1000))}
		}
		return Call{"sleep", fmt.Sprintf(`{"ms":%d}`, 10+r.Int64N(maxSleep.Milliseconds()))}
	}
}

// LoadConfig is a steady load: Senders loops, each sending batches of
// BatchSize calls one after the other to the ingress replicas in turn,
// until stopped, MaxBatches batches in all, or MaxDuration.
type LoadConfig struct {
	Name        string          // prefix of every request id
	URLs        func() []string // the ingress base URLs in rotation now
	Senders     int
	BatchSize   int
	Timeout     time.Duration // the Toolbus-Timeout of every call
	Calls       func(r *rand.Rand) Call
	Pause       time.Duration // between two batches of one sender
	MaxBatches  int
	MaxDuration time.Duration
}

// Batch is one batch the load sent.
type Batch struct {
	Sent, Done time.Time
	URL        string
	Err        error // why the whole batch went unanswered, if it did
}

// Result is the fate of one request id.
type Result struct {
	ID      string
	Method  string
	Batch   int // index into [Load.Batches]
	Outcome Outcome
	Code    int    // the error code of an AnsweredError
	Reason  string // its data.reason, when it has one
	Answers int    // how many answers carried the id: 1, or 0 if Unanswered
}

// Cause is why the call of r failed: its code, and its data.reason
// after a slash when it has one ("-32003/bus_disconnected").
func (r Result) Cause() string {
	if r.Reason == "" {
		return fmt.Sprint(r.Code)
	}
	return fmt.Sprintf("%d/%s", r.Code, r.Reason)
}

// Load is a running load. Its methods are safe for concurrent use.
type Load struct {
	t    *testing.T
	cfg  LoadConfig
	http *http.Client
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu      sync.Mutex
	batches []Batch
	results []Result
}

// StartLoad starts a load; it stops by itself at its bounds, or at
// [Load.Stop], and at the latest when the test ends.
func StartLoad(t *testing.T, cfg LoadConfig) *Load {
	t.Helper()
	if cfg.Senders <= 0 || cfg.BatchSize <= 0 || cfg.Timeout <= 0 || cfg.MaxBatches <= 0 || cfg.MaxDuration <= 0 {
		t.Fatalf("load %q: senders, batch size, timeout and both bounds must be positive: %+v", cfg.Name, cfg)
	}
	if cfg.Calls == nil {
		cfg.Calls = Mix(300 * time.Millisecond)
	}
	l := &Load{
		t:    t,
		cfg:  cfg,
		http: &http.Client{Timeout: cfg.Timeout + 15*time.Second},
		stop: make(chan struct{}),
	}
	deadline := time.Now().Add(cfg.MaxDuration)
	for s := range cfg.Senders {
		l.wg.Go(func() { l.send(s, deadline) })
	}
	t.Cleanup(func() { l.Stop() })
	return l
}

// send is one sender's loop.
func (l *Load) send(sender int, deadline time.Time) {
	r := rand.New(rand.NewPCG(uint64(sender), uint64(time.Now().UnixNano())))
	for n := 0; time.Now().Before(deadline); n++ {
		select {
		case <-l.stop:
			return
		default:
		}
		urls := l.cfg.URLs()
		l.mu.Lock()
		full := len(l.batches) >= l.cfg.MaxBatches
		l.mu.Unlock()
		if full {
			return
		}
		if len(urls) == 0 {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		l.batch(urls[(sender+n)%len(urls)], r)
		select {
		case <-l.stop:
			return
		case <-time.After(l.cfg.Pause):
		}
	}
}

type wireRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      string          `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

type wireResponse struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Reason string `json:"reason"`
		} `json:"data"`
	} `json:"error"`
}

// batch sends one batch to url and records the fate of each of its ids.
func (l *Load) batch(url string, r *rand.Rand) {
	l.mu.Lock()
	b := len(l.batches)
	l.batches = append(l.batches, Batch{Sent: time.Now(), URL: url})
	first := len(l.results)
	reqs := make([]wireRequest, l.cfg.BatchSize)
	for i := range reqs {
		c := l.cfg.Calls(r)
		reqs[i] = wireRequest{"2.0", fmt.Sprintf("%s-%d-%d", l.cfg.Name, b, i), c.Method, json.RawMessage(c.Params)}
		l.results = append(l.results, Result{ID: reqs[i].ID, Method: c.Method, Batch: b})
	}
	l.mu.Unlock()

	answers, err := l.post(url, reqs)

	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches[b].Done = time.Now()
	l.batches[b].Err = err
	byID := make(map[string]int, len(reqs))
	for i := range reqs {
		byID[reqs[i].ID] = first + i
	}
	for _, a := range answers {
		var id string
		if json.Unmarshal(a.ID, &id) != nil {
			continue
		}
		k, ok := byID[id]
		if !ok {
			continue
		}
		res := &l.results[k]
		res.Answers++
		switch {
		case a.Error != nil:
			res.Outcome, res.Code, res.Reason = AnsweredError, a.Error.Code, a.Error.Data.Reason
		case len(a.Result) > 0 && string(a.Result) != "null":
			res.Outcome = AnsweredOK
		default:
			// An empty answer never counts as success.
			res.Outcome, res.Code = AnsweredError, 0
		}
	}
}

// post sends one batch and returns its answers.
func (l *Load) post(url string, reqs []wireRequest) ([]wireResponse, error) {
	body, err := json.Marshal(reqs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.Timeout+15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/rpc", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(schema.HeaderTimeout, l.cfg.Timeout.String())
	resp, err := l.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %.200s", resp.Status, raw)
	}
	var answers []wireResponse
	if err := json.Unmarshal(raw, &answers); err != nil {
		return nil, fmt.Errorf("answer is no batch: %w: %.200s", err, raw)
	}
	return answers, nil
}

// Stop stops the load, waits for the batches in flight to be answered (or
// to fail), and returns the fate of every id it sent.
func (l *Load) Stop() []Result {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	return l.Results()
}

// Results returns the fate of every id so far; ids of batches in flight
// are still Unanswered.
func (l *Load) Results() []Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Result(nil), l.results...)
}

// Batches returns the batches sent so far.
func (l *Load) Batches() []Batch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Batch(nil), l.batches...)
}

// Tally counts the fate of a load's ids.
type Tally struct {
	Batches    int
	OK         int
	Error      int
	Unanswered int
	Duplicated int // ids answered more than once
	Codes      map[int]int
	// Causes counts the errors by [Result.Cause]: code and reason.
	Causes map[string]int
}

// Count tallies results.
func Count(results []Result, batches int) Tally {
	t := Tally{Batches: batches, Codes: make(map[int]int), Causes: make(map[string]int)}
	for _, r := range results {
		switch r.Outcome {
		case AnsweredOK:
			t.OK++
		case AnsweredError:
			t.Error++
			t.Codes[r.Code]++
			t.Causes[r.Cause()]++
		default:
			t.Unanswered++
		}
		if r.Answers > 1 {
			t.Duplicated++
		}
	}
	return t
}

func (t Tally) String() string {
	return fmt.Sprintf("batches=%d ids=%d answered-ok=%d answered-error=%d [%s] unanswered=%d duplicated=%d",
		t.Batches, t.OK+t.Error+t.Unanswered, t.OK, t.Error, Causes(t.Causes), t.Unanswered, t.Duplicated)
}

// Causes writes counts of causes as "13×-32001 2×-32003/bus_disconnected",
// in the order of the causes.
func Causes(counts map[string]int) string {
	causes := make([]string, 0, len(counts))
	for c := range counts {
		causes = append(causes, c)
	}
	sort.Strings(causes)
	var parts []string
	for _, c := range causes {
		parts = append(parts, fmt.Sprintf("%d×%s", counts[c], c))
	}
	return strings.Join(parts, " ")
}

// StopAndCheck stops the load, logs its tally and fails the test unless
// every id was answered exactly once. It returns the results for the
// scenario's own checks.
func (l *Load) StopAndCheck() ([]Result, []Batch) {
	l.t.Helper()
	results := l.Stop()
	batches := l.Batches()
	tally := Count(results, len(batches))
	l.t.Logf("tally %s: %v", l.cfg.Name, tally)
	if tally.OK+tally.Error == 0 {
		l.t.Errorf("load %s: nothing was answered", l.cfg.Name)
	}
	if tally.Unanswered != 0 || tally.Duplicated != 0 {
		l.t.Errorf("load %s: unanswered = %d, duplicated = %d, want 0 and 0", l.cfg.Name, tally.Unanswered, tally.Duplicated)
		shown := 0
		for _, r := range results {
			if r.Outcome == Unanswered && shown < 5 {
				shown++
				l.t.Logf("unanswered %s (batch to %s: %v)", r.ID, batches[r.Batch].URL, batches[r.Batch].Err)
			}
		}
	}
	return results, batches
}
