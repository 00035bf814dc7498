package dashboard

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/internal/callstats"
	"github.com/toolbus/toolbus/schema"
)

// State is what GET /ui/api/state answers, which the page at /ui/ shows.
// Rates and percentiles of Methods cover the last [State.WindowSeconds]
// seconds of the calls this ingress replica handled, and RecentErrors
// its error answers; Trends cover the last 15 minutes of the whole
// cluster (every ingress's, gathered over the bus as `toolbus status`
// does) or of one replica.
//
// With authentication a caller is shown what is its own: the rows of the
// methods it may call (their statistics count every caller's calls), the
// live workers with those methods alone, the ingress's in-flight calls
// among those rows, its own recent errors and jobs, and its own row of
// the Callers panel (without the window, or its share of it). An operator
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
	// Conflicts holds what the workers disagree on of the tools serving
	// rows of Methods whose workers announce different descriptors, in
	// the order of the rows.
	Conflicts []MethodConflict `json:"conflicts"`
	// Discovery reports whether workers announce themselves; without it
	// Workers is empty and a method's Workers is absent.
	Discovery bool          `json:"discovery"`
	Workers   []WorkerState `json:"workers"`
	// RecentErrors holds the newest error answers, newest first;
	// ErrorGroups the same answers with those of one method, code and
	// message as one group, newest group first.
	RecentErrors []ErrorState `json:"recent_errors"`
	ErrorGroups  []ErrorGroup `json:"error_groups"`
	// Jobs is null when the ingress serves no jobs.
	Jobs *JobsState `json:"jobs"`
	// Trends is null when they could not be read; see [TrendsState].
	Trends *TrendsState `json:"trends"`
	// Replicas lists the cluster's ingress replicas (an operator's view
	// only; empty otherwise, or when the cluster could not be asked).
	Replicas []ReplicaState `json:"replicas"`
	// Cluster says why the cluster could not be asked, when it could not:
	// the trends are then this replica's alone.
	Cluster string `json:"cluster_error,omitempty"`
	// NATS describes the bus as this replica sees it: an operator's view
	// only, null otherwise.
	NATS *NATSState `json:"nats"`
	// Fair is the Callers panel, this replica's share of itself among
	// its callers: null when it serves calls in arrival order.
	Fair *FairState `json:"fair"`
}

// MethodConflict is a row of [State.Methods] served by a tool whose
// workers announce different descriptors: the one in force is kept, and
// validates params, while the others are named ([discovery.Conflict]).
type MethodConflict struct {
	// Row names the row; Method the tool that serves it, the same name or
	// a pattern.
	Row string `json:"row"`
	discovery.Conflict
}

// WorkerState is one live worker: its methods as its announcements
// describe them and, for an operator, the process as its status answer
// does (empty when it gave none).
type WorkerState struct {
	ID            string    `json:"id"`
	Methods       []string  `json:"methods"`
	Host          string    `json:"host,omitempty"`
	Pid           int       `json:"pid,omitempty"`
	Version       string    `json:"version,omitempty"`
	Started       time.Time `json:"started,omitzero"`
	UptimeSeconds float64   `json:"uptime_seconds,omitempty"`
	InFlight      int64     `json:"in_flight"`
}

