package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
)

func Example() {
	srv := exampleServer()
	defer srv.Close()
	ctx := context.Background()

	c, err := client.New(srv.URL, client.WithRetry(client.RetryPolicy{MaxAttempts: 3}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	var sum int
	if err := c.Call(ctx, "math.add", map[string]int{"a": 1, "b": 2}, &sum, client.Timeout(time.Second)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("math.add:", sum)

	// The server answers this batch in reverse order; each future still
	// gets its own answer.
	b := c.Batch(client.Timeout(time.Second))
	add := b.Add("math.add", map[string]int{"a": 40, "b": 2})
	pay := b.Add("pay", map[string]int{"amount": 100})
	b.Notify("audit.log", map[string]string{"event": "paid"})
	if err := b.Send(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := add.Decode(&sum); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("batch math.add:", sum)
	var e *schema.Error
	if errors.As(pay.Err(), &e) {
		fmt.Printf("batch pay: code %d, %s, data %s\n", e.Code, e.Message, e.Data)
	}

	err = c.Call(ctx, "no.such.tool", nil, nil)
	fmt.Println("no.such.tool is method not found:", errors.Is(err, schema.ErrMethodNotFound))
	// Output:
	// math.add: 3
	// batch math.add: 42
	// batch pay: code 2001, insufficient funds, data {"balance":3}
	// no.such.tool is method not found: true
}

// exampleServer stands in for a toolbus ingress: math.add adds, pay fails
// with a business code, and a batch is answered in reverse order.
func exampleServer() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		items, batch, perr := schema.Parse(body, schema.Limits{})
		if perr != nil {
			http.Error(w, perr.Message, http.StatusBadRequest)
			return
		}
		var rs []schema.Response
		for _, it := range items {
			req := it.Request
			if req.IsNotification() {
				continue
			}
			switch req.Method {
			case "math.add":
				var p struct{ A, B int }
				json.Unmarshal(req.Params, &p)
				rs = append(rs, schema.Response{ID: req.ID, Result: json.RawMessage(fmt.Sprint(p.A + p.B))})
			case "pay":
				rs = append(rs, schema.Response{ID: req.ID, Error: schema.NewError(2001, "insufficient funds", map[string]int{"balance": 3})})
			default:
				rs = append(rs, schema.Response{ID: req.ID, Error: schema.Errorf(schema.CodeMethodNotFound, "method not found: %s", req.Method)})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if len(rs) == 0 {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var out []byte
		if batch {
			slices.Reverse(rs)
			out, _ = schema.AppendBatch(nil, rs)
		} else {
			out, _ = rs[0].MarshalJSON()
		}
		w.Write(out)
	}))
}
