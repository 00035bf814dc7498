package door

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/toolbus/toolbus/schema"
)

// ErrRecord is what [Follow] returns for a job record it cannot decode.
var ErrRecord = errors.New("door: a job record cannot be read")

// Follow hands visit the job record first and then, decoded, each later
// record stream notifies, the record and stream a [Request]'s Subscribe
// answered. visit runs on the caller's goroutine, one record after the
// other; a slow visit skips records, never the final one. Follow returns
// when visit reports done or fails, or when the stream ends first: ctx
// ended, or the subscription ended before the job (its record is gone,
// or the ingress lost JetStream), which done false and a nil error tell
// the caller to explain. The error is visit's, or [ErrRecord].
func Follow(ctx context.Context, first json.RawMessage, stream func(context.Context, func(string, json.RawMessage)),
	visit func(*schema.JobRecord) (done bool, err error)) (done bool, err error) {
	if done, err = see(first, visit); done || err != nil {
		return done, err
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	stream(sctx, func(method string, params json.RawMessage) {
		// A subscription notifies only records (rpc.jobs.progress); the
		// check keeps another notification from being read as one.
		if done || err != nil || !strings.HasSuffix(method, ".progress") {
			return
		}
		if done, err = see(params, visit); done || err != nil {
			stop()
		}
	})
	return done, err
}

// see decodes raw and hands it to visit.
func see(raw json.RawMessage, visit func(*schema.JobRecord) (bool, error)) (bool, error) {
	var rec schema.JobRecord
	if json.Unmarshal(raw, &rec) != nil {
		return false, ErrRecord
	}
	return visit(&rec)
}
