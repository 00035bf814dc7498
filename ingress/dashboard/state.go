package dashboard

import (
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/callstats"
)

// State is what GET /ui/api/state answers: the ingress's own view
// of the cluster at one moment, which the page at /ui/ shows. Rates and
// percentiles cover the last [State.WindowSeconds] seconds of the
// calls this ingress replica handled; run one page per replica, or read
// /metrics from all of them, for the whole cluster.
//
// With authentication a caller is shown what is its own: the rows of the
// methods it may call (their statistics count every caller's calls), the
// live workers with those methods alone, the ingress's in-flight calls
// among those rows, its own recent errors and its own jobs. An operator
// is shown everything, as is the one anonymous caller of an ingress
// without authentication (see [View]).
type State struct {
	Now           time.Time `json:"now"`
	WindowSeconds int       `json:"window_seconds"`
	// Caller is whose view this is; empty without authentication.
	Caller string `json:"caller,omitempty"`
	// AllCallers reports that the view shows every caller's data rather
	// than the caller's own.
	AllCallers bool `json:"all_callers"`
	Ingress    struct {
		ID            string    `json:"id"`
		Started       time.Time `json:"started"`
		UptimeSeconds float64   `json:"uptime_seconds"`
		// InFlight counts the calls this ingress is waiting on now.
		InFlight int64 `json:"in_flight"`
	} `json:"ingress"`
	// Methods holds one row per method seen in the window or served by a
	// live worker, sorted by name.
	Methods []MethodState `json:"methods"`
	// Discovery reports whether workers announce themselves; without it
	// Workers is empty and MethodState.Workers is null.
	Discovery bool          `json:"discovery"`
	Workers   []WorkerState `json:"workers"`
	// RecentErrors holds the newest error answers, newest first.
	RecentErrors []ErrorState `json:"recent_errors"`
	// Jobs is null when the ingress serves no jobs.
	Jobs *JobsState `json:"jobs"`
}

// MethodState is one method's row of the dashboard.
type MethodState struct {
	Method string `json:"method"`
	// Rate is calls per second over the window.
	Rate float64 `json:"rate"`
	// Calls and Errors count the window's calls and error answers;
	// ErrorRate is Errors/Calls (0 when there were none).
	Calls     int64   `json:"calls"`
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
	// P50Ms and P99Ms are ingress-observed latencies in milliseconds, 0
	// when the window holds no call.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// InFlight counts this method's calls open now.
	InFlight int64 `json:"in_flight"`
	// Total counts the method's calls since the ingress started.
	Total int64 `json:"total"`
	// Workers counts the live workers serving the method; null without
	// discovery.
	Workers *int `json:"workers"`
}

// WorkerState is one live worker as its announcements describe it.
type WorkerState struct {
	ID      string    `json:"id"`
	Methods []string  `json:"methods"`
	Expires time.Time `json:"expires"`
}

// ErrorState is one recent error answer.
type ErrorState struct {
	Time    time.Time `json:"time"`
	ID      string    `json:"id"` // the JSON-RPC id as sent, e.g. `7` or `"a"`
	Method  string    `json:"method"`
	Code    int       `json:"code"`
	Message string    `json:"message"`
	TraceID string    `json:"trace_id,omitempty"`
}

// JobsState is the jobs part of the dashboard.
type JobsState struct {
	// ByState counts jobs per state (queued, running, succeeded, failed,
	// canceled) among those still kept.
	ByState map[string]int `json:"by_state"`
	// Recent holds the newest jobs, newest first.
	Recent []JobState `json:"recent"`
	// Truncated reports that ByState counts only the newest jobs because
	// more are kept than one look may read.
	Truncated bool `json:"truncated,omitempty"`
	// Error says why the jobs could not be read this time.
	Error string `json:"error,omitempty"`
}

// JobState is one job's row.
type JobState struct {
	ID      string    `json:"id"`
	Method  string    `json:"method"`
	State   string    `json:"state"`
	Percent *float64  `json:"percent"` // null when the job reported no progress
	Message string    `json:"message,omitempty"`
	Created time.Time `json:"created"`
}

// windowSeconds is the span of the dashboard's rates and percentiles.
const windowSeconds = callstats.Window / time.Second

func sortMethods(m []MethodState) {
	slices.SortFunc(m, func(a, b MethodState) int { return strings.Compare(a.Method, b.Method) })
}
