package demo_test

import (
	"context"
	"fmt"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/demo"
)

func ExampleRegister() {
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
	if err := demo.Register(rt); err != nil {
		panic(err)
	}
	if err := rt.Start(); err != nil {
		panic(err)
	}
	defer rt.Shutdown(context.Background())

	subjects, _ := bus.NewSubjects(bus.DefaultPrefix)
	for _, c := range []struct{ method, params string }{
		{"subtract", `[42, 23]`},
		{"subtract", `{"subtrahend": 23, "minuend": 42}`},
		{"sum", `[1, 2, 4]`},
		{"sleep", `{"ms": 5}`},
	} {
		subject, _ := subjects.Call(c.method)
		msg, _ := bus.CallMsg(subject, &schema.CallEnvelope{ID: []byte("1"), Method: c.method, Params: []byte(c.params)},
			time.Now().Add(5*time.Second), "")
		resp, err := nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			panic(err)
		}
		reply, err := bus.ReadReply(resp)
		if err != nil {
			panic(err)
		}
		fmt.Println(c.method, c.params, "→", string(reply.Result))
	}
	// Output:
	// subtract [42, 23] → 19
	// subtract {"subtrahend": 23, "minuend": 42} → 19
	// sum [1, 2, 4] → 7
	// sleep {"ms": 5} → {"slept_ms":5}
}
