package jobs

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/schema"
)

type listParams struct {
	State  *string `json:"state"`
	Method *string `json:"method"`
	Limit  *int    `json:"limit"`
	Cursor *string `json:"cursor"`
}

// list pages through the caller's jobs. Job ids sort by creation time, so
// the page is the keys below the cursor in descending order. Each page reads
// the bucket's key names and then the records it needs; it reads at most
// the configured scan bound of records, so a filter that matches rarely
// ends a page early with a cursor rather than reading every record.
func (s *Service) list(ctx context.Context, call schema.Call) (*schema.JobList, *schema.Error) {
	var p listParams
	if e := decodeParams(call.Params, &p); e != nil {
		return nil, e
	}
	var state schema.JobState
	if p.State != nil {
		state = schema.JobState(*p.State)
		if !state.Valid() {
			return nil, invalidParams("state", "must be one of queued, running, input_required, succeeded, failed, canceled")
		}
	}
	var method string
	if p.Method != nil {
		method = *p.Method
		if err := schema.ValidateMethod(method); err != nil {
			return nil, invalidParams("method", schema.ErrorFrom(err).Message)
		}
	}
	limit := s.cfg.listLimit
	if p.Limit != nil {
		limit = *p.Limit
		if limit < 1 {
			return nil, invalidParams("limit", "must be at least 1")
		}
		if limit > s.cfg.maxListLimit {
			return nil, schema.LimitError("max_list_limit", int64(s.cfg.maxListLimit), int64(limit))
		}
	}
	after := ""
	if p.Cursor != nil {
		var ok bool
		if after, ok = decodeCursor(*p.Cursor); !ok {
			return nil, invalidParams("cursor", "not a cursor of rpc.jobs.list")
		}
	}

	ids, err := s.jobIDs(ctx)
	if err != nil {
		return nil, unavailable("list jobs", err)
	}
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(b, a) })
	if after != "" {
		i, _ := slices.BinarySearchFunc(ids, after, func(a, b string) int { return strings.Compare(b, a) })
		for i < len(ids) && ids[i] >= after {
			i++
		}
		ids = ids[i:]
	}

	res := &schema.JobList{Jobs: []*schema.JobRecord{}}
	scanned := 0
	for i, id := range ids {
		if len(res.Jobs) == limit || scanned == s.cfg.maxListScan {
			res.NextCursor = encodeCursor(ids[i-1])
			break
		}
		scanned++
		r, _, err := s.st.get(ctx, id)
		if errors.Is(err, errNotFound) {
			continue // expired since the keys were read
		}
		if err != nil {
			return nil, unavailable("list jobs", err)
		}
		if r.Caller != call.Caller || (state != "" && r.State != state) || (method != "" && r.Method != method) {
			continue
		}
		res.Jobs = append(res.Jobs, r.summary())
	}
	return res, nil
}

// jobIDs returns the ids of every record in the bucket, in no order.
func (s *Service) jobIDs(ctx context.Context) ([]string, error) {
	// The bucket's stream reports the subjects it holds in one answer of
	// the server's. A key lister (an ordered consumer) is no snapshot: a
	// record rewritten while it runs moves past the end it counted on, and
	// the job would be missing from the page.
	stream, err := s.st.js.Stream(ctx, "KV_"+s.st.names.bucket)
	if err != nil {
		return nil, err
	}
	prefix := "$KV." + s.st.names.bucket + ".job."
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+"*"))
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		ids = append(ids, strings.TrimPrefix(subject, prefix))
	}
	return ids, nil
}

// The cursor is the last id of a page, opaque to callers so that its form
// can change.
func encodeCursor(id string) string { return base64.RawURLEncoding.EncodeToString([]byte("j1:" + id)) }

func decodeCursor(c string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", false
	}
	id, ok := strings.CutPrefix(string(b), "j1:")
	return id, ok && validID(id)
}
