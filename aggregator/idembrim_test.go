package aggregator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/aggregator"
	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// TestIdempotencyFullBucketRunsOnce: a call whose bucket fills up while it
// runs keeps a record that says its answer was not kept, and however
// often it is sent again, with room made for a new record each time, it
// never runs again.
func TestIdempotencyFullBucketRunsOnce(t *testing.T) {
	ac, wc := setup(t)
	js, err := jetstream.New(ac)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := aggregator.IdempotencyBucket(context.Background(), js, bus.DefaultSubjects(), time.Minute, 1, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	entered, release := make(chan struct{}, 8), make(chan struct{})
	answer := []byte(`"` + strings.Repeat("x", 2<<10) + `"`)
	serve(t, wc, "pay", func(*schema.CallEnvelope, time.Time) *schema.ReplyEnvelope {
		runs.Add(1)
		entered <- struct{}{}
		<-release
		return schema.ReplyResult(answer)
	})
	a := newAgg(t, ac, idemStore(t, kv))
	pay := func(id string) schema.Response {
		return collectKeyed(a, "order-1", []schema.Call{call(id, "pay", `{"amount":5}`)})[0]
	}

	first := make(chan schema.Response, 1)
	go func() { first <- pay(`1`) }()
	<-entered
	fill(t, kv)
	close(release)
	if r := <-first; r.Error != nil || string(r.Result) != string(answer) {
		t.Fatalf("the first call = %.40s… %v, want its answer", r.Result, r.Error)
	}

	stream, err := js.Stream(context.Background(), "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		// Room for a new record, as records that expire would make.
		if err := stream.Purge(context.Background(), jetstream.WithPurgeSubject(fmt.Sprintf("$KV.%s.junk.%d", kv.Bucket(), i))); err != nil {
			t.Fatal(err)
		}
		r := pay(fmt.Sprint(i + 2))
		if n := runs.Load(); n != 1 {
			t.Fatalf("sent again, try %d: the call with one idempotency key ran %d times, want 1", i, n)
		}
		if !errors.Is(r.Error, schema.ErrLimitExceeded) {
			t.Fatalf("sent again, try %d = %.40s %v, want -32006: its answer was not kept", i, r.Result, r.Error)
		}
		if d := dataOf(t, r.Error); d["reason"] != schema.ReasonIdempotencyAnswerNotKept || d["limit"] != "idempotency_max_bytes" {
			t.Errorf("sent again, try %d: data = %v, want reason %s naming idempotency_max_bytes", i, d, schema.ReasonIdempotencyAnswerNotKept)
		}
	}
}
