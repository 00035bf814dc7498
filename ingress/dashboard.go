package ingress

import (
	"context"
	"errors"
	"net/http"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/schema"
)

// WithDashboard turns the dashboard at /ui/ on or off (default on). With
// [WithAuth] on, the page asks for an API key, which the ingress checks
// and keeps in a cookie of the browser's session for the dashboard's
// paths alone (HttpOnly, SameSite=Strict, Secure over TLS); the page and
// its data at GET /ui/api/state then show the key's caller what is its
// own, an operator everything (see [dashboard.State]). The data route
// takes the usual Authorization or X-Api-Key header too.
func WithDashboard(on bool) Option {
	return func(c *config) error {
		c.noDashboard = !on
		return nil
	}
}

// WithJobStats gives the dashboard its jobs section: stats reads the
// counts by state and the newest q.Recent jobs, of q.Caller alone unless
// q.All is set.
func WithJobStats(stats func(ctx context.Context, q dashboard.JobsQuery) (dashboard.JobsState, error)) Option {
	return func(c *config) error {
		if stats == nil {
			return errors.New("ingress: nil job stats")
		}
		c.jobStats = stats
		return nil
	}
}

// WithStatusGather lets the dashboard show the whole cluster: gather
// returns the status of every ingress and worker (as [bus.GatherStatus]
// does), from which it reads every replica's trends and the workers'
// processes. Without it the dashboard shows this replica's trends.
func WithStatusGather(gather func(ctx context.Context) ([]bus.Status, error)) Option {
	return func(c *config) error {
		if gather == nil {
			return errors.New("ingress: nil status gather")
		}
		c.gather = gather
		return nil
	}
}

// WithNATSState gives the dashboard its NATS section, which describe
// fills as this replica sees the bus.
func WithNATSState(describe func(ctx context.Context) dashboard.NATSState) Option {
	return func(c *config) error {
		if describe == nil {
			return errors.New("ingress: nil NATS state")
		}
		c.natsState = describe
		return nil
	}
}

// WithID names this ingress replica in its dashboard and status answers
// (default: a random id made at [New]).
func WithID(id string) Option {
	return func(c *config) error {
		if id == "" {
			return errors.New("ingress: empty id")
		}
		c.id = id
		return nil
	}
}

// setupDashboard makes the dashboard and, unless it is off, adds its
// routes.
func (s *Server) setupDashboard() {
	s.dash = dashboard.New(dashboard.Source{
		ID: s.id, Stats: s.stats, InFlight: s.inFlight.Load, Registry: s.cfg.registry, Jobs: s.cfg.jobStats,
		Gather: s.cfg.gather, NATS: s.cfg.natsState, Row: s.dashboardRow,
		Fair: s.FairStats, FairMetrics: s.FairMetrics(),
	})
	if s.cfg.noDashboard {
		return
	}
	h := s.dash.Handler(dashboardAccess{s}, s.log)
	s.mux.Handle("/ui/", h)
	s.mux.Handle("GET /ui", h)
}

// dashboardAccess tells the dashboard who asks, by the ingress's
// authentication: the dashboard's routes pass the authentication
// middleware ([dashboard.Open]) because a browser sends the page's key as
// a cookie, which the dashboard reads and hands to View.
type dashboardAccess struct{ s *Server }

var _ dashboard.Access = dashboardAccess{}

// View returns the view of r's caller: by r's own credentials, as on
// every other route, or else by key, the API key (or bearer token) the
// dashboard's cookie holds, checked as if it came in the Authorization
// header. An operator's key sees everything and a caller's key its own,
// as with the header.
func (a dashboardAccess) View(r *http.Request, key string) (dashboard.View, error) {
	s := a.s
	if s.auth == nil {
		return s.view(nil).dashboard(), nil
	}
	p, err := s.auth.Authenticate(r)
	if errors.Is(err, auth.ErrNoCredentials) && key != "" {
		p, err = s.auth.Credential(key)
	}
	if err != nil {
		return dashboard.View{}, err
	}
	return s.view(p).dashboard(), nil
}

// Refuse answers HTTP 401 as the authentication middleware does.
func (a dashboardAccess) Refuse(w http.ResponseWriter, r *http.Request, err error) {
	a.s.unauthorized(w, r, err)
}

// dashboardRow names the dashboard's row of method as [Server.methodLabel]
// names the calls of method in the statistics, without handing out a
// label: "_invalid" for a name the ingress never routes, "_unknown" with
// discovery for a method no worker ever announced, else the method.
func (s *Server) dashboardRow(method string) string {
	switch {
	case schema.ValidateMethod(method) != nil:
		return labelInvalid
	case schema.IsReserved(method):
		if s.router != nil && s.router.extension(method) != nil {
			return method
		}
		return labelInvalid
	case s.cfg.registry != nil && !s.cfg.registry.Known(method):
		return labelUnknown
	}
	return method
}

// Dashboard returns what the dashboard shows an operator now (see
// [dashboard.State]): every caller's data. It reads the jobs within a
// bound of its own (2s).
func (s *Server) Dashboard(ctx context.Context) dashboard.State {
	return s.dash.State(ctx, dashboard.Everything(), dashboard.Query{})
}

// Trends returns this replica's last 15 minutes of calls, for its status
// answer.
func (s *Server) Trends() bus.Trends { return s.stats.Trends(0) }

// Overview is [Server.Dashboard] without the jobs, which cost reads of the
// job store: only what the ingress holds in memory.
func (s *Server) Overview() dashboard.State { return s.dash.Overview(dashboard.Everything()) }

// RecordJobsQueued records the depth of the jobs queue for the
// dashboard's trends; the gateway samples it in the background, and the
// dashboard also records it whenever an operator's view reads the jobs.
func (s *Server) RecordJobsQueued(n int64) { s.stats.RecordJobsQueued(n) }

// RecentErrors returns the newest error answers of this replica, at most
// [bus.MaxStatusErrors], newest first, for its status answer.
func (s *Server) RecentErrors() []bus.ErrorStatus {
	var out []bus.ErrorStatus
	for _, e := range s.stats.RecentErrors() {
		if len(out) == bus.MaxStatusErrors {
			break
		}
		out = append(out, bus.ErrorStatus{Time: e.Time, ID: e.ID, Method: e.Method, Code: e.Code,
			Message: e.Message, TraceID: e.TraceID, Caller: e.Caller})
	}
	return out
}
