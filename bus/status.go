package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Kinds of toolbus process that serve their status with [ServeStatus].
const (
	KindIngress = "ingress"
	KindWorker  = "worker"
)

// statusKinds are the kinds [GatherStatus] looks for.
var statusKinds = []string{KindIngress, KindWorker}

// DefaultStatusTimeout bounds each status request of [GatherStatus], after
// its discovery window.
const DefaultStatusTimeout = 2 * time.Second

// statusEndpoint is the name of the micro endpoint that answers a status.
const statusEndpoint = "status"

// maxStatusRequests is how many status requests [GatherStatus] has in
// flight at once, so that a large fleet is asked in waves rather than all
// together.
const maxStatusRequests = 64

// Status is what an ingress or a worker answers about itself on its status
// endpoint (see [ServeStatus]), and what [GatherStatus] collects.
type Status struct {
	// Kind is [KindIngress] or [KindWorker].
	Kind string `json:"kind"`
	// ID names the process: the id its snapshot gives (an ingress's or a
	// worker's own id, as its dashboard and discovery announcements show
	// it), else its status service's id. A process found but not read is
	// listed under its status service's id.
	ID string `json:"id"`
	// Host is the host name the process runs on.
	Host string `json:"host"`
	// Version is the process's version as it was built, not sanitised.
	Version string `json:"version"`
	// Started is when the process started.
	Started time.Time `json:"started"`
	// InFlight counts the calls the process holds now.
	InFlight int64 `json:"in_flight"`
	// Methods holds one entry per method the process serves or has seen.
	Methods []MethodStatus `json:"methods"`
	// Pid is the process id on Host.
	Pid int `json:"pid,omitempty"`
	// Trends holds the last minutes of the process's calls, when it
	// keeps them (an ingress does).
	Trends *Trends `json:"trends,omitempty"`
	// RecentErrors holds the newest error answers the process gave,
	// newest first (an ingress gives its last [MaxStatusErrors]), so that
	// a dashboard shows every replica's.
	RecentErrors []ErrorStatus `json:"recent_errors,omitempty"`
	// Extra holds anything else the process reports; [GatherStatus] puts
	// the reason under "error" for a process that was found but whose
	// status could not be read.
	Extra map[string]any `json:"extra,omitempty"`
}

// MaxStatusErrors is how many recent error answers a status holds.
const MaxStatusErrors = 20

// ErrorStatus is one error answer in a [Status].
type ErrorStatus struct {
	Time    time.Time `json:"time"`
	ID      string    `json:"id,omitempty"` // the JSON-RPC id as sent
	Method  string    `json:"method"`
	Code    int       `json:"code"`
	Message string    `json:"message"`
	TraceID string    `json:"trace_id,omitempty"`
	// Caller is who the answer went to, so that a view of one caller's
	// errors leaves out the others'; empty when unauthenticated.
	Caller string `json:"caller,omitempty"`
}

// MethodStatus is what one process reports of one method. The rates,
// counts of the window and percentiles cover the last minute.
type MethodStatus struct {
	Method string `json:"method"`
	// Rate is finished calls per second over the last minute.
	Rate float64 `json:"rate"`
	// Calls and Errors count the last minute's finished calls and those
	// answered with an error; ErrorRate is Errors/Calls (0 without calls).
	Calls     int64   `json:"calls"`
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
	// ToolErrors, CallerErrors and InfraErrors split Errors as
	// schema.Classify does: the tool's own errors, the caller's bad
	// requests, and the failures of toolbus or its workers.
	ToolErrors   int64 `json:"tool_errors"`
	CallerErrors int64 `json:"caller_errors"`
	InfraErrors  int64 `json:"infra_errors"`
	// P50Ms and P99Ms are latency percentiles in milliseconds; zero
	// without calls.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// InFlight counts the calls begun and not finished.
	InFlight int64 `json:"in_flight"`
	// Total counts the calls finished since the process started.
	Total int64 `json:"total"`
	// Workers is how many workers serve the method, as the ingress's
	// discovery registry knows them; nil in a worker's status and at an
	// ingress without discovery.
	Workers *int `json:"workers,omitempty"`
}

