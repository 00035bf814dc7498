package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Errors a check of an answer can return, matched with [errors.Is]. A
// JSON-RPC error where a result was expected is returned as the
// [*schema.Error] itself, wrapped with its id, so [errors.As] recovers its
// code.
var (
	// ErrStatus means the HTTP status was not 200.
	ErrStatus = errors.New("bench: HTTP status is not 200")
	// ErrNotJSONRPC means the body is not the JSON-RPC answer asked for (a
	// single response for a single request, an array for a batch).
	ErrNotJSONRPC = errors.New("bench: body is not the JSON-RPC answer expected")
	// ErrMissingID means an id that was sent got no response.
	ErrMissingID = errors.New("bench: id not answered")
	// ErrDuplicateID means an id got more than one response.
	ErrDuplicateID = errors.New("bench: id answered more than once")
	// ErrUnknownID means a response carries an id that was not sent.
	ErrUnknownID = errors.New("bench: response for an id not sent")
	// ErrWrongAnswer means a response is not the one the call should get:
	// a wrong result, a missing result, or the wrong error code.
	ErrWrongAnswer = errors.New("bench: wrong answer")
)

// maxAnswer bounds how much of an answer is read, so that a runaway server
// cannot exhaust memory; a longer answer fails its check as truncated JSON.
const maxAnswer = 64 << 20

// expectation is what one id of a request must be answered with.
type expectation struct {
	id    json.RawMessage
	check func(schema.Response) error
}

// verify checks that body answers every id of want exactly once, each with
// what its check accepts. Ids are compared byte for byte, as toolbus echoes
// them unchanged.
func verify(body []byte, batch bool, want []expectation) error {
	var rs []schema.Response
	if batch {
		if err := json.Unmarshal(body, &rs); err != nil {
			return fmt.Errorf("%w: %w", ErrNotJSONRPC, err)
		}
	} else {
		var r schema.Response
		if err := json.Unmarshal(body, &r); err != nil {
			return fmt.Errorf("%w: %w", ErrNotJSONRPC, err)
		}
		rs = []schema.Response{r}
	}
	seen := make([]bool, len(want))
	for _, r := range rs {
		i := slices.IndexFunc(want, func(e expectation) bool { return bytes.Equal(e.id, r.ID) })
		if i < 0 {
			return fmt.Errorf("%w: id %s", ErrUnknownID, idText(r.ID))
		}
		if seen[i] {
			return fmt.Errorf("%w: id %s", ErrDuplicateID, idText(r.ID))
		}
		seen[i] = true
		if err := want[i].check(r); err != nil {
			return fmt.Errorf("id %s: %w", idText(r.ID), err)
		}
	}
	missing := 0
	for _, ok := range seen {
		if !ok {
			missing++
		}
	}
	if missing > 0 {
		first := want[slices.Index(seen, false)].id
		return fmt.Errorf("%w: %d of %d ids, first %s", ErrMissingID, missing, len(want), idText(first))
	}
	return nil
}

func idText(id json.RawMessage) string {
	if len(id) == 0 {
		return "null"
	}
	return string(id)
}

// anyResult accepts any result and rejects any error.
func anyResult(r schema.Response) error {
	if r.Error != nil {
		return r.Error
	}
	if len(r.Result) == 0 {
		return fmt.Errorf("%w: neither result nor error", ErrWrongAnswer)
	}
	return nil
}

// resultEqual accepts a result that decodes to the same JSON value as want.
func resultEqual(want json.RawMessage) func(schema.Response) error {
	return func(r schema.Response) error {
		if err := anyResult(r); err != nil {
			return err
		}
		if !jsonEqual(r.Result, want) {
			return fmt.Errorf("%w: result %s, want %s", ErrWrongAnswer, r.Result, want)
		}
		return nil
	}
}

// errorCode accepts an error with the given code and rejects a result.
func errorCode(code int) func(schema.Response) error {
	return func(r schema.Response) error {
		switch {
		case r.Error == nil:
			return fmt.Errorf("%w: result %s, want error %d", ErrWrongAnswer, r.Result, code)
		case r.Error.Code != code:
			return fmt.Errorf("%w: want error %d, got %w", ErrWrongAnswer, code, r.Error)
		}
		return nil
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// newClient returns a client that keeps up to conns connections alive to one
// host and never goes through a proxy: the bench measures toolbus, not the
// network path. The caller closes its idle connections when done.
func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// post sends body to url and reads the answer into buf. A status other than
// 200 is an error wrapping [ErrStatus].
func post(ctx context.Context, c *http.Client, url string, header http.Header, body []byte, buf *bytes.Buffer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxAnswer)); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: %s", ErrStatus, resp.Status)
	}
	return nil
}

// requestHeader returns h with the JSON content type the ingress requires.
func requestHeader(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = make(http.Header)
	}
	out.Set("Content-Type", "application/json")
	return out
}

// checkURL accepts an absolute http or https URL.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("URL %q is not an absolute http or https URL", s)
	}
	return nil
}
