package bus_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

func TestAnnounceMethod(t *testing.T) {
	s, err := bus.NewSubjects("acme.toolbus")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		method  string
		want    string
		wantErr bool
	}{
		{"a method", "math.add", "acme.toolbus.discovery.announce.math.add", false},
		{"one token", "echo", "acme.toolbus.discovery.announce.echo", false},
		{"a pattern of one token", "math.*", "acme.toolbus.discovery.announce.math.%2A", false},
		{"a pattern of the rest", "math.>", "acme.toolbus.discovery.announce.math.%3E", false},
		{"wildcards anywhere", "*.add", "acme.toolbus.discovery.announce.%2A.add", false},
		{"the grammar's other characters", "a/b:c-d_e", "acme.toolbus.discovery.announce.a/b:c-d_e", false},
		{"outside the grammar", "math add", "", true},
		{"an empty token", "math..add", "", true},
		{"reserved", "rpc.discover", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.AnnounceMethod(tt.method)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("AnnounceMethod(%q) = %q, %v; want %q, error %v", tt.method, got, err, tt.want, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if back, ok := s.AnnouncedMethod(got); !ok || back != tt.method {
				t.Errorf("AnnouncedMethod(%q) = %q, %v; want %q", got, back, ok, tt.method)
			}
		})
	}
	for _, subject := range []string{"acme.toolbus.discovery.announce", "acme.toolbus.discovery.announce.", "toolbus.discovery.announce.echo", "acme.toolbus.call.echo"} {
		if m, ok := s.AnnouncedMethod(subject); ok {
			t.Errorf("AnnouncedMethod(%q) = %q, true; want false", subject, m)
		}
	}
}

func TestCheckDescriptorLimits(t *testing.T) {
	tests := []struct {
		name    string
		d       schema.Descriptor
		wantErr bool
	}{
		{"small", schema.Descriptor{Name: "t", Description: "adds"}, false},
		{"a description at the limit", schema.Descriptor{Name: "t", Description: strings.Repeat("d", bus.MaxDescriptionBytes)}, false},
		{"a description over it", schema.Descriptor{Name: "t", Description: strings.Repeat("d", bus.MaxDescriptionBytes+1)}, true},
		{"a version over its limit", schema.Descriptor{Name: "t", Version: strings.Repeat("1", bus.MaxVersionBytes+1)}, true},
		{"schemas over the limit", schema.Descriptor{Name: "t", Params: json.RawMessage(`{"enum":["` + strings.Repeat("x", bus.MaxDescriptorBytes) + `"]}`)}, true},
		{"white space is not counted", schema.Descriptor{Name: "t", Params: json.RawMessage(`{"type":` + strings.Repeat(" ", bus.MaxDescriptorBytes) + `"object"}`)}, false},
		{"'<' counts as one byte", schema.Descriptor{Name: "t", Params: json.RawMessage(`{"pattern":"` + strings.Repeat("<", bus.MaxDescriptorBytes/2) + `"}`)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := bus.CheckDescriptorLimits(tt.d)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, schema.ErrBadDescriptor)) {
				t.Errorf("CheckDescriptorLimits = %v, want error %v wrapping ErrBadDescriptor", err, tt.wantErr)
			}
		})
	}
}

// heard is one announcement a Watch delivered.
type heard struct {
	method string
	a      schema.Announcement
}

func TestAnnouncementsWatch(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, _ := bus.NewSubjects(bus.DefaultPrefix)
	feed, err := bus.NewAnnouncements(nc, s)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan heard, 16)
	stop, err := feed.Watch(func(method string, data []byte) {
		a, _, err := schema.ParseAnnouncement(data)
		if err != nil {
			t.Errorf("ParseAnnouncement(%s): %v", data, err)
		}
		got <- heard{method, a}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	ann := schema.Announcement{V: schema.AnnouncementVersion, Worker: "w1", IntervalMS: 1000,
		Tools: []schema.Descriptor{{Name: "math.add"}, {Name: "fam.>"}}}
	if err := bus.PublishAnnouncement(nc, s, ann); err != nil {
		t.Fatal(err)
	}
	// An older worker's whole announcement, on the shared subject.
	if err := nc.Publish(s.Announce(), []byte(`{"v":1,"worker":"old","interval_ms":1000,"tools":[{"name":"echo"},{"name":"sleep"}]}`)); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"math.add": "math.add", "fam.>": "fam.>", "": "echo,sleep"}
	for range len(want) {
		select {
		case h := <-got:
			var names []string
			for _, d := range h.a.Tools {
				names = append(names, d.Name)
			}
			if w, ok := want[h.method]; !ok || strings.Join(names, ",") != w {
				t.Errorf("heard %v on the subject of %q, want %q", names, h.method, w)
			}
			delete(want, h.method)
		case <-time.After(10 * time.Second):
			t.Fatalf("not heard within 10s: %v", want)
		}
	}
}

func TestPublishAnnouncementRefusesBadNames(t *testing.T) {
	e := startEmbedded(t, bus.EmbeddedConfig{})
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, _ := bus.NewSubjects(bus.DefaultPrefix)
	ann := schema.Announcement{V: schema.AnnouncementVersion, Worker: "w1", IntervalMS: 1000,
		Tools: []schema.Descriptor{{Name: "no spaces"}}}
	if err := bus.PublishAnnouncement(nc, s, ann); err == nil {
		t.Error("PublishAnnouncement of a name outside the grammar = nil, want an error")
	}
}
