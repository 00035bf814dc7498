package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Batches is the wall time of the batches a scenario sent, each measured from
// sending the request to reading the last byte of its answer.
type Batches struct {
	// Walls holds the wall time of every batch that was answered, in the
	// order sent, including answers that failed their check.
	Walls []time.Duration
	// Min, Median and Max summarise Walls.
	Min, Median, Max time.Duration
	// Failures holds what went wrong with each batch that was not answered
	// as expected (a missing, duplicate or unknown id, a wrong result, a
	// transport error), in order; empty when every batch checked out. Its
	// entries match the package's errors under [errors.Is].
	Failures []error
}

// batchCheck is what a scenario sends and what the answer must hold.
type batchCheck struct {
	body []byte
	want []expectation
}

// runBatches sends body to url repeats times, one after another, and checks
// each answer. A batch gets at most timeout. It stops early when ctx ends.
// It plans progress for repeats batches and counts each that ends.
func runBatches(ctx context.Context, c *http.Client, url string, header http.Header, bc batchCheck, repeats int, timeout time.Duration, progress *Progress) (Batches, error) {
	progress.planCount(repeats, "batches")
	var b Batches
	var buf bytes.Buffer
	for i := range repeats {
		if err := ctx.Err(); err != nil {
			return b, err
		}
		bctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := post(bctx, c, url, header, bc.body, &buf)
		wall := time.Since(start)
		cancel()
		progress.add(1)
		if err == nil || errors.Is(err, ErrStatus) {
			b.Walls = append(b.Walls, wall)
		}
		if err == nil {
			err = verify(buf.Bytes(), true, bc.want)
		}
		if err != nil {
			if ctx.Err() != nil {
				return b.summarise(), ctx.Err()
			}
			b.Failures = append(b.Failures, fmt.Errorf("batch %d: %w", i+1, err))
		}
	}
	return b.summarise(), errors.Join(b.Failures...)
}

func (b Batches) summarise() Batches {
	if len(b.Walls) == 0 {
		return b
	}
	b.Min, b.Max = b.Walls[0], b.Walls[0]
	for _, w := range b.Walls {
		b.Min, b.Max = min(b.Min, w), max(b.Max, w)
	}
	b.Median = median(b.Walls)
	return b
}

// appendCall appends one request of a batch to b.
func appendCall(b []byte, id int, method string, params []byte) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, int64(id), 10)
	b = append(b, `,"method":"`...)
	b = append(b, method...)
	b = append(b, `","params":`...)
	b = append(b, params...)
	return append(b, '}')
}

// FanOutConfig says what [FanOut] sends.
type FanOutConfig struct {
	// URL is the toolbus ingress, for example http://127.0.0.1:8080/rpc.
	// Required.
	URL string
	// Calls is the number of sleep calls in the batch. Default 100.
	Calls int
	// Sleep is how long each call sleeps, sent in whole milliseconds.
	// Default 100ms.
	Sleep time.Duration
	// Repeats is the number of batches, sent one after another. Default 5.
	Repeats int
	// Header is added to every batch. Optional.
	Header http.Header
	// Client sends the batches. Default: a client of its own, closed when
	// FanOut returns.
	Client *http.Client
	// Progress, when not nil, is planned for Repeats batches and counts
	// them. Optional.
	Progress *Progress
}

// FanOutResult is what [FanOut] measured.
type FanOutResult struct {
	Calls int
	// Ideal is the wall time of a batch whose calls all run at once with no
	// overhead: one Sleep.
	Ideal time.Duration
	Batches
}

// FanOut measures how well toolbus spreads a batch: it sends a batch of
// cfg.Calls `sleep` calls of cfg.Sleep each, cfg.Repeats times, and checks
// that every id got the result {"slept_ms": M} exactly once. With the calls
// running side by side a batch takes about one Sleep; run one after another
// it would take Calls of them.
//
// It returns the error of every batch that failed its check, joined, along
// with the result, which still holds the wall times of all answered batches.
func FanOut(ctx context.Context, cfg FanOutConfig) (FanOutResult, error) {
	if err := checkURL(cfg.URL); err != nil {
		return FanOutResult{}, fmt.Errorf("bench: fan-out: %w", err)
	}
	if cfg.Calls < 0 || cfg.Sleep < 0 || cfg.Repeats < 0 {
		return FanOutResult{}, errors.New("bench: fan-out calls, sleep and repeats must not be negative")
	}
	if cfg.Calls == 0 {
		cfg.Calls = 100
	}
	if cfg.Sleep == 0 {
		cfg.Sleep = 100 * time.Millisecond
	}
	if cfg.Repeats == 0 {
		cfg.Repeats = 5
	}
	ms := cfg.Sleep.Milliseconds()
	params := []byte(`{"ms":` + strconv.FormatInt(ms, 10) + `}`)
	want := []byte(`{"slept_ms":` + strconv.FormatInt(ms, 10) + `}`)
	var bc batchCheck
	bc.body = append(bc.body, '[')
	for i := range cfg.Calls {
		if i > 0 {
			bc.body = append(bc.body, ',')
		}
		bc.body = appendCall(bc.body, i+1, "sleep", params)
		bc.want = append(bc.want, expectation{id: strconv.AppendInt(nil, int64(i+1), 10), check: resultEqual(want)})
	}
	bc.body = append(bc.body, ']')

	client := cfg.Client
	if client == nil {
		client = newClient(1)
		defer client.CloseIdleConnections()
	}
	// A batch run one call after another would take Calls×Sleep; ten
	// seconds past one Sleep is ample for any working fan-out and keeps a
	// broken one from hanging the bench.
	b, err := runBatches(ctx, client, cfg.URL, requestHeader(cfg.Header), bc, cfg.Repeats, time.Duration(ms)*time.Millisecond+10*time.Second, cfg.Progress)
	res := FanOutResult{Calls: cfg.Calls, Ideal: time.Duration(ms) * time.Millisecond, Batches: b}
	if err != nil {
		return res, fmt.Errorf("bench: fan-out: %w", err)
	}
	return res, nil
}

