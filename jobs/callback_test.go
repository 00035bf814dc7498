package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/egress/egresstest"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// testNet is the callbacks' stand-in for DNS and the network.
type testNet struct{ *egresstest.Net }

func newTestNet(t *testing.T, names map[string][]string) *testNet {
	return &testNet{egresstest.NewNet(t, names)}
}

func (n *testNet) option() jobs.Option { return jobs.WithCallbackNet(n, n.Dial) }

func TestCallback(t *testing.T) {
	secret := []byte("0123456789abcdef-secret")
	var hits atomic.Int32
	type delivery struct {
		body   []byte
		header http.Header
	}
	got := make(chan delivery, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if hits.Add(1) <= 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		got <- delivery{body, r.Header.Clone()}
	}))
	defer srv.Close()

	e := startServer(t, "")
	nc, js := connect(t, e)
	// The receiver is on loopback: the allowlist admits it, and it alone.
	s := newService(t, js, jobs.WithCallbackSecret(secret), jobs.WithCallbackRetry(5, 10*time.Millisecond, 50*time.Millisecond),
		jobs.WithCallbackAllow(srv.Listener.Addr().String()), newTestNet(t, nil).option())
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	startRunner(t, js, newRuntime(t, nc, echoTools))
	res, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, fmt.Sprintf(`{"method":"echo","params":{"a":1},"notify_url":%q}`, srv.URL+"/done"))
	if rpcErr != nil {
		t.Fatalf("submit: %v", rpcErr)
	}
	var sub schema.JobSubmitResult
	json.Unmarshal(res, &sub)
	var d delivery
	select {
	case d = <-got:
	case <-time.After(20 * time.Second):
		t.Fatalf("no callback accepted after %d attempts", hits.Load())
	}
	if err := jobs.Verify(secret, d.header, d.body, time.Now(), jobs.ReplayWindow); err != nil {
		t.Errorf("Verify = %v, want nil", err)
	}
	ts, err := strconv.ParseInt(d.header.Get(schema.HeaderTimestamp), 10, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", schema.HeaderTimestamp, d.header.Get(schema.HeaderTimestamp), err)
	}
	if sig, want := d.header.Get(schema.HeaderSignature), jobs.Sign(secret, ts, d.body); sig != want {
		t.Errorf("signature = %q, want %q", sig, want)
	}
	var posted schema.JobRecord
	if err := json.Unmarshal(d.body, &posted); err != nil || posted.ID != sub.ID || d.header.Get(schema.HeaderJobID) != sub.ID ||
		posted.State != schema.JobSucceeded || string(posted.Result) != `{"a":1}` {
		t.Errorf("callback body = %s (header id %s), want the final record of %s", d.body, d.header.Get(schema.HeaderJobID), sub.ID)
	}
	r := waitFor(t, s, sub.ID, "callback delivered", func(r *schema.JobRecord) bool {
		return r.Callback != nil && r.Callback.State == schema.JobCallbackDelivered
	})
	if r.Callback.Attempts != 3 || len(r.Callback.Failures) != 2 {
		t.Fatalf("callback = %+v, want 3 attempts and 2 recorded failures", r.Callback)
	}
	for _, f := range r.Callback.Failures {
		if f.Error != "status 503" {
			t.Errorf("failure = %q, want %q", f.Error, "status 503")
		}
	}
	if string(r.Result) != `{"a":1}` {
		t.Errorf("result after the callback = %s", r.Result)
	}
}

func ExampleVerify() {
	secret := []byte("0123456789abcdef-secret")
	body := []byte(`{"id":"01jd7v4k1m8r3c5q9x2w6y0z7a","state":"succeeded"}`)
	sent := time.Unix(1_800_000_000, 0)

	// What the callback carries.
	h := http.Header{}
	h.Set(schema.HeaderTimestamp, strconv.FormatInt(sent.Unix(), 10))
	h.Set(schema.HeaderSignature, jobs.Sign(secret, sent.Unix(), body))

	// A receiver checks it on arrival, and a replay later is refused.
	fmt.Println(jobs.Verify(secret, h, body, sent.Add(2*time.Second), jobs.ReplayWindow))
	err := jobs.Verify(secret, h, body, sent.Add(time.Hour), jobs.ReplayWindow)
	fmt.Println(errors.Is(err, jobs.ErrStale))
	// Output:
	// <nil>
	// true
}

