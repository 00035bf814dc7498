package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// Bounds of [Service.Stats].
const (
	// MaxStatsRecords is the most records one [Service.Stats] call reads:
	// the newest ones. Past it, ByState counts only those and
	// [Stats.Truncated] is set.
	MaxStatsRecords = 2000
	// DefaultStatsTimeout bounds a [Service.Stats] call whose context has
	// no deadline.
	DefaultStatsTimeout = 10 * time.Second
	// statsConcurrency is how many records Stats reads at once: enough to
	// hide the round trips, few enough not to crowd out the requests the
	// service answers meanwhile.
	statsConcurrency = 16
)

// Stats is a view of the jobs kept in the cluster: an operator's, across
// every caller, as [Service.Stats] returns it, or one caller's, as
// [Service.CallerStats] does.
type Stats struct {
	// ByState counts kept records by state. It holds every state, 0 when
	// no record is in it.
	ByState map[schema.JobState]int
	// Open counts the kept records that are queued or running, by method:
	// each tool's backlog. A method without such a record is absent.
	Open map[string]OpenJobs
	// Recent holds the newest jobs, newest first, without their params and
	// results (as rpc.jobs.list returns them).
	Recent []schema.JobRecord
	// Truncated reports that more records are kept than one call reads, so
	// ByState and Open count only the newest [MaxStatsRecords].
	Truncated bool
}

// OpenJobs counts the jobs of one method that have not ended.
type OpenJobs struct {
	// Queued counts the jobs waiting for a run, those that wait for a
	// worker (Waiting "no_workers") included.
	Queued int
	// Running counts the jobs a runner has sent to a worker, those
	// waiting for an answer (input_required) included.
	Running int
}

// Stats counts the jobs kept in the cluster by state and returns the
// newest recent of them (none when recent <= 0; at most
// [MaxStatsRecords]). It sees every caller's jobs, so it is for operators
// (a dashboard, [Service.Collector]) and never answers an agent.
//
// Its cost grows with the jobs kept, so call it at a human pace or through
// the collector's cache. It lists the key of every kept record, not only
// the newest, in stream-info requests the server pages (a few tens of
// bytes per job), then reads the records it counts — the newest
// [MaxStatsRecords] at most, one KV request each, 16 at a time — and each
// read moves the whole record, params and result included. A record that expires or is deleted between the listing and
// its read is not counted. ctx bounds the whole call; without a deadline
// [DefaultStatsTimeout] applies. It returns an error when the listing or a
// read fails, or ctx ends first.
func (s *Service) Stats(ctx context.Context, recent int) (Stats, error) {
	return s.stats(ctx, recent, nil)
}

// CallerStats is [Service.Stats] of caller's jobs alone, for a dashboard
// that shows a caller what is its own. It reads what Stats reads, the
// newest [MaxStatsRecords] of every caller's records, and counts and lists
// caller's among them.
func (s *Service) CallerStats(ctx context.Context, caller string, recent int) (Stats, error) {
	return s.stats(ctx, recent, &caller)
}

// stats implements Stats, for caller's records alone when caller is not
// nil.
func (s *Service) stats(ctx context.Context, recent int, caller *string) (Stats, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStatsTimeout)
		defer cancel()
	}
	ids, err := s.jobIDs(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("jobs: stats: list jobs: %w", err)
	}
	// Ids sort by creation time (see idSource), so the newest come first.
	slices.SortFunc(ids, func(a, b string) int { return strings.Compare(b, a) })
	st := Stats{ByState: make(map[schema.JobState]int, len(allStates)), Open: map[string]OpenJobs{}}
	for _, state := range allStates {
		st.ByState[state] = 0
	}
	if len(ids) > MaxStatsRecords {
		ids, st.Truncated = ids[:MaxStatsRecords], true
	}
	recent = min(max(recent, 0), len(ids))
	// Which of the records are the newest recent of the caller's is known
	// only once all are read, so every one of its records is kept.
	keep := recent
	if caller != nil && recent > 0 {
		keep = len(ids)
	}

	// Every reader writes only the slots of the ids it took, so the slices
	// need no lock; wg.Wait orders those writes before the reads below.
	states := make([]schema.JobState, len(ids)) // "" where the record was gone or not the caller's
	methods := make([]string, len(ids))
	summaries := make([]*schema.JobRecord, keep)
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range min(statsConcurrency, len(ids)) {
		wg.Go(func() {
			for rctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(ids) {
					return
				}
				r, _, err := s.st.get(rctx, ids[i])
				switch {
				case errors.Is(err, errNotFound):
				case err != nil:
					cancel(err)
					return
				case caller != nil && r.Caller != *caller:
				default:
					states[i], methods[i] = r.State, r.Method
					if i < keep {
						summaries[i] = r.summary()
					}
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	// A reader stops early only when a read failed or ctx ended.
	if done.Load() < int64(len(ids)) {
		return Stats{}, fmt.Errorf("jobs: stats: %w", context.Cause(rctx))
	}
	for i, state := range states {
		if state == "" {
			continue
		}
		st.ByState[state]++
		switch state {
		case schema.JobQueued:
			o := st.Open[methods[i]]
			o.Queued++
			st.Open[methods[i]] = o
		case schema.JobRunning, schema.JobInputRequired:
			o := st.Open[methods[i]]
			o.Running++
			st.Open[methods[i]] = o
		}
	}
	st.Recent = make([]schema.JobRecord, 0, recent)
	for _, r := range summaries {
		if r != nil && len(st.Recent) < recent {
			st.Recent = append(st.Recent, *r)
		}
	}
	return st, nil
}

// allStates lists every state in a job's order of life.
var allStates = [...]schema.JobState{schema.JobQueued, schema.JobRunning, schema.JobInputRequired, schema.JobSucceeded, schema.JobFailed, schema.JobCanceled}
