package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
)

// The methods of the examples in section 7 of the JSON-RPC 2.0
// specification.

// subtractParams takes both forms of the specification: positional
// [minuend, subtrahend] and named {"minuend", "subtrahend"}.
type subtractParams struct {
	minuend, subtrahend json.Number
}

func (p *subtractParams) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(b, &raws); err != nil {
			return err
		}
		if len(raws) != 2 {
			return worker.InvalidParams("", fmt.Sprintf("expected [minuend, subtrahend], got %d values", len(raws)))
		}
		var err error
		if p.minuend, err = number("/0", raws[0]); err != nil {
			return err
		}
		p.subtrahend, err = number("/1", raws[1])
		return err
	}
	var named struct {
		Minuend    json.RawMessage `json:"minuend"`
		Subtrahend json.RawMessage `json:"subtrahend"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&named); err != nil {
		return err
	}
	var err error
	if p.minuend, err = number("/minuend", named.Minuend); err != nil {
		return err
	}
	p.subtrahend, err = number("/subtrahend", named.Subtrahend)
	return err
}

func subtract(_ context.Context, p subtractParams) (any, error) {
	if p.minuend == "" {
		return nil, worker.InvalidParams("", "expected [minuend, subtrahend] or {\"minuend\", \"subtrahend\"}")
	}
	var a arith
	a.add(p.minuend, false)
	a.add(p.subtrahend, true)
	return a.result()
}

// numbers is positional params that must all be numbers.
type numbers []json.Number

func (ns *numbers) UnmarshalJSON(b []byte) error {
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return worker.InvalidParams("", "expected an array of numbers")
	}
	*ns = make(numbers, len(raws))
	for i, raw := range raws {
		n, err := number(schema.Pointer(strconv.Itoa(i)), raw)
		if err != nil {
			return err
		}
		(*ns)[i] = n
	}
	return nil
}

func sum(_ context.Context, ns numbers) (any, error) {
	var a arith
	for _, n := range ns {
		a.add(n, false)
	}
	return a.result()
}

func getData(context.Context, *worker.Request) (any, error) {
	return []any{"hello", 5}, nil
}

// accept serves the methods the specification calls only as notifications
// or whose answer it leaves open.
func accept(context.Context, *worker.Request) (any, error) {
	return nil, nil
}

// number reads one JSON number; anything else is invalid params naming
// field, the JSON pointer of the value.
func number(field string, raw json.RawMessage) (json.Number, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", worker.InvalidParams(field, "required member is missing")
	}
	if raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return "", worker.InvalidParams(field, "expected a number, got "+string(raw))
	}
	return json.Number(raw), nil
}

// arith adds numbers exactly as integers while they are integers that fit
// an int64, and as float64 from the first that is not.
type arith struct {
	i       int64
	f       float64
	isFloat bool
}

func (a *arith) add(n json.Number, negate bool) {
	if !a.isFloat {
		if v, err := n.Int64(); err == nil && !(negate && v == math.MinInt64) {
			if negate {
				v = -v
			}
			if s := a.i + v; (v >= 0) == (s >= a.i) {
				a.i = s
				return
			}
		}
		a.isFloat, a.f = true, float64(a.i)
	}
	v, err := n.Float64()
	if err != nil {
		// Out of float64's range: the sum is as well.
		v = math.Inf(1)
		if len(n) > 0 && n[0] == '-' {
			v = math.Inf(-1)
		}
	}
	if negate {
		v = -v
	}
	a.f += v
}

func (a *arith) result() (any, error) {
	if !a.isFloat {
		return a.i, nil
	}
	if math.IsInf(a.f, 0) || math.IsNaN(a.f) {
		return nil, schema.NewError(schema.CodeToolError, "tool error: the result is out of range", nil)
	}
	return a.f, nil
}
