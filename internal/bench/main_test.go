package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/schema"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeToolbus answers batches of echo and sleep calls the way the toolbus
// ingress does, each call on its own and under the Toolbus-Timeout deadline,
// and can be told to answer wrongly.
type fakeToolbus struct {
	// ignoreTimeout makes a sleep run to its end whatever the deadline.
	ignoreTimeout bool
	// drop, dup and alter name an id (as JSON) whose response is left out,
	// sent twice, or given a wrong result.
	drop, dup, alter string
}

func (f fakeToolbus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	items, batch, perr := schema.Parse(body, schema.Limits{})
	if perr != nil {
		writeJSON(w, schema.Response{Error: perr})
		return
	}
	var timeout time.Duration
	if h := r.Header.Get(schema.HeaderTimeout); h != "" {
		if timeout, err = time.ParseDuration(h); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	resps := make([]schema.Response, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { resps[i] = f.call(r.Context(), it, timeout) })
	}
	wg.Wait()
	var out []schema.Response
	for i, it := range items {
		if it.Err == nil && it.Request.IsNotification() {
			continue
		}
		switch string(resps[i].ID) {
		case f.drop:
			continue
		case f.dup:
			out = append(out, resps[i])
		case f.alter:
			resps[i].Result = json.RawMessage(`{"altered":true}`)
		}
		out = append(out, resps[i])
	}
	if !batch {
		writeJSON(w, out[0])
		return
	}
	b, err := schema.AppendBatch(nil, out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func (f fakeToolbus) call(ctx context.Context, it schema.Item, timeout time.Duration) schema.Response {
	req := it.Request
	if it.Err != nil {
		return schema.Response{ID: req.ID, Error: it.Err}
	}
	switch req.Method {
	case "echo":
		return schema.Response{ID: req.ID, Result: req.Params}
	case "sleep":
		var p struct{ MS int64 }
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return schema.Response{ID: req.ID, Error: schema.ErrInvalidParams}
		}
		d := time.Duration(p.MS) * time.Millisecond
		late := timeout > 0 && timeout < d && !f.ignoreTimeout
		if late {
			d = timeout
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return schema.Response{ID: req.ID, Error: schema.ErrCanceled}
		}
		if late {
			return schema.Response{ID: req.ID, Error: schema.ErrTimeout}
		}
		return schema.Response{ID: req.ID, Result: json.RawMessage(`{"slept_ms":` + strconv.FormatInt(p.MS, 10) + `}`)}
	}
	return schema.Response{ID: req.ID, Error: schema.ErrMethodNotFound}
}

func writeJSON(w http.ResponseWriter, r schema.Response) {
	b, err := r.AppendJSON(nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// serve starts h on a loopback port for the length of the test and returns
// its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
