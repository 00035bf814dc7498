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
		stats.End(m, 0, false)
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
			var got []string
			for _, m := range d.State(context.Background(), tt.view).Methods {
				got = append(got, m.Method)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("rows = %q, want %q", got, tt.want)
			}
		})
	}
}
