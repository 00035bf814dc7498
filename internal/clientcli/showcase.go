package clientcli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// showcaseCall is one call of the demo, with the outcome it must have.
type showcaseCall struct {
	method   string
	params   string
	timeout  time.Duration
	wantCode int // 0: a result
}

var showcase = []showcaseCall{
	{method: "echo", params: `{"hello":"world"}`},
	{method: "sleep", params: `{"ms":200}`},
	{method: "sleep", params: `{"ms":200}`},
	{method: "sleep", params: `{"ms":200}`},
	{method: "sleep", params: `{"ms":200}`},
	{method: "sleep", params: `{"ms":200}`},
	{method: "subtract", params: `[42,23]`},
	{method: "sha256", params: `{"data":"toolbus","rounds":20000}`},
	{method: "fail", params: `{"code":2001,"message":"insufficient funds","data":{"balance":3}}`, wantCode: 2001},
	{method: "sleep", params: `{"ms":10000}`, timeout: time.Second, wantCode: schema.CodeTimeout},
}

// ShowcaseMethods returns the methods [Showcase] calls, in the order of
// their ids.
func ShowcaseMethods() []string {
	methods := make([]string, len(showcase))
	for i, c := range showcase {
		methods[i] = c.method
	}
	return methods
}

type showcaseResult struct {
	id      int
	call    showcaseCall
	resp    schema.Response
	err     error
	latency time.Duration
}

// Showcase sends the showcase of the demo to the JSON-RPC endpoint at url
// of a cluster that serves the demo toolset, first each call as its own
// request at the same moment and then all together as one batch, and
// prints to out a table of id, method, outcome and latency, and what the
// batch answered. It returns an error when a call had an outcome other
// than the one it should.
func Showcase(ctx context.Context, out io.Writer, url string) error {
	client := &http.Client{Timeout: time.Minute}
	results := make([]showcaseResult, len(showcase))
	var wg sync.WaitGroup
	for i, c := range showcase {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i+1, c.method, c.params)
			start := time.Now()
			data, err := post(ctx, client, url, body, c.timeout)
			r := showcaseResult{id: i + 1, call: c, latency: time.Since(start), err: err}
			if err == nil {
				r.err = json.Unmarshal(data, &r.resp)
			}
			results[i] = r
		}()
	}
	wg.Wait()

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tMETHOD\tOUTCOME\tLATENCY")
	failed := 0
	for _, r := range results {
		outcome, ok := describe(r)
		if !ok {
			failed++
			outcome += "  (unexpected)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", r.id, r.call.method, outcome, r.latency.Round(100*time.Microsecond))
	}
	tw.Flush()

	batchCalls := make([]string, len(showcase))
	for i, c := range showcase {
		batchCalls[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i+1, c.method, c.params)
	}
	start := time.Now()
	data, err := post(ctx, client, url, "["+strings.Join(batchCalls, ",")+"]", time.Second)
	took := time.Since(start)
	var batch []schema.Response
	if err == nil {
		err = json.Unmarshal(data, &batch)
	}
	if err != nil {
		return fmt.Errorf("demo batch: %w", err)
	}
	okCount, errCount := 0, 0
	for _, r := range batch {
		if r.Error != nil {
			errCount++
		} else {
			okCount++
		}
	}
	fmt.Fprintf(out, "\nthe same %d calls as one batch (Toolbus-Timeout: 1s): %d answers (%d results, %d errors) in %s\n",
		len(showcase), len(batch), okCount, errCount, took.Round(time.Millisecond))
	if len(batch) != len(showcase) || errCount != 2 {
		failed++
		fmt.Fprintln(out, "unexpected: the batch should answer every id, with exactly the failing and the timed-out call as errors")
	}
	if failed > 0 {
		return fmt.Errorf("demo: %d outcomes were not as expected", failed)
	}
	return nil
}

func post(ctx context.Context, client *http.Client, url, body string, timeout time.Duration) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if timeout > 0 {
		req.Header.Set(schema.HeaderTimeout, timeout.String())
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, data)
	}
	return data, nil
}

// describe renders an outcome and reports whether it is the expected one.
func describe(r showcaseResult) (string, bool) {
	switch {
	case r.err != nil:
		return "transport error: " + r.err.Error(), false
	case r.resp.Error != nil:
		s := "error " + strconv.Itoa(r.resp.Error.Code) + ": " + r.resp.Error.Message
		return s, r.resp.Error.Code == r.call.wantCode
	}
	s := "ok " + string(r.resp.Result)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s, r.call.wantCode == 0
}
