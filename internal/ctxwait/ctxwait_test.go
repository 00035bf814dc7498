package ctxwait_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/internal/ctxwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSleepEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- ctxwait.Sleep(ctx, time.Hour) }()
	cancel()
	if <-done {
		t.Fatal("Sleep(canceled ctx, 1h) = true, want false")
	}
}

func TestSleepWaitsAllOfIt(t *testing.T) {
	if !ctxwait.Sleep(context.Background(), time.Nanosecond) {
		t.Fatal("Sleep(1ns) = false, want true")
	}
	if !ctxwait.Sleep(context.Background(), 0) {
		t.Fatal("Sleep(0) = false, want true")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ctxwait.Sleep(ctx, 0) {
		t.Fatal("Sleep(ended ctx, 0) = true, want false")
	}
}
