package listen_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/listen"
)

func TestOpenAndCheck(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name, addr string
		says       string // "" when it must succeed
	}{
		{name: "a free port", addr: "127.0.0.1:0"},
		{name: "in use", addr: taken.Addr().String(), says: "is already in use by another program: stop it, or use --x"},
		{name: "not an address", addr: "127.0.0.1:http-ish", says: "cannot listen on 127.0.0.1:http-ish ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := listen.Check(tc.addr, "use --x")
			if tc.says == "" {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want nil", tc.addr, err)
				}
				return
			}
			var le *listen.Error
			if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.says) || !strings.HasSuffix(err.Error(), "use --x") {
				t.Fatalf("Check(%q) = %v, want a *listen.Error saying %q and ending with the fix", tc.addr, err, tc.says)
			}
			if _, err := listen.Open(tc.addr, "use --x"); !errors.As(err, &le) {
				t.Fatalf("Open(%q) = %v, want a *listen.Error", tc.addr, err)
			}
		})
	}
}
