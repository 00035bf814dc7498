package demo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// echo answers the params exactly as they came; no params answer null.
func echo(_ context.Context, req *worker.Request) (any, error) {
	return req.Params, nil
}

// sleepParams requires ms; a pointer tells {"ms": null} from {"ms": 0}.
type sleepParams struct {
	MS *int64 `json:"ms"`
}

type sleepResult struct {
	SleptMS int64 `json:"slept_ms"`
}

func sleep(ctx context.Context, p sleepParams) (sleepResult, error) {
	switch {
	case p.MS == nil:
		return sleepResult{}, worker.InvalidParams("/ms", "must be a number of milliseconds, not null")
	case *p.MS < 0:
		return sleepResult{}, worker.InvalidParams("/ms", "must not be negative")
	case *p.MS > MaxSleep.Milliseconds():
		return sleepResult{}, worker.InvalidParams("/ms", fmt.Sprintf("must be at most %d", MaxSleep.Milliseconds()))
	}
	// Progress is reported in tenths when the call runs as a job.
	total := time.Duration(*p.MS) * time.Millisecond
	start := time.Now()
	t := time.NewTimer(total)
	defer t.Stop()
	tick := time.NewTicker(max(total/10, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-t.C:
			worker.Progress(ctx, 100, "slept")
			return sleepResult{SleptMS: *p.MS}, nil
		case <-tick.C:
			done := time.Since(start)
			worker.Progress(ctx, min(99, 100*float64(done)/float64(total)), fmt.Sprintf("slept %dms of %dms", done.Milliseconds(), *p.MS))
		case <-ctx.Done():
			return sleepResult{}, ctx.Err()
		}
	}
}

// failParams are all optional: fail without params is a tool error.
type failParams struct {
	Code    *int            `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// fail answers the error its params describe; without a code it is a tool
// error.
func fail(_ context.Context, p failParams) (any, error) {
	e := &schema.Error{Code: schema.CodeToolError, Message: p.Message, Data: p.Data}
	if p.Code != nil {
		e.Code = *p.Code
	}
	if e.Message == "" {
		e.Message = "requested failure"
	}
	return nil, e
}

// sha256Params require data; rounds may be left out for one round.
type sha256Params struct {
	Data   string `json:"data"`
	Rounds int64  `json:"rounds,omitempty"`
}

type sha256Result struct {
	Digest string `json:"digest"`
	Rounds int64  `json:"rounds"`
}

// ctxCheckRounds is how many rounds hashRounds runs between looks at its
// context: often enough to stop within a millisecond or so.
const ctxCheckRounds = 1 << 10

// hashRounds hashes data, then the digest again, rounds times in all (once
// when rounds is absent or zero).
func hashRounds(ctx context.Context, p sha256Params) (sha256Result, error) {
	switch {
	case p.Rounds < 0:
		return sha256Result{}, worker.InvalidParams("/rounds", "must not be negative")
	case p.Rounds > MaxRounds:
		return sha256Result{}, worker.InvalidParams("/rounds", fmt.Sprintf("must be at most %d (max_rounds)", MaxRounds))
	case p.Rounds == 0:
		p.Rounds = 1
	}
	sum := sha256.Sum256([]byte(p.Data))
	for i := int64(1); i < p.Rounds; i++ {
		if i%ctxCheckRounds == 0 {
			if err := ctx.Err(); err != nil {
				return sha256Result{}, err
			}
		}
		sum = sha256.Sum256(sum[:])
	}
	return sha256Result{Digest: hex.EncodeToString(sum[:]), Rounds: p.Rounds}, nil
}

// confirmParams require action, what the caller is asked to confirm.
type confirmParams struct {
	Action string `json:"action"`
}

// confirmResult says what the caller answered; Declined is set when the
// caller declined the question itself.
type confirmResult struct {
	Action    string `json:"action"`
	Confirmed bool   `json:"confirmed"`
	Declined  bool   `json:"declined,omitempty"`
}

// confirmSchema is the schema of confirm's question.
var confirmSchema = json.RawMessage(`{"type":"object","properties":{"confirmed":{"type":"boolean"}},"required":["confirmed"]}`)

// confirm asks its caller whether to proceed with p.Action. Asked in a
// call that cannot be asked (a synchronous one), it fails at once: the
// runtime answers [worker.ErrCannotAsk] -32000 with data.reason
// "cannot_ask" and a message that says to submit it as a job.
func confirm(ctx context.Context, p confirmParams) (confirmResult, error) {
	switch {
	case p.Action == "":
		return confirmResult{}, worker.InvalidParams("/action", "must say what to confirm")
	case len(p.Action) > MaxActionBytes:
		return confirmResult{}, worker.InvalidParams("/action", fmt.Sprintf("must be at most %d bytes", MaxActionBytes))
	}
	content, err := worker.Ask(ctx, worker.Question{Message: "proceed with " + p.Action + "?", Schema: confirmSchema})
	switch {
	case errors.Is(err, worker.ErrDeclined):
		return confirmResult{Action: p.Action, Declined: true}, nil
	case err != nil:
		return confirmResult{}, err
	}
	var answer struct {
		Confirmed bool `json:"confirmed"`
	}
	if err := json.Unmarshal(content, &answer); err != nil {
		return confirmResult{}, fmt.Errorf("read the answer: %w", err)
	}
	return confirmResult{Action: p.Action, Confirmed: answer.Confirmed}, nil
}