func TestNotifyURLRefused(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	n := newTestNet(t, map[string][]string{
		"public.test":    {"203.0.113.10"},
		"inside.test":    {"10.1.2.3"},
		"meta.test":      {"169.254.169.254"},
		"hooks.internal": {"10.9.9.9"},
	})
	s := newService(t, js, jobs.WithCallbackSecret([]byte("0123456789abcdef-secret")), n.option(),
		jobs.WithCallbackAllow("127.0.0.1:9000", "hooks.internal:8443"))
	// namedRange marks a host name refused: its error data names no range.
	const namedRange = "(a name)"
	for _, tc := range []struct {
		name, url string
		kind      string // the range refused; "" when accepted
	}{
		{"public name", "https://public.test/hook", ""},
		{"public address", "http://203.0.113.7/hook", ""},
		{"allowed loopback receiver", "http://127.0.0.1:9000/hook", ""},
		{"allowed name", "https://hooks.internal:8443/hook", ""},
		{"loopback", "http://127.0.0.1:4222/", "loopback"},
		{"loopback on another port", "http://127.0.0.1:9001/", "loopback"},
		{"IPv6 loopback", "http://[::1]:9000/", "loopback"},
		{"IPv4-mapped loopback", "http://[::ffff:127.0.0.1]:4222/", "loopback"},
		{"private", "http://10.0.0.1/", "private"},
		{"IPv6 private", "http://[fd00::1]/", "private"},
		{"link-local metadata", "http://169.254.169.254/latest/meta-data/", "link-local"},
		{"IPv6 link-local", "http://[fe80::1]/", "link-local"},
		{"CGNAT", "http://100.100.100.200/", "CGNAT"},
		{"multicast", "http://224.0.0.1/", "multicast"},
		{"unspecified", "http://0.0.0.0:4222/", "unspecified"},
		{"broadcast", "http://255.255.255.255/", "broadcast"},
		// Of a name the caller learns only the rule: not whether it
		// resolves, nor to which range (namedRange).
		{"name inside", "https://inside.test/hook", namedRange},
		{"name of the metadata address", "http://meta.test/", namedRange},
		{"allowed name on another port", "https://hooks.internal/hook", namedRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, fmt.Sprintf(`{"method":"echo","notify_url":%q}`, tc.url))
			if tc.kind == "" {
				if rpcErr != nil {
					t.Fatalf("submit with %s = %d %s, want a job", tc.url, rpcErr.Code, rpcErr.Message)
				}
				return
			}
			if !isErr(rpcErr, schema.ErrInvalidParams) {
				t.Fatalf("submit with %s = %v, want -32602", tc.url, rpcErr)
			}
			var want any = tc.kind
			if tc.kind == namedRange {
				want = nil
			}
			if d := errorData(t, rpcErr); d["field"] != "/notify_url" || d["range"] != want {
				t.Errorf("error data = %s, want field /notify_url and range %v", rpcErr.Data, want)
			}
			if !strings.Contains(rpcErr.Message, "--callback-allow") {
				t.Errorf("message %q does not name the allowlist flag", rpcErr.Message)
			}
		})
	}
	// A name that does not resolve and one that resolves inside are
	// refused in the same words: the answer is no oracle of the
	// operator's names.
	_, nowhere := rpc(t, s, "", schema.MethodJobsSubmit, `{"method":"echo","notify_url":"http://same.test/"}`)
	_, inside := rpc(t, s, "", schema.MethodJobsSubmit, `{"method":"echo","notify_url":"http://inside.test/"}`)
	if !isErr(nowhere, schema.ErrInvalidParams) || !isErr(inside, schema.ErrInvalidParams) {
		t.Fatalf("submit with a name that does not resolve = %v, with one inside = %v, want -32602 for both", nowhere, inside)
	}
	if got, want := strings.ReplaceAll(nowhere.Message, "same.test", "inside.test"), inside.Message; got != want {
		t.Errorf("refusal of a name that does not resolve = %q, of a name inside = %q, want the same words", got, want)
	}
	if got, want := string(nowhere.Data), strings.ReplaceAll(string(inside.Data), "inside.test", "same.test"); got != want {
		t.Errorf("refusal data of a name that does not resolve = %s, of a name inside = %s, want the same", got, want)
	}
}

