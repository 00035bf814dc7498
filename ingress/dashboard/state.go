package dashboard

import (
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
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
	Methods []bus.MethodStatus `json:"methods"`
	// Discovery reports whether workers announce themselves; without it
	// Workers is empty and a method's Workers is absent.
	Discovery bool          `json:"discovery"`
	Workers   []WorkerState `json:"workers"`
	// RecentErrors holds the newest error answers, newest first.
	RecentErrors []ErrorState `json:"recent_errors"`
	// Jobs is null when the ingress serves no jobs.
	Jobs *JobsState `json:"jobs"`
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

func sortMethods(m []bus.MethodStatus) {
	slices.SortFunc(m, func(a, b bus.MethodStatus) int { return strings.Compare(a.Method, b.Method) })
}
