package schema_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

func call(id, method string) schema.Call {
	c := schema.Call{Request: schema.Request{Method: method}}
	if id != "" {
		c.ID = json.RawMessage(id)
	}
	return c
}

// echoMethod answers every call with its method name.
var echoMethod = schema.DispatcherFunc(func(_ context.Context, calls []schema.Call, emit func(int, schema.Response)) {
	for i, c := range calls {
		if !c.IsNotification() {
			emit(i, schema.Response{ID: c.ID, Result: json.RawMessage(`"` + c.Method + `"`)})
		}
	}
})

func TestChainRunsLayersInTheOrderListed(t *testing.T) {
	var order []string
	layer := func(name string) schema.Layer {
		return func(next schema.Dispatcher) schema.Dispatcher {
			return schema.DispatcherFunc(func(ctx context.Context, calls []schema.Call, emit func(int, schema.Response)) {
				order = append(order, name+" in")
				next.Dispatch(ctx, calls, emit)
				order = append(order, name+" out")
			})
		}
	}
	d := schema.Chain(echoMethod, layer("first"), nil, layer("second"))
	got := schema.Collect(context.Background(), d, []schema.Call{call("1", "a")})
	if string(got[0].Result) != `"a"` {
		t.Fatalf("answer = %s, want \"a\"", got[0].Result)
	}
	if want := []string{"first in", "second in", "second out", "first out"}; !slices.Equal(order, want) {
		t.Errorf("order = %v, want %v", order, want)
	}
}

func TestSubsetAnswersUnderTheSetsIndexes(t *testing.T) {
	calls := []schema.Call{call("1", "a"), call("2", "b"), call("3", "c")}
	var s schema.Subset
	s.Add(0, calls[0])
	s.Add(2, calls[2])
	got := map[int]string{}
	s.Dispatch(context.Background(), echoMethod, func(i int, r schema.Response) { got[i] = string(r.Result) })
	if len(got) != 2 || got[0] != `"a"` || got[2] != `"c"` {
		t.Errorf("answers = %v, want a at 0 and c at 2", got)
	}
	var empty schema.Subset
	empty.Dispatch(context.Background(), schema.DispatcherFunc(func(context.Context, []schema.Call, func(int, schema.Response)) {
		t.Error("an empty subset was dispatched")
	}), nil)

	// An answer under an index the subset does not have is handed on
	// under -1, for the receiver to report.
	bad := schema.DispatcherFunc(func(_ context.Context, calls []schema.Call, emit func(int, schema.Response)) {
		emit(len(calls), schema.Response{})
	})
	var idx []int
	s.Dispatch(context.Background(), bad, func(i int, _ schema.Response) { idx = append(idx, i) })
	if !slices.Equal(idx, []int{-1}) {
		t.Errorf("indexes of an out-of-range answer = %v, want [-1]", idx)
	}
}

func TestAnswersTakeEachCallOnce(t *testing.T) {
	calls := []schema.Call{call("1", "a"), call("", "note"), call("3", "c"), call("4", "d")}
	a := schema.NewAnswers(calls)
	var log []string
	answer := func(i int) {
		a.Answer(i, func(first bool) {
			log = append(log, strings.Join([]string{string(rune('0' + i + 1)), map[bool]string{true: "first", false: "dropped"}[first]}, " "))
		})
	}
	answer(0)  // first
	answer(0)  // again
	answer(1)  // a notification
	answer(-1) // out of range
	answer(2)  // first
	var open []int
	a.Close(func(i int) { open = append(open, i) })
	answer(3) // after Close
	if want := []string{"1 first", "1 dropped", "2 dropped", "0 dropped", "3 first", "4 dropped"}; !slices.Equal(log, want) {
		t.Errorf("answers = %v, want %v", log, want)
	}
	if want := []int{1, 3}; !slices.Equal(open, want) {
		t.Errorf("unanswered at Close = %v, want %v (the notification and the call never answered)", open, want)
	}
}

func TestSetIdempotencyKey(t *testing.T) {
	single := []schema.Call{call("1", "a"), call("", "note")}
	schema.SetIdempotencyKey(single, "k")
	if single[0].IdempotencyKey != "k" || single[1].IdempotencyKey != "" {
		t.Errorf("one call and a notification: keys %q, %q; want \"k\" and none", single[0].IdempotencyKey, single[1].IdempotencyKey)
	}
	batch := []schema.Call{call("1", "a"), call(`"x"`, "b")}
	schema.SetIdempotencyKey(batch, "k")
	if batch[0].IdempotencyKey != "k\x001" || batch[1].IdempotencyKey != "k\x00\"x\"" {
		t.Errorf("batch keys = %q, %q; want the key with each id", batch[0].IdempotencyKey, batch[1].IdempotencyKey)
	}
	none := []schema.Call{call("1", "a")}
	schema.SetIdempotencyKey(none, "")
	if none[0].IdempotencyKey != "" {
		t.Errorf("no key named the call %q", none[0].IdempotencyKey)
	}
}

func TestErrorReasonAndLimit(t *testing.T) {
	tests := []struct {
		name          string
		e             *schema.Error
		reason, limit string
	}{
		{"reason", schema.NewError(schema.CodeUnavailable, "x", map[string]any{"reason": schema.ReasonNoWorkers}), schema.ReasonNoWorkers, ""},
		{"limit", schema.LimitError("max_batch_items", 10, 11), "", "max_batch_items"},
		{"no data", schema.NewError(schema.CodeInternal, "x", nil), "", ""},
		{"data not an object", schema.NewError(schema.CodeToolError, "x", []string{"reason"}), "", ""},
		{"reason not a string", schema.NewError(schema.CodeToolError, "x", map[string]any{"reason": 7}), "", ""},
		{"nil", nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.Reason(); got != tt.reason {
				t.Errorf("Reason() = %q, want %q", got, tt.reason)
			}
			if got := tt.e.Limit(); got != tt.limit {
				t.Errorf("Limit() = %q, want %q", got, tt.limit)
			}
		})
	}
}
