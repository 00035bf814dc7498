package door_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/ingress/door"
	"github.com/toolbus/toolbus/schema"
)

func TestFollow(t *testing.T) {
	rec := func(state schema.JobState) json.RawMessage {
		b, _ := json.Marshal(schema.JobRecord{ID: "j", State: state})
		return b
	}
	final := func(r *schema.JobRecord) (bool, error) { return r.State.Final(), nil }
	for _, tc := range []struct {
		name     string
		first    json.RawMessage
		notified []json.RawMessage
		want     []schema.JobState
		done     bool
		err      error
	}{
		{"final at once", rec(schema.JobSucceeded), []json.RawMessage{rec(schema.JobFailed)}, []schema.JobState{schema.JobSucceeded}, true, nil},
		{"until final", rec(schema.JobQueued), []json.RawMessage{rec(schema.JobRunning), rec(schema.JobSucceeded), rec(schema.JobFailed)},
			[]schema.JobState{schema.JobQueued, schema.JobRunning, schema.JobSucceeded}, true, nil},
		{"stream ends first", rec(schema.JobQueued), []json.RawMessage{rec(schema.JobRunning)},
			[]schema.JobState{schema.JobQueued, schema.JobRunning}, false, nil},
		{"undecodable first", json.RawMessage(`[`), nil, nil, false, door.ErrRecord},
		{"undecodable later", rec(schema.JobQueued), []json.RawMessage{json.RawMessage(`"x"`), rec(schema.JobSucceeded)},
			[]schema.JobState{schema.JobQueued}, false, door.ErrRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := func(ctx context.Context, notify func(string, json.RawMessage)) {
				for _, p := range tc.notified {
					if ctx.Err() != nil {
						return
					}
					notify("rpc.jobs.other", rec(schema.JobFailed))
					notify(schema.MethodJobsProgress, p)
				}
			}
			var got []schema.JobState
			done, err := door.Follow(t.Context(), tc.first, stream, func(r *schema.JobRecord) (bool, error) {
				got = append(got, r.State)
				return final(r)
			})
			if done != tc.done || !errors.Is(err, tc.err) || len(got) != len(tc.want) {
				t.Fatalf("Follow = %v, %v after %v; want %v, %v after %v", done, err, got, tc.done, tc.err, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("Follow visited %v, want %v", got, tc.want)
				}
			}
		})
	}
}
