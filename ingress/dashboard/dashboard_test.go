package dashboard

import (
	"context"
	"slices"
	"testing"

	"github.com/toolbus/toolbus/internal/callstats"
)

func TestViewScopesRows(t *testing.T) {
	stats := callstats.New()
	for _, m := range []string{"echo", "secret"} {
		stats.Begin(m)
		stats.End(m, 0, 0)
	}
	d := New(Source{ID: "i1", Stats: stats, InFlight: func() int64 { return 0 }})
	tests := []struct {
		name string
		view View
		want []string
	}{
		{"zero view sees no row", View{}, nil},
		{"everything", Everything(), []string{"echo", "secret"}},
		{"one method", View{Caller: "bob", MayCall: func(n string) bool { return n == "echo" }}, []string{"echo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := d.State(context.Background(), tt.view, Query{})
			var got, trends []string
			for _, m := range st.Methods {
				got = append(got, m.Method)
			}
			for _, m := range st.Trends.Methods {
				trends = append(trends, m.Method)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("rows = %q, want %q", got, tt.want)
			}
			if !slices.Equal(trends, tt.want) {
				t.Errorf("trends = %q, want %q", trends, tt.want)
			}
			if tt.view.AllCallers != (st.Trends.InFlightSVG != "") {
				t.Errorf("in-flight chart shown = %v, want %v (an operator's alone)", st.Trends.InFlightSVG != "", tt.view.AllCallers)
			}
		})
	}
}
