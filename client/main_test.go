package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient makes a client that is closed when the test ends.
func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, opts...)
	if err != nil {
		t.Fatalf("New(%q) = %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// request is one request a fake server received.
type request struct {
	ctx    context.Context // ends when the client goes away
	header http.Header
	items  []schema.Item
	batch  bool
}

// answerFunc answers the n-th request (from 1) a fake server receives by
// writing to w.
type answerFunc func(w http.ResponseWriter, req request, n int)

// fakeServer is an HTTP server speaking just enough JSON-RPC for a test,
// which records what it receives.
type fakeServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []request
}

func startFake(t *testing.T, answer answerFunc) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		items, batch, perr := schema.Parse(body, schema.Limits{})
		if perr != nil {
			writeAnswer(w, http.StatusOK, "application/json", false, schema.Response{Error: perr})
			return
		}
		req := request{ctx: r.Context(), header: r.Header.Clone(), items: items, batch: batch}
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		n := len(f.reqs)
		f.mu.Unlock()
		answer(w, req, n)
	}))
	t.Cleanup(f.Close)
	return f
}

// requests returns what the server has received so far.
func (f *fakeServer) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// echoAll answers every call of a request with its params, in order.
func echoAll(req request) []schema.Response {
	var rs []schema.Response
	for _, it := range req.items {
		if !it.Request.IsNotification() {
			rs = append(rs, result(it.Request.ID, it.Request.Params))
		}
	}
	return rs
}

func result(id json.RawMessage, v json.RawMessage) schema.Response {
	if v == nil {
		v = json.RawMessage("null")
	}
	return schema.Response{ID: id, Result: v}
}

func failure(id json.RawMessage, code int, data string) schema.Response {
	e := &schema.Error{Code: code, Message: "failed"}
	if data != "" {
		e.Data = json.RawMessage(data)
	}
	return schema.Response{ID: id, Error: e}
}

// writeAnswer writes responses as a batch or a single object.
func writeAnswer(w http.ResponseWriter, status int, contentType string, batch bool, rs ...schema.Response) {
	var body []byte
	if batch {
		body, _ = schema.AppendBatch(nil, rs)
	} else if len(rs) > 0 {
		body, _ = rs[0].MarshalJSON()
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	w.Write(body)
}
