package bus_test

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

func TestOrigin(t *testing.T) {
	start := func() *bus.Embedded {
		e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		return e
	}
	connect := func(e *bus.Embedded) string {
		nc, err := e.Connect()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		return bus.Origin(nc, "toolbus")
	}
	a, b := start(), start()
	first, again, other := connect(a), connect(a), connect(b)
	if !strings.HasPrefix(first, "toolbus@") || first != again {
		t.Errorf("Origin of two connections to one server = %q and %q, want one toolbus@...", first, again)
	}
	if other == first {
		t.Errorf("Origin of another server = %q, the same as the first's", other)
	}
	if got := bus.Origin(nil, "toolbus"); got != "" {
		t.Errorf("Origin(nil) = %q, want empty", got)
	}
}
