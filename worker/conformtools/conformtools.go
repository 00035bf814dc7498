package conformtools

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// CodeFail is the business error code conform.fail answers with.
const CodeFail = 2001

// Register adds the conformance toolset to rt.
func Register(rt *worker.Runtime) error {
	tools := []struct {
		name string
		h    worker.Handler
		opts []worker.HandleOption
	}{
		{"conform.echo", worker.HandlerFunc(echo), nil},
		{"conform.sleep", worker.Typed(sleep), nil},
		{"conform.serial", worker.Typed(sleep), []worker.HandleOption{worker.Concurrency(1)}},
		{"conform.fail", worker.HandlerFunc(fail), nil},
		{"conform.panic", worker.HandlerFunc(crash), nil},
		{"conform.progress", worker.HandlerFunc(progress), nil},
		{"conform.ask", worker.HandlerFunc(ask), []worker.HandleOption{worker.Asks()}},
	}
	for _, t := range tools {
		opts := append([]worker.HandleOption{worker.Describe(schema.Descriptor{
			Description: "part of the conformance toolset of toolbus conform"})}, t.opts...)
		if err := rt.Handle(t.name, t.h, opts...); err != nil {
			return err
		}
	}
	return nil
}

// echoResult is what conform.echo answers: the members of the call
// envelope a handler sees, as it received them.
type echoResult struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Caller string          `json:"caller,omitempty"`
}

func echo(_ context.Context, req *worker.Request) (any, error) {
	// A nil RawMessage marshals as null: a notification's id, absent
	// params.
	return echoResult{ID: req.ID, Method: req.Method, Params: req.Params, Caller: req.Caller}, nil
}

type sleepParams struct {
	MS int64 `json:"ms"`
}

type sleepResult struct {
	SleptMS int64 `json:"slept_ms"`
}

// sleep waits p.MS milliseconds, or until the call's context ends (its
// deadline, a cancel message, the runtime giving up), which the runtime
// answers -32001 or -32004.
func sleep(ctx context.Context, p sleepParams) (sleepResult, error) {
	if p.MS < 0 {
		return sleepResult{}, worker.InvalidParams("/ms", "must not be negative")
	}
	t := time.NewTimer(time.Duration(p.MS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return sleepResult{SleptMS: p.MS}, nil
	case <-ctx.Done():
		return sleepResult{}, ctx.Err()
	}
}

func fail(context.Context, *worker.Request) (any, error) {
	return nil, schema.NewError(CodeFail, "conform.fail failed, as it always does", map[string]any{"conform": "fail"})
}

func crash(context.Context, *worker.Request) (any, error) {
	panic("conform.panic crashes its handler, as it always does")
}

func progress(ctx context.Context, _ *worker.Request) (any, error) {
	worker.Progress(ctx, 50, "halfway")
	return map[string]bool{"done": true}, nil
}

// askSchema is the schema of conform.ask's question.
var askSchema = json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)

// askResult is what conform.ask answers: the action of the answer, and its
// content (null unless accepted).
type askResult struct {
	Action  schema.AskAction `json:"action"`
	Content json.RawMessage  `json:"content"`
}

// ask asks its caller "conform asks" and answers what came back. In a
// call that cannot be asked, it fails at once with worker.ErrCannotAsk.
func ask(ctx context.Context, _ *worker.Request) (any, error) {
	content, err := worker.Ask(ctx, worker.Question{Message: "conform asks", Schema: askSchema})
	switch {
	case errors.Is(err, worker.ErrDeclined):
		return askResult{Action: schema.AskDecline}, nil
	case errors.Is(err, worker.ErrAskCanceled):
		return askResult{Action: schema.AskCancel}, nil
	case err != nil:
		return nil, err
	}
	return askResult{Action: schema.AskAccept, Content: content}, nil
}
