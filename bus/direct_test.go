package bus_test

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// A direct subject is the prefix, "direct" and one token of a worker's id;
// an ingress sends calls only to such a subject, whatever a worker says.
func TestDirectSubjects(t *testing.T) {
	s, err := bus.NewSubjects("acme.toolbus")
	if err != nil {
		t.Fatal(err)
	}
	d := s.Direct("w-1_A")
	if d != "acme.toolbus.direct.w-1_A" || !s.IsDirect(d) {
		t.Fatalf("Direct = %q (IsDirect %v), want acme.toolbus.direct.w-1_A, a direct subject", d, s.IsDirect(d))
	}
	for _, v := range []string{
		"", "acme.toolbus.direct.", "acme.toolbus.direct.a.b", "acme.toolbus.direct.*", "acme.toolbus.direct.>",
		"toolbus.direct.w1", "acme.toolbus.jobs.cancel", "acme.toolbus.direct.w 1",
		"acme.toolbus.direct." + strings.Repeat("a", 65),
	} {
		if s.IsDirect(v) {
			t.Errorf("IsDirect(%q) = true, want false", v)
		}
	}
	if m, ok := s.DirectMethod(d, d+".math.add"); !ok || m != "math.add" {
		t.Errorf("DirectMethod = %q, %v; want math.add", m, ok)
	}
	for _, subj := range []string{d, d + ".", d + "x.echo", "acme.toolbus.call.echo"} {
		if m, ok := s.DirectMethod(d, subj); ok {
			t.Errorf("DirectMethod(%q) = %q, want none", subj, m)
		}
	}
}