func TestCallbackFailureClasses(t *testing.T) {
	nats := egresstest.NATS(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://10.0.0.1/NBANNERSECRET", http.StatusFound)
	}))
	t.Cleanup(srv.Close)

	n := newTestNet(t, map[string][]string{
		"slow.test":   {"203.0.113.50"},
		"rebind.test": {"203.0.113.60", "10.0.0.1"},
	})
	n.Hang("203.0.113.50:80")
	e := startServer(t, "")
	nc, js := connect(t, e)
	s := newService(t, js, jobs.WithCallbackSecret([]byte("0123456789abcdef-secret")), n.option(),
		jobs.WithCallbackAllow("127.0.0.1"), jobs.WithCallbackRetry(1, time.Millisecond, time.Millisecond),
		jobs.WithCallbackTimeout(300*time.Millisecond))
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	startRunner(t, js, newRuntime(t, nc, echoTools))
	// Every class is tested with the sender (internal/webhook); these
	// show that the service's sender has its guard, its timeout and no
	// redirects, and that a job's record holds the class and none of the
	// receiver's words.
	for _, tc := range []struct {
		name, url string
		want      string
	}{
		{"a NATS server's banner", "http://" + nats + "/hook", "protocol"},
		{"redirect, not followed", srv.URL + "/moved", "status 302"},
		{"timeout", "http://slow.test/hook", "timeout"},
		{"name that resolves inside once submitted", "http://rebind.test/hook", "blocked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, rpcErr := rpc(t, s, "", schema.MethodJobsSubmit, fmt.Sprintf(`{"method":"echo","notify_url":%q}`, tc.url))
			if rpcErr != nil {
				t.Fatalf("submit: %d %s", rpcErr.Code, rpcErr.Message)
			}
			var sub schema.JobSubmitResult
			json.Unmarshal(res, &sub)
			r := waitFor(t, s, sub.ID, "callback failed", func(r *schema.JobRecord) bool {
				return r.Callback != nil && r.Callback.State == schema.JobCallbackFailed
			})
			if len(r.Callback.Failures) != 1 || r.Callback.Failures[0].Error != tc.want {
				t.Fatalf("callback = %+v, want one failure %q", r.Callback, tc.want)
			}
			raw, rpcErr := rpc(t, s, "", schema.MethodJobsGet, fmt.Sprintf(`{"id":%q}`, sub.ID))
			if rpcErr != nil {
				t.Fatal(rpcErr)
			}
			for _, leak := range []string{"NBANNERSECRET", "INFO", "upstream", "10.0.0.1", "refused", "dial"} {
				if leak == tc.want {
					continue
				}
				if strings.Contains(string(raw), leak) {
					t.Errorf("rpc.jobs.get = %s, holds %q", raw, leak)
				}
			}
		})
	}
}

// A failure recorded with the receiver's words (as an older ingress wrote
// them) reads "failed" to the caller.
func TestCallbackFailureTextHidden(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js)
	id := submit(t, s, "echo", `{}`)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, "toolbus_jobs")
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, "job."+id)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	rec["callback"] = map[string]any{"state": "failed", "attempts": 2, "failures": []map[string]any{
		{"at": time.Now(), "error": `Post "http://127.0.0.1:4222/": net/http: HTTP/1.x transport connection broken: malformed HTTP response "` + egresstest.Banner + `"`},
		{"at": time.Now(), "error": "status 503"},
	}}
	b, _ := json.Marshal(rec)
	if _, err := kv.Update(ctx, "job."+id, b, entry.Revision()); err != nil {
		t.Fatal(err)
	}
	r, rpcErr := get(t, s, id)
	if rpcErr != nil {
		t.Fatal(rpcErr)
	}
	if f := r.Callback.Failures; len(f) != 2 || f[0].Error != "failed" || f[1].Error != "status 503" {
		t.Errorf("failures = %+v, want failed and status 503", f)
	}
}