// SlowConfig says what [SlowBackend] sends.
type SlowConfig struct {
	// URL is the toolbus ingress. Required.
	URL string
	// Sleep is how long the one slow call asks to sleep, sent in whole
	// milliseconds; it should far outlive Timeout. Default 10s.
	Sleep time.Duration
	// Echoes is the number of fast echo calls beside it. Default 9.
	Echoes int
	// Timeout is sent as the Toolbus-Timeout header: the deadline of every
	// call of the batch. Default 300ms.
	Timeout time.Duration
	// Repeats is the number of batches, sent one after another. Default 5.
	Repeats int
	// Header is added to every batch; its Toolbus-Timeout is replaced by
	// Timeout. Optional.
	Header http.Header
	// Client sends the batches. Default: a client of its own, closed when
	// SlowBackend returns.
	Client *http.Client
	// Progress, when not nil, is planned for Repeats batches and counts
	// them. Optional.
	Progress *Progress
}

// SlowResult is what [SlowBackend] measured.
type SlowResult struct {
	Echoes  int
	Sleep   time.Duration
	Timeout time.Duration
	Batches
}

// SlowBackend measures how toolbus bounds a batch by its deadline: it sends a
// batch of one `sleep` call of cfg.Sleep and cfg.Echoes `echo` calls under
// Toolbus-Timeout cfg.Timeout, cfg.Repeats times, and checks that the sleep
// call was answered with a timeout error (-32001) and every echo call with
// its params. A batch should take about Timeout, not Sleep.
//
// Errors are returned as by [FanOut].
func SlowBackend(ctx context.Context, cfg SlowConfig) (SlowResult, error) {
	if err := checkURL(cfg.URL); err != nil {
		return SlowResult{}, fmt.Errorf("bench: slow backend: %w", err)
	}
	if cfg.Sleep < 0 || cfg.Echoes < 0 || cfg.Timeout < 0 || cfg.Repeats < 0 {
		return SlowResult{}, errors.New("bench: slow-backend sleep, echoes, timeout and repeats must not be negative")
	}
	if cfg.Sleep == 0 {
		cfg.Sleep = 10 * time.Second
	}
	if cfg.Echoes == 0 {
		cfg.Echoes = 9
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 300 * time.Millisecond
	}
	if cfg.Repeats == 0 {
		cfg.Repeats = 5
	}
	ms := cfg.Sleep.Milliseconds()
	var bc batchCheck
	bc.body = append(bc.body, '[')
	bc.body = appendCall(bc.body, 1, "sleep", []byte(`{"ms":`+strconv.FormatInt(ms, 10)+`}`))
	bc.want = append(bc.want, expectation{id: []byte("1"), check: errorCode(schema.CodeTimeout)})
	for i := range cfg.Echoes {
		id := i + 2
		params := []byte(`{"n":` + strconv.Itoa(id) + `}`)
		bc.body = append(bc.body, ',')
		bc.body = appendCall(bc.body, id, "echo", params)
		bc.want = append(bc.want, expectation{id: strconv.AppendInt(nil, int64(id), 10), check: resultEqual(params)})
	}
	bc.body = append(bc.body, ']')

	header := requestHeader(cfg.Header)
	header.Set(schema.HeaderTimeout, cfg.Timeout.String())
	client := cfg.Client
	if client == nil {
		client = newClient(1)
		defer client.CloseIdleConnections()
	}
	// A toolbus that ignored the deadline would answer after Sleep: give it
	// that long, and a little more, so that the check reports what it did.
	b, err := runBatches(ctx, client, cfg.URL, header, bc, cfg.Repeats, cfg.Sleep+cfg.Timeout+5*time.Second, cfg.Progress)
	res := SlowResult{Echoes: cfg.Echoes, Sleep: cfg.Sleep, Timeout: cfg.Timeout, Batches: b}
	if err != nil {
		return res, fmt.Errorf("bench: slow backend: %w", err)
	}
	return res, nil
}