// Trends is what one process saw over the last minutes, in steps of
// StepSeconds from Start, oldest first; the last step is under way.
type Trends struct {
	Start       time.Time `json:"start"`
	StepSeconds int       `json:"step_seconds"`
	// InFlight is the peak of calls in flight in each step.
	InFlight []int64 `json:"in_flight"`
	// JobsQueued is the peak of queued jobs in each step, -1 where not
	// known; absent when the process does not watch the jobs.
	JobsQueued []int64 `json:"jobs_queued,omitempty"`
	// Methods holds the busiest methods of the span, sorted by name.
	Methods []MethodTrend `json:"methods"`
}

// MethodTrend is one method in [Trends]: per step, the finished calls,
// their errors split as in [MethodStatus], and the 99th latency
// percentile in milliseconds (0 without calls).
type MethodTrend struct {
	Method       string    `json:"method"`
	Calls        []int64   `json:"calls"`
	ToolErrors   []int64   `json:"tool_errors"`
	CallerErrors []int64   `json:"caller_errors"`
	InfraErrors  []int64   `json:"infra_errors"`
	P99Ms        []float64 `json:"p99_ms"`
}

// Status returns the subject of the status endpoint of the process of kind
// whose status service has id. The id makes it unique per process.
func (s Subjects) Status(kind, id string) string {
	return s.prefix + ".status." + kind + "." + id
}

// statusServiceName is the micro service name of a kind. micro allows
// letters, digits, '-' and '_' only, which both names keep to.
func statusServiceName(kind string) string { return "toolbus-" + kind }

// ServeStatus runs the micro service "toolbus-<kind>" on nc, so that
// operators find the process with `nats micro ls` or [GatherStatus] and read
// its status. kind is [KindIngress] or [KindWorker]; version is the
// process's version in any form: micro wants semantic versions, so the
// service carries a sanitised one ("dev" becomes "0.0.0+dev") and the
// status the version as given.
//
// The service's metadata holds the subjects' prefix, the kind, the host
// name and the version as given. Its one endpoint, "status", listens on
// [Subjects.Status] of its own service id and answers with the JSON of
// snapshot(), in which ServeStatus sets Kind, ID, Host and Version, and
// Started when snapshot left it zero (to the time ServeStatus was called).
// snapshot is called on the subscription's goroutine, one request at a
// time, concurrently with whatever else the process does; a snapshot that
// panics is answered with a service error rather than ending the process.
//
// micro puts endpoints in a queue group ("q") by default. That is harmless
// here, and why the subject carries the service id: a queue group picks one
// of the subscribers of a subject, and a subject unique to the process has
// only one, so every request reaches the process it names. On a shared
// subject a queue group would hand each request to a random instance.
//
// ServeStatus returns once the server has the service's subscriptions, so
// that a [GatherStatus] begun right after, on any connection, finds it; it
// fails when the server does not confirm them within 10 seconds. On a
// connection that is down it does not wait: the service subscribes when
// the connection is back.
//
// Call Stop on the returned service when the process shuts down, before
// draining or closing nc: the process stops answering, and micro puts back
// the connection's closed and error handlers that it wrapped (a closed
// handler set while the service runs would replace micro's, which stops
// the service when the connection closes).
func ServeStatus(nc *nats.Conn, s Subjects, kind, version string, snapshot func() Status) (micro.Service, error) {
	switch {
	case nc == nil:
		return nil, errors.New("bus: status: nil nats connection")
	case s.prefix == "":
		return nil, errors.New("bus: status: zero Subjects; make them with NewSubjects")
	case !slices.Contains(statusKinds, kind):
		return nil, fmt.Errorf("bus: status: kind %q: want %s", kind, strings.Join(statusKinds, " or "))
	case snapshot == nil:
		return nil, errors.New("bus: status: nil snapshot function")
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	started := time.Now()
	svc, err := micro.AddService(nc, micro.Config{
		Name:        statusServiceName(kind),
		Version:     microVersion(version),
		Description: "toolbus " + kind + " status",
		Metadata: map[string]string{
			"prefix":  s.prefix,
			"kind":    kind,
			"host":    host,
			"version": version,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("bus: status service: %w", err)
	}
	id := svc.Info().ID
	handler := micro.HandlerFunc(func(req micro.Request) {
		b, err := statusJSON(snapshot, func(st *Status) {
			st.Kind, st.Host, st.Version, st.Pid = kind, host, version, os.Getpid()
			if st.ID == "" {
				st.ID = id
			}
			if st.Started.IsZero() {
				st.Started = started
			}
		})
		if err != nil {
			_ = req.Error("500", err.Error(), nil) // the requester may be gone
			return
		}
		_ = req.Respond(b)
	})
	if err := svc.AddEndpoint(statusEndpoint, handler, micro.WithEndpointSubject(s.Status(kind, id))); err != nil {
		_ = svc.Stop() // the endpoint's error is the one to report
		return nil, fmt.Errorf("bus: status endpoint: %w", err)
	}
	if err := confirmSubscriptions(nc); err != nil {
		_ = svc.Stop() // the server's silence is the error to report
		return nil, fmt.Errorf("bus: status service: %w", err)
	}
	return svc, nil
}

// subscribeConfirmTimeout bounds how long [ServeStatus] waits for the server
// to confirm the service's subscriptions: a server that does not answer a
// PING in that time is not serving anyone.
const subscribeConfirmTimeout = 10 * time.Second

// confirmSubscriptions waits until the server has processed everything nc
// has sent, subscriptions included (a PING and its PONG: the server handles
// one connection's messages in order). Until then a request from another
// connection finds no responders, though nc has subscribed. A connection
// that is down has nothing to wait for: nats.go sends every subscription
// again when it connects, before anything else.
func confirmSubscriptions(nc *nats.Conn) error {
	if !nc.IsConnected() {
		return nil
	}
	err := nc.FlushTimeout(subscribeConfirmTimeout)
	if errors.Is(err, nats.ErrConnectionClosed) && !nc.IsClosed() {
		// The connection dropped while waiting, which ends the PING
		// rather than the connection; it subscribes again when back.
		return nil
	}
	if err != nil {
		return fmt.Errorf("confirm subscriptions: %w", err)
	}
	return nil
}

// statusJSON encodes snapshot() after fill, and turns a panic of snapshot
// into an error: a status request must not end the process it asks.
func statusJSON(snapshot func() Status, fill func(*Status)) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("status snapshot panicked: %v", r)
		}
	}()
	st := snapshot()
	fill(&st)
	if b, err = json.Marshal(st); err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	return b, nil
}

