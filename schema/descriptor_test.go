package schema_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/schema"
)

func TestParseAnnouncement(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		wantErr   error
		wantTools []string
		wantBad   []string
	}{
		{"good", `{"v":1,"worker":"w","interval_ms":1000,"tools":[{"name":"a"},{"name":"b.*","params":{"type":"object"}}]}`,
			nil, []string{"a", "b.*"}, nil},
		{"leaving", `{"v":1,"worker":"w","leaving":true,"tools":[]}`, nil, nil, nil},
		{"unknown members ignored", `{"v":1,"worker":"w","interval_ms":5,"extra":[1],"tools":[{"name":"a","color":"red"}]}`,
			nil, []string{"a"}, nil},
		{"the retired job flag is ignored", `{"v":1,"worker":"w","interval_ms":5,"tools":[{"name":"a","job":true},{"name":"b","job":false}]}`,
			nil, []string{"a", "b"}, nil},
		{"broken tools left out", `{"v":1,"worker":"w","interval_ms":5,"tools":[{"name":"ok"},{"name":"rpc.x"},{"name":"p","params":[1]},{"name":"t","timeout_ms":-1},{"name":7}]}`,
			nil, []string{"ok"}, []string{"rpc.x", "p", "t", ""}},
		{"not JSON", `{`, schema.ErrBadAnnouncement, nil, nil},
		{"other version", `{"v":2,"worker":"w","interval_ms":5}`, schema.ErrBadAnnouncement, nil, nil},
		{"no worker", `{"v":1,"interval_ms":5}`, schema.ErrBadAnnouncement, nil, nil},
		{"no interval", `{"v":1,"worker":"w"}`, schema.ErrBadAnnouncement, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, bad, err := schema.ParseAnnouncement([]byte(tt.data))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseAnnouncement(%s) error = %v, want %v", tt.data, err, tt.wantErr)
			}
			var tools, badNames []string
			for _, d := range a.Tools {
				tools = append(tools, d.Name)
			}
			for _, b := range bad {
				badNames = append(badNames, b.Name)
				if !errors.Is(b.Err, schema.ErrBadDescriptor) {
					t.Errorf("bad tool %q error = %v, want ErrBadDescriptor", b.Name, b.Err)
				}
			}
			if len(tools) != len(tt.wantTools) || len(badNames) != len(tt.wantBad) {
				t.Fatalf("ParseAnnouncement(%s) = tools %v bad %v, want %v and %v", tt.data, tools, badNames, tt.wantTools, tt.wantBad)
			}
			for i := range tools {
				if tools[i] != tt.wantTools[i] {
					t.Errorf("tool %d = %q, want %q", i, tools[i], tt.wantTools[i])
				}
			}
			for i := range badNames {
				if badNames[i] != tt.wantBad[i] {
					t.Errorf("bad tool %d = %q, want %q", i, badNames[i], tt.wantBad[i])
				}
			}
		})
	}
}

func FuzzParseAnnouncement(f *testing.F) {
	f.Add([]byte(`{"v":1,"worker":"w","interval_ms":1000,"tools":[{"name":"a","params":{"type":"object"}}]}`))
	f.Add([]byte(`{"v":1,"worker":"w","leaving":true}`))
	f.Add([]byte(`{"v":1,"worker":"w","interval_ms":1,"tools":[{"name":"*"},{"name":">"},{"name":"a..b"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, bad, err := schema.ParseAnnouncement(data)
		if err != nil {
			return
		}
		for _, d := range a.Tools {
			if err := d.Validate(); err != nil {
				t.Fatalf("accepted tool %q fails Validate: %v", d.Name, err)
			}
		}
		for _, b := range bad {
			if b.Err == nil {
				t.Fatalf("bad tool %q without a reason", b.Name)
			}
		}
	})
}

// TestDescriptorAsks: "asks" (revision 9) is read from an announcement,
// and written only when set, so that a tool that never asks announces what
// it did before.
func TestDescriptorAsks(t *testing.T) {
	a, bad, err := schema.ParseAnnouncement([]byte(`{"v":1,"worker":"w","interval_ms":5,"tools":[{"name":"confirm","asks":true},{"name":"echo"}]}`))
	if err != nil || len(bad) != 0 || len(a.Tools) != 2 {
		t.Fatalf("ParseAnnouncement = %+v, %v, %v", a, bad, err)
	}
	if !a.Tools[0].Asks || a.Tools[1].Asks {
		t.Errorf("asks = %v, %v, want true, false", a.Tools[0].Asks, a.Tools[1].Asks)
	}
	for _, tc := range []struct {
		d    schema.Descriptor
		want string
	}{
		{schema.Descriptor{Name: "confirm", Asks: true}, `{"name":"confirm","asks":true}`},
		{schema.Descriptor{Name: "echo"}, `{"name":"echo"}`},
	} {
		if b, err := json.Marshal(tc.d); err != nil || string(b) != tc.want {
			t.Errorf("json.Marshal(%+v) = %s, %v, want %s", tc.d, b, err, tc.want)
		}
	}
}
