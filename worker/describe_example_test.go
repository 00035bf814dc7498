package worker_test

import (
	"context"
	"fmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// A tool written with Typed advertises the JSON Schemas of its params and
// result, derived from the Go types; Describe adds what the types cannot
// say. The runtime announces these descriptors to the ingress's discovery.
func ExampleDescribe() {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Shutdown()
	nc, err := e.Connect()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	rt, err := worker.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	type addParams struct {
		A int `json:"a" jsonschema:"the first addend"`
		B int `json:"b,omitempty"`
	}
	err = rt.Handle("math.add", worker.Typed(func(_ context.Context, p addParams) (int, error) {
		return p.A + p.B, nil
	}), worker.Describe(schema.Descriptor{Description: "Adds two integers.", RetrySafe: true}))
	if err != nil {
		fmt.Println(err)
		return
	}
	d := rt.Descriptors()[0]
	fmt.Println(d.Name, "-", d.Description, "- idempotent:", d.RetrySafe)
	fmt.Println("params:", string(d.Params))
	fmt.Println("result:", string(d.Result))
	// Output:
	// math.add - Adds two integers. - idempotent: true
	// params: {"additionalProperties":false,"properties":{"a":{"description":"the first addend","type":"integer"},"b":{"type":"integer"}},"required":["a"],"type":"object"}
	// result: {"type":"integer"}
}
