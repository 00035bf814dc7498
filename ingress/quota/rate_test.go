package quota

import (
	"math"
	"testing"
	"time"

	"github.com/toolbus/toolbus/schema"
)

func TestRateLimitRefills(t *testing.T) {
	l := NewLimiter(&RateLimit{PerSecond: 10, Burst: 1}, nil)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	if e := l.Admit("x"); e != nil {
		t.Fatalf("first Admit = %v, want nil", e)
	}
	e := l.Admit("x")
	if e == nil || e.Code != schema.CodeOverloaded {
		t.Fatalf("second Admit = %v, want -32002", e)
	}
	now = now.Add(100 * time.Millisecond)
	if e := l.Admit("x"); e != nil {
		t.Errorf("Admit after the refill = %v, want nil", e)
	}
}

func TestLimiterPerCaller(t *testing.T) {
	if l := NewLimiter(nil, nil); l != nil || l.Admit("x") != nil {
		t.Fatalf("NewLimiter(nil, nil) = %v, want nil, which admits every call", l)
	}
	l := NewLimiter(nil, map[string]RateLimit{"bob": {PerSecond: 1e-9, Burst: 1}})
	for range 3 {
		if e := l.Admit("alice"); e != nil {
			t.Fatalf("Admit(alice) without a default bucket = %v, want nil", e)
		}
	}
	if e := l.Admit("bob"); e != nil {
		t.Fatalf("bob's first Admit = %v, want nil", e)
	}
	e := l.Admit("bob")
	if e == nil || e.Code != schema.CodeOverloaded || e.Limit() != "rate_limit" {
		t.Errorf("bob's second Admit = %v, want -32002 rate_limit", e)
	}
}

func TestRateLimitValidate(t *testing.T) {
	tests := []struct {
		name string
		l    RateLimit
	}{
		{name: "zero rate", l: RateLimit{Burst: 1}},
		{name: "zero burst", l: RateLimit{PerSecond: 1}},
		{name: "negative", l: RateLimit{PerSecond: -1, Burst: 1}},
		{name: "not a number", l: RateLimit{PerSecond: math.NaN(), Burst: 1}},
		{name: "infinite", l: RateLimit{PerSecond: math.Inf(1), Burst: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Validate(); err == nil {
				t.Errorf("%+v.Validate() = nil, want an error", tc.l)
			}
		})
	}
}
