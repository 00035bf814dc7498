package proc

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestStreamFindsTheReadyLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string // the first submatch; "" for none
	}{
		{"in one write", []string{"ready at :1\n"}, ":1"},
		{"after other lines", []string{"a\nb\nready at :2\nc\n"}, ":2"},
		{"split across writes", []string{"rea", "dy at", " :3", "\n"}, ":3"},
		{"ended by CRLF", []string{"ready at :4\r\n"}, ":4"},
		{"not yet ended", []string{"ready at :5"}, ""},
		{"within a line", []string{"not ready at :6\n"}, ""},
		{"the first of two", []string{"ready at :7\nready at :8\n"}, ":7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Process{readyRE: regexp.MustCompile(`^ready at (\S+)$`), readyCh: make(chan struct{})}
			s := &stream{p: p}
			for _, w := range tc.writes {
				s.Write([]byte(w))
			}
			got := ""
			if m := p.Ready(); m != nil {
				got = m[1]
			}
			if got != tc.want {
				t.Errorf("writes %q: ready %q, want %q", tc.writes, got, tc.want)
			}
		})
	}
}

func TestStreamKeepsTheLastLines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   []string
	}{
		{"nothing", nil, nil},
		{"blank lines dropped", []string{"a\n\n  \nb"}, []string{"a", "b"}},
		{"the last ten", []string{strings.Repeat("x\n", 5) + "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"},
			[]string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}},
		{"a partial first line dropped once the tail is full", []string{"first line\n", strings.Repeat("y", tailBytes-3) + "\nz\n"},
			[]string{"z"}},
		{"a write longer than the tail", []string{strings.Repeat("y", 2*tailBytes) + "\nend\n"}, []string{"end"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stream{p: &Process{}}
			for _, w := range tc.writes {
				s.Write([]byte(w))
			}
			if got := s.last(tailLines); !slices.Equal(got, tc.want) {
				t.Errorf("writes of %d bytes: last = %q, want %q", len(strings.Join(tc.writes, "")), got, tc.want)
			}
		})
	}
}