// ReplicaState is one ingress replica of the cluster.
type ReplicaState struct {
	ID            string  `json:"id"`
	Host          string  `json:"host"`
	Pid           int     `json:"pid,omitempty"`
	Version       string  `json:"version"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	InFlight      int64   `json:"in_flight"`
	// Error says why its status could not be read.
	Error string `json:"error,omitempty"`
}

// ErrorGroup is the recent error answers of one method with one code and
// message.
type ErrorGroup struct {
	Method string `json:"method"`
	// Sent is the newest answer's method as the caller sent it, when
	// Method is the label its row in Methods has (see [ErrorState]).
	Sent    string `json:"sent,omitempty"`
	Code    int    `json:"code"`
	Class   string `json:"class"` // tool, caller or infra: schema.Classify
	Message string `json:"message"`
	Count   int    `json:"count"`
	// Last, ID and TraceID are the newest answer's.
	Last    time.Time `json:"last"`
	ID      string    `json:"id"`
	TraceID string    `json:"trace_id,omitempty"`
}

// TrendsState is the last 15 minutes, drawn: SVG charts the page shows as
// they are, and the numbers they were drawn from in short.
type TrendsState struct {
	// Scope is [ScopeCluster] or the id of the one replica shown.
	Scope       string    `json:"scope"`
	Start       time.Time `json:"start"`
	StepSeconds int       `json:"step_seconds"`
	Points      int       `json:"points"`
	// InFlightSVG charts the peak of calls in flight per step;
	// InFlightPeak is the span's peak and InFlight the calls in flight
	// now (this replica's as [State.Ingress] counts them, the others' as
	// their status answers said).
	InFlightSVG  string `json:"in_flight_svg,omitempty"`
	InFlight     int64  `json:"in_flight"`
	InFlightPeak int64  `json:"in_flight_peak"`
	// JobsSVG charts the peak of queued jobs per step, sampled every
	// few seconds and whenever the jobs are read; empty when they never
	// were. Its newest point and JobsQueued are the count of queued jobs
	// that [State.Jobs] shows, when this answer read it; else the newest
	// sample (-1 when none).
	JobsSVG    string             `json:"jobs_svg,omitempty"`
	JobsQueued int64              `json:"jobs_queued"`
	Methods    []MethodTrendState `json:"methods"`
}

// MethodTrendState is one method's charts: calls per second, the share
// of tool errors and of infrastructure errors, and the 99th percentile.
type MethodTrendState struct {
	Method    string  `json:"method"`
	RateSVG   string  `json:"rate_svg"`
	ErrorsSVG string  `json:"errors_svg"`
	P99SVG    string  `json:"p99_svg"`
	PeakRate  float64 `json:"peak_rate"`
	PeakP99Ms float64 `json:"peak_p99_ms"`
	// Calls and the errors by class over the span.
	Calls        int64 `json:"calls"`
	ToolErrors   int64 `json:"tool_errors"`
	CallerErrors int64 `json:"caller_errors"`
	InfraErrors  int64 `json:"infra_errors"`
}

// NATSState is the NATS server this replica is connected to, the
// servers it knows of, and the JetStream account's usage.
type NATSState struct {
	Connected     bool     `json:"connected"`
	Status        string   `json:"status"`
	ServerName    string   `json:"server_name,omitempty"`
	ServerID      string   `json:"server_id,omitempty"`
	ServerVersion string   `json:"server_version,omitempty"`
	Cluster       string   `json:"cluster,omitempty"`
	URL           string   `json:"url,omitempty"`
	RTTMs         float64  `json:"rtt_ms"`
	Servers       []string `json:"servers"`
	Reconnects    uint64   `json:"reconnects"`
	// JetStream is null when the account has none or it could not be
	// read (then JetStreamError says why).
	JetStream      *JetStreamState `json:"jetstream"`
	JetStreamError string          `json:"jetstream_error,omitempty"`
}

// JetStreamState is a JetStream account's usage and limits; a limit of
// -1 is none.
type JetStreamState struct {
	Memory     uint64 `json:"memory"`
	Storage    uint64 `json:"storage"`
	MaxMemory  int64  `json:"max_memory"`
	MaxStorage int64  `json:"max_storage"`
	Streams    int    `json:"streams"`
	Consumers  int    `json:"consumers"`
	Domain     string `json:"domain,omitempty"`
}

// ErrorState is one recent error answer.
type ErrorState struct {
	Time time.Time `json:"time"`
	ID   string    `json:"id"` // the JSON-RPC id as sent, e.g. `7` or `"a"`
	// Method names the row of [State.Methods] that counts the call: the
	// method, or the label of the calls of methods without a row of
	// their own, such as "_unknown"; Sent is then the method the caller
	// sent, empty otherwise.
	Method  string `json:"method"`
	Sent    string `json:"sent,omitempty"`
	Code    int    `json:"code"`
	Message string `json:"message"`
	TraceID string `json:"trace_id,omitempty"`
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
	ID      string   `json:"id"`
	Method  string   `json:"method"`
	State   string   `json:"state"`
	Percent *float64 `json:"percent"` // null when the job reported no progress
	Message string   `json:"message,omitempty"`
	// Error is a failed or canceled job's error: its code and message.
	Error   *JobError `json:"error,omitempty"`
	Created time.Time `json:"created"`
}

// JobError is the error a job ended with.
type JobError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// window is the span of the dashboard's rates and percentiles.
const window = callstats.Window

// sortMethods sorts the rows as the page shows them: the tools workers
// serve by name first, then the labels under which calls of other
// names are counted ("_unknown", "_other"), and last the ingress's own
// rpc.* methods, which the page folds away.
func sortMethods(m []bus.MethodStatus) {
	slices.SortFunc(m, func(a, b bus.MethodStatus) int {
		return cmp.Or(cmp.Compare(methodGroup(a.Method), methodGroup(b.Method)), strings.Compare(a.Method, b.Method))
	})
}

// methodGroup is the group of a method's row in [sortMethods].
func methodGroup(method string) int {
	switch {
	case schema.IsReserved(method):
		return 2
	case strings.HasPrefix(method, "_"):
		// The labels' names begin so; a tool whose name does too sorts
		// among them, as it is shown without a count of workers too.
		return 1
	}
	return 0
}
