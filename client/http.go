package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/toolbus/toolbus/schema"
)

// httpTransport posts each message to the endpoint and reads the answer
// from the response body.
type httpTransport struct {
	url      string
	hc       *http.Client
	header   http.Header
	maxBytes int64
}

var _ transport = (*httpTransport)(nil)

// roundTrip posts m. The body of the answer is read as JSON-RPC whatever
// its status and Content-Type, since a proxy on the way may have set
// either: a 502 whose body is a JSON-RPC error is that error. A body that
// is not JSON-RPC is a transport error naming the status, except an empty
// 2xx body, which answers a message of notifications.
func (t *httpTransport) roundTrip(ctx context.Context, m *message) ([]schema.Response, error) {
	// Whether any byte may have left decides whether the message is safe
	// to send again: a header field written means it may have.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteHeaderField: func(string, []string) { wrote.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, t.url, bytes.NewReader(m.body))
	if err != nil {
		return nil, &TransportError{Op: "post", URL: t.url, Err: err}
	}
	for name, values := range t.header {
		req.Header[name] = append([]string(nil), values...)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if m.timeout > 0 {
		req.Header.Set(schema.HeaderTimeout, m.timeout.String())
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &TransportError{Op: "post", URL: t.url, Retryable: !wrote.Load(), Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, t.maxBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &TransportError{Op: "read", URL: t.url, StatusCode: resp.StatusCode, Err: err}
	}
	if int64(len(data)) > t.maxBytes {
		return nil, &TransportError{Op: "read", URL: t.url, StatusCode: resp.StatusCode,
			Err: fmt.Errorf("answer is larger than %d bytes", t.maxBytes)}
	}
	rs, err := decodeAnswer(data)
	if err == nil {
		return rs, nil
	}
	if resp.StatusCode/100 == 2 && len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	return nil, &TransportError{Op: "post", URL: t.url, StatusCode: resp.StatusCode,
		ContentType: resp.Header.Get("Content-Type"), Err: err}
}

func (t *httpTransport) close() error { return nil }
