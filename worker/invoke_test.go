package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

func TestInvoke(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{}, worker.WithMaxResultBytes(64))
	handlers := map[string]worker.HandlerFunc{
		"echo": func(ctx context.Context, req *worker.Request) (any, error) { return req.Params, nil },
		"fail": func(ctx context.Context, req *worker.Request) (any, error) { return nil, errors.New("boom") },
		"coded": func(ctx context.Context, req *worker.Request) (any, error) {
			return nil, schema.NewError(2001, "no funds", nil)
		},
		"panic": func(ctx context.Context, req *worker.Request) (any, error) { panic("bad") },
		"big":   func(ctx context.Context, req *worker.Request) (any, error) { return string(make([]byte, 100)), nil },
		"who": func(ctx context.Context, req *worker.Request) (any, error) {
			return req.Caller + " " + string(req.ID), nil
		},
		"math.*": func(ctx context.Context, req *worker.Request) (any, error) {
			return req.Method, nil
		},
		"canceled": func(ctx context.Context, req *worker.Request) (any, error) { return nil, context.Canceled },
	}
	for p, h := range handlers {
		if err := c.rt.Handle(p, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, method, params, result string
		code                         int
	}{
		{name: "result", method: "echo", params: `{"a":1}`, result: `{"a":1}`},
		{name: "tool error", method: "fail", code: schema.CodeToolError},
		{name: "own code", method: "coded", code: 2001},
		{name: "panic", method: "panic", code: schema.CodeInternal},
		{name: "result limit", method: "big", code: schema.CodeLimitExceeded},
		{name: "caller and id", method: "who", result: `"alice \"job-1\""`},
		{name: "pattern", method: "math.add", result: `"math.add"`},
		{name: "canceled", method: "canceled", code: schema.CodeCanceled},
		{name: "unknown", method: "nobody", code: schema.CodeMethodNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := schema.Call{Request: schema.Request{ID: json.RawMessage(`"job-1"`), Method: tc.method, Params: json.RawMessage(tc.params)}, Caller: "alice"}
			if tc.params == "" {
				call.Params = nil
			}
			res, rpcErr := c.rt.Invoke(context.Background(), call, nil)
			if tc.code != 0 {
				if rpcErr == nil || rpcErr.Code != tc.code || res != nil {
					t.Fatalf("Invoke(%s) = %s, %v; want code %d", tc.method, res, rpcErr, tc.code)
				}
				return
			}
			if rpcErr != nil || string(res) != tc.result {
				t.Fatalf("Invoke(%s) = %s, %v; want %s", tc.method, res, rpcErr, tc.result)
			}
		})
	}
}

func TestInvokeProgress(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	err := c.rt.HandleFunc("build", func(ctx context.Context, req *worker.Request) (any, error) {
		worker.Progress(ctx, -5, "start")
		worker.Progress(ctx, 150, string(make([]byte, 2000)))
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	type report struct {
		percent float64
		n       int
	}
	var got []report
	_, rpcErr := c.rt.Invoke(context.Background(), schema.Call{Request: schema.Request{Method: "build"}},
		func(p float64, m string) { got = append(got, report{p, len(m)}) })
	if rpcErr != nil {
		t.Fatal(rpcErr)
	}
	want := []report{{0, 5}, {100, worker.MaxProgressMessageBytes}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("progress reports = %v, want %v", got, want)
	}
	// Without a progress function, and over the bus, Progress does nothing.
	worker.Progress(context.Background(), 50, "ignored")
}

func TestRetryable(t *testing.T) {
	c := newCluster(t, bus.EmbeddedConfig{})
	ok := func(ctx context.Context, req *worker.Request) (any, error) { return nil, nil }
	if err := c.rt.HandleFunc("safe.*", ok, worker.RetrySafe()); err != nil {
		t.Fatal(err)
	}
	if err := c.rt.HandleFunc("unsafe", ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		want   bool
	}{{"safe.read", true}, {"unsafe", false}, {"unknown", false}} {
		if got := c.rt.RetrySafe(tc.method); got != tc.want {
			t.Errorf("RetrySafe(%q) = %v, want %v", tc.method, got, tc.want)
		}
	}
}
