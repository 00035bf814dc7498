package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
)

// TestStoreHasByteCaps: the queue stream and the bucket of records are
// created with byte caps, and a submit the full queue cannot take is
// refused -32006 naming job_queue_max_bytes.
func TestStoreHasByteCaps(t *testing.T) {
	e := startServer(t, "")
	_, js := connect(t, e)
	s := newService(t, js, jobs.WithStoreBytes(1<<20, 2<<20))
	ctx := context.Background()
	st, err := js.Stream(ctx, "TOOLBUS_JOBS")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxBytes; got != 1<<20 {
		t.Errorf("queue stream MaxBytes = %d, want %d", got, 1<<20)
	}
	info, err := js.Stream(ctx, "KV_toolbus_jobs")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().Config.MaxBytes; got != 2<<20 {
		t.Errorf("records bucket MaxBytes = %d, want %d", got, 2<<20)
	}

	// Nobody runs the jobs: 100 KB each fill the 1 MiB queue.
	params, _ := json.Marshal(map[string]any{"method": "echo", "params": []string{strings.Repeat("x", 100<<10)}})
	for i := range 20 {
		_, rpcErr := rpc(t, s, "", jobs.MethodSubmit, string(params))
		if rpcErr == nil {
			continue
		}
		if !errors.Is(rpcErr, schema.ErrLimitExceeded) || !strings.Contains(string(rpcErr.Data), `"limit":"job_queue_max_bytes"`) {
			t.Fatalf("submit %d into a full queue = %d %s %s, want -32006 naming job_queue_max_bytes", i, rpcErr.Code, rpcErr.Message, rpcErr.Data)
		}
		return
	}
	t.Fatal("2 MB of jobs went into a 1 MiB queue")
}
