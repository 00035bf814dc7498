package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

func TestRegistryCheck(t *testing.T) {
	r := newTestRegistry(t)
	r.Observe(ann("w1", addTool, echoTool, famTool))
	r.Observe(ann("w2", `{"name":"gone","params":{"type":"object","required":["q"]}}`))
	r.Observe(leave("w2"))
	r.Observe(ann("w3", `{"name":"split","params":{"type":"array"}}`))
	r.Observe(ann("w4", `{"name":"split","params":{"type":"object"}}`))
	tests := []struct {
		name        string
		method      string
		params      string
		validate    bool
		wantWaiting string
		wantErr     *schema.Error
		wantReason  string
	}{
		{"live tool, params fit", "math.add", `{"a":1}`, true, "", nil, ""},
		{"live tool, params break the schema", "math.add", `{"a":"x"}`, true, "", schema.ErrInvalidParams, ""},
		{"live tool, validation off", "math.add", `{"a":"x"}`, false, "", nil, ""},
		{"live pattern's schema applies", "fam.one", `{}`, true, "", schema.ErrInvalidParams, ""},
		{"known tool without workers waits", "gone", `{"q":1}`, true, schema.ReasonNoWorkers, nil, ""},
		{"known tool's schema still applies", "gone", `{}`, true, "", schema.ErrInvalidParams, ""},
		{"absent params are not checked", "gone", ``, true, schema.ReasonNoWorkers, nil, ""},
		{"a conflict keeps the incumbent's schema", "split", `{}`, true, "", schema.ErrInvalidParams, ""},
		{"params that fit the incumbent's schema pass", "split", `[1]`, true, "", nil, ""},
		{"never known", "never", `{}`, true, "", schema.ErrMethodNotFound, schema.ReasonUnknownMethod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var params json.RawMessage
			if tt.params != "" {
				params = json.RawMessage(tt.params)
			}
			waiting, e := r.Check(tt.method, params, tt.validate)
			if waiting != tt.wantWaiting || (tt.wantErr == nil) != (e == nil) || (e != nil && !errors.Is(e, tt.wantErr)) {
				t.Fatalf("Check(%q, %s) = %q, %v; want %q, %v", tt.method, tt.params, waiting, e, tt.wantWaiting, tt.wantErr)
			}
			if tt.wantReason != "" && e.Reason() != tt.wantReason {
				t.Errorf("Check(%q) reason = %q, want %q", tt.method, e.Reason(), tt.wantReason)
			}
		})
	}
}

func TestRegistryRetention(t *testing.T) {
	r, err := New(WithLogger(discard), WithRetention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }

	r.Observe(ann("w1", addTool, famTool))
	now = now.Add(10 * time.Minute) // live tools do not age
	r.expire(now)
	r.Observe(leave("w1"))
	if !r.Known("math.add") || !r.Known("fam.x") {
		t.Fatalf("Known(math.add), Known(fam.x) = %v, %v after the worker left; want true", r.Known("math.add"), r.Known("fam.x"))
	}
	now = now.Add(time.Hour)
	r.expire(now)
	if got, want := r.Names(), []string{"fam.*", "math.add"}; !slices.Equal(got, want) {
		t.Errorf("Names() at the end of the retention = %v, want %v", got, want)
	}
	if waiting, e := r.Check("math.add", nil, true); waiting != schema.ReasonNoWorkers || e != nil {
		t.Errorf("Check(math.add) at the end of the retention = %q, %v; want %q", waiting, e, schema.ReasonNoWorkers)
	}
	now = now.Add(time.Second)
	r.expire(now)
	if r.Known("math.add") || len(r.Names()) != 0 {
		t.Errorf("past the retention: Known(math.add) = %v, Names() = %v; want false, none", r.Known("math.add"), r.Names())
	}
	if _, e := r.Check("math.add", nil, true); !errors.Is(e, schema.ErrMethodNotFound) {
		t.Errorf("Check(math.add) past the retention = %v, want -32601", e)
	}

	// A worker that comes back makes the tool known again.
	r.Observe(ann("w2", addTool))
	if !r.Known("math.add") {
		t.Error("Known(math.add) = false once a worker serves it again")
	}
}

func TestWithRetention(t *testing.T) {
	if _, err := New(WithRetention(time.Second)); err == nil {
		t.Error("New(WithRetention(1s)) = nil error, want one: a retention under a minute")
	}
}

func TestServedAndUnservedRetention(t *testing.T) {
	r := newTestRegistry(t) // the default retention, a week
	start := time.Unix(1000, 0)
	now := start
	r.now = func() time.Time { return now }

	// Junk: thousands of names announced once, with the longest interval
	// a listener honours.
	const junk = 4000
	for i := range junk {
		name := fmt.Sprintf("junk.n%d", i)
		r.ObserveMethod(name, fmt.Appendf(nil, `{"v":1,"worker":"noisy","interval_ms":86400000,"tools":[{"name":%q}]}`, name))
	}
	// A real tool, announced every minute for as long as being served
	// takes.
	for end := start.Add(ServedAfter); !now.After(end); now = now.Add(time.Minute) {
		r.ObserveMethod("report.build", []byte(`{"v":1,"worker":"w1","interval_ms":60000,"tools":[{"name":"report.build"}]}`))
		r.expire(now)
	}
	r.ObserveMethod("report.build", leaving("w1", "report.build"))
	left := now
	now = start.Add(missedAnnouncements*bus.MaxAnnounceInterval + time.Second)
	r.expire(now)
	junkGone := now
	if got := len(r.Names()); got != junk+1 {
		t.Fatalf("%d known tools once every worker went, want %d", got, junk+1)
	}

	now = junkGone.Add(UnservedRetention)
	r.expire(now)
	if !r.Known("junk.n0") {
		t.Errorf("Known(junk.n0) = false %v after its worker went, want true until %v", UnservedRetention, UnservedRetention)
	}
	now = now.Add(time.Second)
	r.expire(now)
	if got, want := r.Names(), []string{"report.build"}; !slices.Equal(got, want) {
		t.Errorf("Names() past %v = %d names, want %v: the junk was never served", UnservedRetention, len(got), want)
	}
	if _, e := r.Check("junk.n1", nil, true); !errors.Is(e, schema.ErrMethodNotFound) {
		t.Errorf("Check(junk.n1) = %v, want -32601", e)
	}

	now = left.Add(DefaultRetention)
	r.expire(now)
	if !r.Known("report.build") {
		t.Errorf("Known(report.build) = false at the end of the retention, want true: it was served")
	}
	now = now.Add(time.Second)
	r.expire(now)
	if r.Known("report.build") {
		t.Errorf("Known(report.build) = true past the retention, want false")
	}
}

func TestServedNeedsAnUnbrokenSpan(t *testing.T) {
	r := newTestRegistry(t)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	// Announced now and then, each time for a moment: the spans never
	// add up.
	for range 10 {
		r.ObserveMethod("flicker", one("w1", `{"name":"flicker"}`))
		r.ObserveMethod("flicker", leaving("w1", "flicker"))
		now = now.Add(ServedAfter / 2)
		r.expire(now)
	}
	now = now.Add(UnservedRetention + time.Second)
	r.expire(now)
	if r.Known("flicker") {
		t.Errorf("Known(flicker) = true %v after its last worker went, want false: it was never announced for %v without a break",
			UnservedRetention, ServedAfter)
	}
}
