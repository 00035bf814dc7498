package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"
	"time"
)

func TestErrorFrom(t *testing.T) {
	tool := NewError(2001, "insufficient funds", map[string]any{"balance": 3})
	tests := []struct {
		name      string
		err       error
		code      int
		retryable bool
		same      *Error // when set, ErrorFrom must return this very error
	}{
		{name: "schema error", err: tool, code: 2001, same: tool},
		{name: "wrapped schema error", err: fmt.Errorf("call demo.fail: %w", tool), code: 2001, same: tool},
		{name: "twice wrapped", err: fmt.Errorf("batch: %w", fmt.Errorf("call: %w", ErrForbidden)), code: CodeForbidden, same: ErrForbidden},
		{name: "joined", err: errors.Join(io.EOF, ErrOverloaded), code: CodeOverloaded, same: ErrOverloaded},
		{name: "deadline", err: context.DeadlineExceeded, code: CodeTimeout, retryable: true},
		{name: "wrapped deadline", err: fmt.Errorf("sleep: %w", context.DeadlineExceeded), code: CodeTimeout, retryable: true},
		{name: "canceled", err: context.Canceled, code: CodeCanceled},
		{name: "wrapped canceled", err: fmt.Errorf("fetch: %w", context.Canceled), code: CodeCanceled},
		{name: "schema error wins over context", err: fmt.Errorf("%w: %w", ErrUnavailable, context.DeadlineExceeded), code: CodeUnavailable, same: ErrUnavailable},
		{name: "plain error", err: io.ErrUnexpectedEOF, code: CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ErrorFrom(tt.err)
			if got == nil || got.Code != tt.code {
				t.Fatalf("ErrorFrom(%v) = %v, want code %d", tt.err, got, tt.code)
			}
			if tt.same != nil && got != tt.same {
				t.Errorf("ErrorFrom(%v) = %p, want %p", tt.err, got, tt.same)
			}
			var data struct {
				Retryable bool `json:"retryable"`
			}
			if len(got.Data) > 0 {
				if err := json.Unmarshal(got.Data, &data); err != nil {
					t.Fatalf("ErrorFrom(%v) data %s: %v", tt.err, got.Data, err)
				}
			}
			if data.Retryable != tt.retryable {
				t.Errorf("ErrorFrom(%v) data = %s, want retryable %v", tt.err, got.Data, tt.retryable)
			}
			if tt.code == CodeInternal && got.Message != "internal error: "+tt.err.Error() {
				t.Errorf("ErrorFrom(%v).Message = %q, want the error text kept", tt.err, got.Message)
			}
		})
	}
	if got := ErrorFrom(nil); got != nil {
		t.Errorf("ErrorFrom(nil) = %v, want nil", got)
	}
}

func TestErrorFromContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if got := ErrorFrom(ctx.Err()); !errors.Is(got, ErrTimeout) {
		t.Errorf("ErrorFrom(%v) = %v, want %v", ctx.Err(), got, ErrTimeout)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if got := ErrorFrom(ctx.Err()); !errors.Is(got, ErrCanceled) {
		t.Errorf("ErrorFrom(%v) = %v, want %v", ctx.Err(), got, ErrCanceled)
	}
}

