package ingress

import (
	"context"
	"errors"
	"net/http"

	"github.com/toolbus/toolbus/ingress/dashboard"
)

// WithDashboard turns the dashboard at /ui/ on or off (default on). The
// page and its files are served without credentials, since they hold no
// data; GET /ui/api/state, which does, needs them like every other route
// when [WithAuth] is on (the page asks for an API key then), and shows a
// caller what is its own (see [dashboard.State]).
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
	})
	if s.cfg.noDashboard {
		return
	}
	h := s.dash.Handler(func(r *http.Request) dashboard.View {
		return s.requestView(r.Context()).dashboard()
	}, s.log)
	s.mux.Handle("GET /ui/", h)
	s.mux.Handle("GET /ui", h)
}

// Dashboard returns what the dashboard shows an operator now (see
// [dashboard.State]): every caller's data. It reads the jobs within a
// bound of its own (2s).
func (s *Server) Dashboard(ctx context.Context) dashboard.State {
	return s.dash.State(ctx, dashboard.Everything())
}

// Overview is [Server.Dashboard] without the jobs, which cost reads of the
// job store: only what the ingress holds in memory.
func (s *Server) Overview() dashboard.State { return s.dash.Overview(dashboard.Everything()) }
