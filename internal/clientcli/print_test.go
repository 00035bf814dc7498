package clientcli

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/schema"
)

func TestProgressLine(t *testing.T) {
	tests := []struct {
		name string
		rec  schema.JobRecord
		want string
	}{
		{name: "queued", rec: schema.JobRecord{State: schema.JobQueued},
			want: "queued    [------------------------------]   0%"},
		{name: "running with a message", rec: schema.JobRecord{State: schema.JobRunning, Progress: &schema.JobProgress{Percent: 50, Message: "page 3 of 6"}},
			want: "running   [###############---------------]  50%  page 3 of 6"},
		{name: "a long message is cut", rec: schema.JobRecord{State: schema.JobRunning, Progress: &schema.JobProgress{Percent: 10, Message: strings.Repeat("é", 40)}},
			want: "running   [###---------------------------]  10%  " + strings.Repeat("é", 27) + "…"},
		{name: "line breaks become spaces", rec: schema.JobRecord{State: schema.JobRunning, Progress: &schema.JobProgress{Percent: 1, Message: "a\nb\rc"}},
			want: "running   [------------------------------]   1%  a b c"},
		{name: "succeeded is full", rec: schema.JobRecord{State: schema.JobSucceeded, Progress: &schema.JobProgress{Percent: 40}},
			want: "succeeded [##############################] 100%"},
		{name: "failed keeps its progress", rec: schema.JobRecord{State: schema.JobFailed, Progress: &schema.JobProgress{Percent: 40}},
			want: "failed    [############------------------]  40%"},
		{name: "out of range is clamped", rec: schema.JobRecord{State: schema.JobRunning, Progress: &schema.JobProgress{Percent: 250}},
			want: "running   [##############################] 100%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := progressLine(&tt.rec); got != tt.want {
				t.Errorf("progressLine(%+v) =\n%q\nwant\n%q", tt.rec, got, tt.want)
			}
		})
	}
}

// TestPrintToolsDropsControlCharacters: what workers announce reaches the
// operator's terminal without its control characters.
func TestPrintToolsDropsControlCharacters(t *testing.T) {
	var doc discovery.OpenRPC
	doc.Methods = []discovery.OpenRPCMethod{{Name: "evil", Description: "looks fine\x1b[2J\x1b[1;1Hforged\rline"}}
	doc.Problems = []discovery.Problem{{Kind: "conflict", Method: "evil", Workers: []string{"w\x1b]0;title\x07"}, Reason: "bad\x1b[31m"}}
	var out strings.Builder
	printTools(&out, doc)
	if strings.ContainsAny(out.String(), "\x1b\r\x07") {
		t.Errorf("printTools wrote %q, want no control characters", out.String())
	}
	if !strings.Contains(out.String(), "looks fine[2J[1;1Hforgedline") {
		t.Errorf("printTools wrote %q, want the description's printable text", out.String())
	}
}
