package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoop(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name       string
		op         func(n int64) error
		wantOK     bool
		wantErr    error // what FirstError matches; nil when no errors are expected
		wantErrors bool
	}{
		{name: "every operation succeeds", op: func(int64) error { return nil }, wantOK: true},
		{name: "every operation fails", op: func(int64) error { return errBoom }, wantErr: errBoom, wantErrors: true},
		{name: "every other operation fails", op: func(n int64) error {
			if n%2 == 0 {
				return errBoom
			}
			return nil
		}, wantOK: true, wantErr: errBoom, wantErrors: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int64
			var workers [4]atomic.Int64
			res, err := Loop(t.Context(), LoopConfig{Concurrency: 4, Duration: 50 * time.Millisecond, Warmup: 10 * time.Millisecond},
				func(ctx context.Context, worker int) error {
					workers[worker].Add(1)
					time.Sleep(time.Millisecond)
					return tt.op(n.Add(1))
				})
			if err != nil {
				t.Fatalf("Loop() error = %v, want nil", err)
			}
			if res.Concurrency != 4 {
				t.Errorf("Concurrency = %d, want 4", res.Concurrency)
			}
			for i := range workers {
				if workers[i].Load() == 0 {
					t.Errorf("worker %d ran no operation", i)
				}
			}
			if got := res.Requests + res.Errors; got > n.Load() {
				t.Errorf("Requests + Errors = %d, want at most the %d operations run", got, n.Load())
			}
			if got := res.Requests > 0; got != tt.wantOK {
				t.Errorf("Requests = %d, want some: %v", res.Requests, tt.wantOK)
			}
			if got := res.Errors > 0; got != tt.wantErrors {
				t.Errorf("Errors = %d, want some: %v", res.Errors, tt.wantErrors)
			}
			if !errors.Is(res.FirstError, tt.wantErr) {
				t.Errorf("FirstError = %v, want %v", res.FirstError, tt.wantErr)
			}
			if tt.wantOK && !(0 < res.P50 && res.P50 <= res.P99 && res.P99 <= res.Max) {
				t.Errorf("P50, P99, Max = %v, %v, %v, want ordered and positive", res.P50, res.P99, res.Max)
			}
		})
	}
}

func TestLoopConfigErrors(t *testing.T) {
	nop := func(context.Context, int) error { return nil }
	tests := []struct {
		name string
		cfg  LoopConfig
		op   Op
	}{
		{name: "negative concurrency", cfg: LoopConfig{Concurrency: -1}, op: nop},
		{name: "negative duration", cfg: LoopConfig{Duration: -time.Second}, op: nop},
		{name: "nil operation", cfg: LoopConfig{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Loop(t.Context(), tt.cfg, tt.op); err == nil {
				t.Errorf("Loop(%+v) error = nil, want one", tt.cfg)
			}
		})
	}
}

func TestLoopGivesUpAfterGrace(t *testing.T) {
	start := time.Now()
	res, err := Loop(t.Context(), LoopConfig{Duration: 10 * time.Millisecond, Grace: 50 * time.Millisecond},
		func(ctx context.Context, _ int) error {
			<-ctx.Done()
			return ctx.Err()
		})
	if err != nil {
		t.Fatalf("Loop() error = %v, want nil", err)
	}
	if res.Requests != 0 || res.Errors != 1 || !errors.Is(res.FirstError, context.DeadlineExceeded) {
		t.Errorf("Requests, Errors, FirstError = %d, %d, %v, want 0, 1, %v", res.Requests, res.Errors, res.FirstError, context.DeadlineExceeded)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Loop() took %v, want about its duration and grace", took)
	}
}