// semVer is the regular expression semver.org suggests, which micro checks
// versions with.
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// microVersion returns a semantic version for micro: v itself without a
// leading "v" when that is one ("v1.2.3", Go's pseudo-versions), otherwise
// "0.0.0+" and v as build metadata, each run of characters other than
// letters, digits and dots within it one '-' and none at the ends of an
// identifier ("(devel)" becomes "0.0.0+devel"), or "0.0.0" when nothing is
// left.
func microVersion(v string) string {
	if t := strings.TrimPrefix(v, "v"); semVer.MatchString(t) {
		return t
	}
	var ids []string
	for id := range strings.SplitSeq(v, ".") {
		// Runs of other characters become one '-'; build metadata
		// identifiers may not be empty.
		var b strings.Builder
		dash := false
		for _, r := range id {
			if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
				if dash && b.Len() > 0 {
					b.WriteByte('-')
				}
				b.WriteRune(r)
				dash = false
			} else {
				dash = true
			}
		}
		if b.Len() > 0 {
			ids = append(ids, b.String())
		}
	}
	if len(ids) == 0 {
		return "0.0.0"
	}
	return "0.0.0+" + strings.Join(ids, ".")
}

// statusInstance is a status service found by [GatherStatus].
type statusInstance struct {
	kind, id, host, version string
	// subject is the status endpoint's, or "" when the service has none.
	subject string
}

