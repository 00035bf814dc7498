package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

func ExampleChain() {
	trace := func(name string) worker.Middleware {
		return func(next worker.Handler) worker.Handler {
			return worker.HandlerFunc(func(ctx context.Context, req *worker.Request) (any, error) {
				fmt.Println("enter", name)
				defer fmt.Println("leave", name)
				return next.ServeCall(ctx, req)
			})
		}
	}
	h := worker.Chain(trace("outer"), trace("middle"), trace("inner"))(
		worker.HandlerFunc(func(context.Context, *worker.Request) (any, error) {
			fmt.Println("handler")
			return nil, nil
		}))
	h.ServeCall(context.Background(), &worker.Request{Method: "echo"})
	// Output:
	// enter outer
	// enter middle
	// enter inner
	// handler
	// leave inner
	// leave middle
	// leave outer
}

// A tool written with Typed gets its params decoded into a struct; params
// that do not fit are answered -32602 naming the member as a JSON pointer,
// a member without omitempty is required, and a tool's own error code
// passes through unchanged.
func ExampleTyped() {
	type transferParams struct {
		From   string `json:"from"`
		To     string `json:"to"`
		Amount int64  `json:"amount"`
		Memo   string `json:"memo,omitempty"` // may be left out
	}
	type transferResult struct {
		Receipt string `json:"receipt"`
	}
	transfer := worker.Typed(func(_ context.Context, p transferParams) (transferResult, error) {
		if p.Amount <= 0 {
			return transferResult{}, worker.InvalidParams("amount", "must be positive")
		}
		if p.Amount > 100 {
			return transferResult{}, schema.NewError(2001, "insufficient funds", map[string]int64{"balance": 100})
		}
		return transferResult{Receipt: fmt.Sprintf("%s pays %s %d", p.From, p.To, p.Amount)}, nil
	})

	for _, params := range []string{
		`{"from":"alice","to":"bob","amount":30}`,
		`{"from":"alice","to":"bob","amount":"30"}`,
		`{"from":"alice","to":"bob"}`,
		`{"from":"alice","to":"bob","amount":500}`,
	} {
		result, err := transfer.ServeCall(context.Background(), &worker.Request{Method: "bank.transfer", Params: json.RawMessage(params)})
		var rpcErr *schema.Error
		if errors.As(err, &rpcErr) {
			fmt.Println("error", rpcErr.Code, string(rpcErr.Data))
			continue
		}
		out, _ := json.Marshal(result)
		fmt.Println("result", string(out))
	}
	// Output:
	// result {"receipt":"alice pays bob 30"}
	// error -32602 {"field":"/amount","reason":"expected int64, got string"}
	// error -32602 {"field":"/amount","reason":"required member is missing"}
	// error 2001 {"balance":100}
}

// A runtime serves tools over NATS; here an embedded server stands in for
// the cluster and the call is sent the way the aggregator sends it.
func ExampleRuntime() {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		panic(err)
	}
	defer e.Shutdown()
	nc, err := e.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	rt, err := worker.New(nc)
	if err != nil {
		panic(err)
	}
	type addParams struct {
		A, B int
	}
	err = rt.Handle("math.add", worker.Typed(func(_ context.Context, p addParams) (int, error) {
		return p.A + p.B, nil
	}))
	if err != nil {
		panic(err)
	}
	if err := rt.Start(); err != nil {
		panic(err)
	}
	defer rt.Shutdown(context.Background())

	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	subject, _ := subjects.Call("math.add")
	msg, _ := bus.CallMsg(subject, &schema.CallEnvelope{ID: []byte("1"), Method: "math.add", Params: []byte(`{"A":2,"B":3}`)},
		time.Now().Add(5*time.Second), "")
	resp, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		panic(err)
	}
	reply, err := bus.ReadReply(resp)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(reply.Result))
	// Output: 5
}

// A tool asks its caller with Ask and gets the content of the answer, a
// JSON object that fits the schema of the question. Only a job's call
// can be asked: run any other way (here, straight from a test), Ask fails
// at once with ErrCannotAsk, which the runtime answers with a -32000 that
// says to run the tool as a job.
func ExampleAsk() {
	purge := worker.HandlerFunc(func(ctx context.Context, _ *worker.Request) (any, error) {
		content, err := worker.Ask(ctx, worker.Question{
			Message: "delete every file of the project?",
			Schema:  json.RawMessage(`{"type":"object","properties":{"sure":{"type":"boolean"}},"required":["sure"]}`),
		})
		switch {
		case errors.Is(err, worker.ErrDeclined):
			return "kept everything", nil
		case err != nil:
			return nil, err
		}
		var answer struct {
			Sure bool `json:"sure"`
		}
		if err := json.Unmarshal(content, &answer); err != nil {
			return nil, err
		}
		if !answer.Sure {
			return "kept everything", nil
		}
		return "deleted", nil
	})
	_, err := purge.ServeCall(context.Background(), &worker.Request{Method: "purge"})
	fmt.Println(errors.Is(err, worker.ErrCannotAsk))
	// Output: true
}