func TestErrorIs(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{name: "same code other message", err: Errorf(CodeTimeout, "call %d timed out", 3), target: ErrTimeout, want: true},
		{name: "other code", err: ErrTimeout, target: ErrCanceled, want: false},
		{name: "wrapped", err: fmt.Errorf("ctx: %w", NewError(CodeForbidden, "no", nil)), target: ErrForbidden, want: true},
		{name: "tool code", err: NewError(2001, "x", nil), target: &Error{Code: 2001}, want: true},
		{name: "not an Error target", err: ErrInternal, target: io.EOF, want: false},
		{name: "nil Error target", err: ErrInternal, target: (*Error)(nil), want: false},
		{name: "plain error", err: io.EOF, target: ErrInternal, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

func TestErrorError(t *testing.T) {
	if got, want := ErrMethodNotFound.Error(), "jsonrpc error -32601: method not found"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestSentinelCodes(t *testing.T) {
	tests := []struct {
		err  *Error
		code int
	}{
		{ErrParse, -32700}, {ErrInvalidRequest, -32600}, {ErrMethodNotFound, -32601},
		{ErrInvalidParams, -32602}, {ErrInternal, -32603}, {ErrTool, -32000},
		{ErrTimeout, -32001}, {ErrOverloaded, -32002}, {ErrUnavailable, -32003},
		{ErrCanceled, -32004}, {ErrForbidden, -32005}, {ErrLimitExceeded, -32006}, {ErrJobNotFound, -32007},
	}
	for _, tt := range tests {
		t.Run(tt.err.Message, func(t *testing.T) {
			if tt.err.Code != tt.code || tt.err.Data != nil {
				t.Errorf("%s = %d %s, want code %d and no data", tt.err.Message, tt.err.Code, tt.err.Data, tt.code)
			}
		})
	}
}

func TestNewError(t *testing.T) {
	tests := []struct {
		name string
		data any
		want string
	}{
		{name: "no data", data: nil, want: ""},
		{name: "map", data: map[string]any{"retry_after_ms": 250}, want: `{"retry_after_ms":250}`},
		{name: "struct", data: struct {
			Field string `json:"field"`
		}{"x"}, want: `{"field":"x"}`},
		{name: "raw kept byte for byte", data: json.RawMessage(`{ "b":1, "a":2 }`), want: `{ "b":1, "a":2 }`},
		{name: "raw that is not JSON", data: json.RawMessage(`{oops`), want: `{"data_error":"data is not valid JSON"}`},
		{name: "unmarshallable", data: map[string]any{"f": math.Inf(1)}, want: `{"data_error":"json: unsupported value: +Inf"}`},
		{name: "channel", data: make(chan int), want: `{"data_error":"json: unsupported type: chan int"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := NewError(CodeToolError, "tool error", tt.data)
			if string(e.Data) != tt.want {
				t.Errorf("NewError(..., %v).Data = %s, want %s", tt.data, e.Data, tt.want)
			}
			if e.Code != CodeToolError || e.Message != "tool error" {
				t.Errorf("NewError() = %d %q, want %d %q", e.Code, e.Message, CodeToolError, "tool error")
			}
		})
	}
}

func TestWithDataCopies(t *testing.T) {
	e := ErrOverloaded.WithData(map[string]any{"retry_after_ms": 100})
	if ErrOverloaded.Data != nil {
		t.Fatalf("WithData changed the sentinel: %s", ErrOverloaded.Data)
	}
	if string(e.Data) != `{"retry_after_ms":100}` || !errors.Is(e, ErrOverloaded) {
		t.Errorf("WithData() = %v %s, want the code of %v and the data", e, e.Data, ErrOverloaded)
	}
}

func TestErrorf(t *testing.T) {
	e := Errorf(CodeInvalidParams, "invalid params: %s is %d", "ms", -1)
	if e.Code != CodeInvalidParams || e.Message != "invalid params: ms is -1" || e.Data != nil {
		t.Errorf("Errorf() = %d %q %s", e.Code, e.Message, e.Data)
	}
}

func TestLimitError(t *testing.T) {
	tests := []struct {
		name     string
		limit    string
		max, got int64
		msg      string
		data     string
	}{
		{name: "known size", limit: "max_batch_items", max: 1000, got: 1001,
			msg:  "limit exceeded: max_batch_items is 1000, got 1001; split the batch, or raise the limit with --max-batch-items",
			data: `{"got":1001,"limit":"max_batch_items","max":1000}`},
		{name: "unknown size", limit: "max_body_bytes", max: 4 << 20, got: -1,
			msg:  "limit exceeded: max_body_bytes is 4194304; send a smaller body, or raise the limit with --max-body-bytes",
			data: `{"limit":"max_body_bytes","max":4194304}`},
		{name: "depth", limit: "max_depth", max: 64, got: -1,
			msg:  "limit exceeded: max_depth is 64; nest the JSON less deeply, or raise the limit with --max-depth",
			data: `{"limit":"max_depth","max":64}`},
		{name: "zero seen", limit: "max_result_bytes", max: 0, got: 0, msg: "limit exceeded: max_result_bytes is 0, got 0", data: `{"got":0,"limit":"max_result_bytes","max":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := LimitError(tt.limit, tt.max, tt.got)
			if !errors.Is(e, ErrLimitExceeded) || e.Message != tt.msg || string(e.Data) != tt.data {
				t.Errorf("LimitError(%q, %d, %d) = %q %s, want %q %s", tt.limit, tt.max, tt.got, e.Message, e.Data, tt.msg, tt.data)
			}
		})
	}
}
