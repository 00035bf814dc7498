package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolbus/toolbus/schema"
)

func ExampleParse() {
	body := []byte(`[
		{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
		{"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
		{"foo": "boo"},
		{"jsonrpc": "2.0", "method": "get_data", "id": 12345678901234567890}
	]`)
	items, batch, err := schema.Parse(body, schema.Limits{MaxBatchItems: 1000, MaxDepth: 64})
	if err != nil {
		fmt.Println("answer the whole body with", err)
		return
	}
	fmt.Println("batch:", batch)
	for _, it := range items {
		switch {
		case it.Err != nil:
			fmt.Printf("invalid, id %s: %d\n", orNull(it.Request.ID), it.Err.Code)
		case it.Request.IsNotification():
			fmt.Printf("notification %s %s\n", it.Request.Method, it.Request.Params)
		default:
			fmt.Printf("call %s id %s params %s\n", it.Request.Method, it.Request.ID, it.Request.Params)
		}
	}
	// Output:
	// batch: true
	// call sum id "1" params [1,2,4]
	// notification notify_hello [7]
	// invalid, id null: -32600
	// call get_data id 12345678901234567890 params
}

func orNull(id json.RawMessage) string {
	if id == nil {
		return "null"
	}
	return string(id)
}

func ExampleParse_emptyBatch() {
	_, batch, err := schema.Parse([]byte(`[]`), schema.Limits{})
	resp, _ := json.Marshal(schema.Response{Error: err})
	fmt.Println(batch, string(resp))
	// Output:
	// true {"jsonrpc":"2.0","error":{"code":-32600,"message":"invalid request: empty batch"},"id":null}
}

func ExampleAppendBatch() {
	out, err := schema.AppendBatch(nil, []schema.Response{
		{ID: json.RawMessage(`"1"`), Result: json.RawMessage(`7`)},
		{ID: json.RawMessage(`2`), Error: schema.NewError(schema.CodeTimeout, "timed out", map[string]any{"retryable": true})},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output:
	// [{"jsonrpc":"2.0","result":7,"id":"1"},{"jsonrpc":"2.0","error":{"code":-32001,"message":"timed out","data":{"retryable":true}},"id":2}]
}

func ExampleResponse_MarshalJSON() {
	b, _ := json.Marshal(schema.Response{ID: json.RawMessage(`"101"`), Result: json.RawMessage(`{"difference":19}`)})
	fmt.Println(string(b))
	// Output:
	// {"jsonrpc":"2.0","result":{"difference":19},"id":"101"}
}

func ExampleNewError() {
	err := schema.NewError(2001, "insufficient funds", map[string]any{"balance": 12})
	wrapped := fmt.Errorf("charge card: %w", err)

	e := schema.ErrorFrom(wrapped)
	fmt.Println(e.Code, e.Message, string(e.Data))
	fmt.Println(errors.Is(wrapped, &schema.Error{Code: 2001}))
	// Output:
	// 2001 insufficient funds {"balance":12}
	// true
}

func ExampleErrorFrom() {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()

	for _, err := range []error{
		fmt.Errorf("demo.sleep: %w", ctx.Err()),
		context.Canceled,
		errors.New("disk full"),
		fmt.Errorf("call: %w", schema.ErrForbidden),
	} {
		e := schema.ErrorFrom(err)
		fmt.Printf("%d timeout=%v data=%s\n", e.Code, errors.Is(e, schema.ErrTimeout), e.Data)
	}
	// Output:
	// -32001 timeout=true data={"retryable":true}
	// -32004 timeout=false data=
	// -32603 timeout=false data=
	// -32005 timeout=false data=
}

func ExampleLimitError() {
	e := schema.LimitError("max_batch_items", 1000, 1500)
	fmt.Println(e.Message)
	fmt.Println(string(e.Data))
	// Output:
	// limit exceeded: max_batch_items is 1000, got 1500; split the batch, or raise the limit with --max-batch-items
	// {"got":1500,"limit":"max_batch_items","max":1000}
}

func ExampleValidateMethod() {
	for _, m := range []string{"math.add", "files/read:v2", "math.*", "a..b", ""} {
		if err := schema.ValidateMethod(m); err != nil {
			fmt.Printf("%q: %v\n", m, err)
			continue
		}
		fmt.Printf("%q: ok\n", m)
	}
	// Output:
	// "math.add": ok
	// "files/read:v2": ok
	// "math.*": jsonrpc error -32601: method not found: invalid method name: character not allowed: '*'
	// "a..b": jsonrpc error -32601: method not found: invalid method name: empty token
	// "": jsonrpc error -32601: method not found: invalid method name: empty
}

func ExampleMarshalCall() {
	b, _ := schema.MarshalCall(&schema.CallEnvelope{ID: []byte(`1`), Method: "echo", Params: []byte(`[]`)})
	fmt.Printf("% x\n", b)
	c, _ := schema.UnmarshalCall(b)
	fmt.Printf("v=%d id=%s method=%s params=%s\n", c.Version, c.ID, c.Method, c.Params)
	// Output:
	// 84 a1 76 01 a2 69 64 c4 01 31 a6 6d 65 74 68 6f 64 a4 65 63 68 6f a6 70 61 72 61 6d 73 c4 02 5b 5d
	// v=1 id=1 method=echo params=[]
}