// GatherStatus finds every ingress and worker serving its status under the
// prefix of s and returns their statuses sorted by kind, then id.
//
// It asks the micro services "toolbus-ingress" and "toolbus-worker" for
// their INFO and listens for answers for wait (micro has no end-of-answers
// marker, so the window is the only bound); it returns at once when no
// service of either name exists on the server. Services under another
// prefix are left out. Then it asks each one found for its status, all
// concurrently, each within [DefaultStatusTimeout] and ctx. A process that
// was found but whose status could not be read still appears, with Kind,
// ID, Host and Version from its INFO and the reason under Extra["error"].
//
// It fails when ctx ends before the discovery window closes.
func GatherStatus(ctx context.Context, nc *nats.Conn, s Subjects, wait time.Duration) ([]Status, error) {
	switch {
	case nc == nil:
		return nil, errors.New("bus: gather status: nil nats connection")
	case s.prefix == "":
		return nil, errors.New("bus: gather status: zero Subjects; make them with NewSubjects")
	case wait <= 0:
		return nil, fmt.Errorf("bus: gather status: wait %v: want a positive duration", wait)
	}
	found, err := discoverStatus(ctx, nc, s, wait)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(found))
	sem := make(chan struct{}, maxStatusRequests)
	var wg sync.WaitGroup
	for i, in := range found {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
				out[i] = requestStatus(ctx, nc, in)
			case <-ctx.Done():
				out[i] = in.failed(ctx.Err())
			}
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Status) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// discoverStatus collects the INFO answers of the status services under
// the prefix of s for wait.
func discoverStatus(ctx context.Context, nc *nats.Conn, s Subjects, wait time.Duration) ([]statusInstance, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("bus: gather status: subscribe: %w", err)
	}
	defer sub.Unsubscribe()
	// One connection keeps its order, so the server has the subscription
	// before the requests whose answers it receives.
	for _, kind := range statusKinds {
		subject, err := micro.ControlSubject(micro.InfoVerb, statusServiceName(kind), "")
		if err != nil {
			return nil, fmt.Errorf("bus: gather status: %w", err)
		}
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			return nil, fmt.Errorf("bus: gather status: ask %s: %w", subject, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var found []statusInstance
	noResponders := 0
	for {
		m, err := sub.NextMsgWithContext(wctx)
		// The server answers a request nobody listens to with a 503
		// status, which nats.go reports as ErrNoResponders: no service
		// of that name at all.
		if errors.Is(err, nats.ErrNoResponders) {
			if noResponders++; noResponders == len(statusKinds) {
				return found, nil
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bus: gather status: %w", ctx.Err())
			}
			if wctx.Err() != nil {
				return found, nil
			}
			return nil, fmt.Errorf("bus: gather status: %w", err)
		}
		var info micro.Info
		if json.Unmarshal(m.Data, &info) != nil || info.Metadata["prefix"] != s.prefix {
			continue
		}
		kind := info.Metadata["kind"]
		if !slices.Contains(statusKinds, kind) || info.Name != statusServiceName(kind) ||
			slices.ContainsFunc(found, func(f statusInstance) bool { return f.id == info.ID }) {
			continue
		}
		in := statusInstance{kind: kind, id: info.ID, host: info.Metadata["host"], version: info.Metadata["version"]}
		if in.version == "" {
			in.version = info.Version
		}
		for _, e := range info.Endpoints {
			if e.Name == statusEndpoint {
				in.subject = e.Subject
			}
		}
		found = append(found, in)
	}
}

// requestStatus asks one instance for its status.
func requestStatus(ctx context.Context, nc *nats.Conn, in statusInstance) Status {
	if in.subject == "" {
		return in.failed(errors.New("no status endpoint"))
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultStatusTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, in.subject, nil)
	if err != nil {
		return in.failed(err)
	}
	if e := m.Header.Get(micro.ErrorHeader); e != "" {
		return in.failed(fmt.Errorf("status endpoint answered %s %s", m.Header.Get(micro.ErrorCodeHeader), e))
	}
	var st Status
	if err := json.Unmarshal(m.Data, &st); err != nil {
		return in.failed(fmt.Errorf("decode status: %w", err))
	}
	if st.Kind == "" {
		st.Kind = in.kind
	}
	if st.ID == "" {
		st.ID = in.id
	}
	return st
}

// failed is the status of an instance that did not answer, with why.
func (in statusInstance) failed(err error) Status {
	return Status{
		Kind:    in.kind,
		ID:      in.id,
		Host:    in.host,
		Version: in.version,
		Extra:   map[string]any{"error": err.Error()},
	}
}
