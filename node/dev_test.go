package node_test

import (
	"net"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/node"
)

// TestDevConfigNATSListen: the embedded server's address is checked
// before anything starts, and a taken one names its flag.
func TestDevConfigNATSListen(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tests := []struct {
		name    string
		listen  string
		wantErr bool
	}{
		{"none", "", false},
		{"a free port", "127.0.0.1:0", false},
		{"taken", taken.Addr().String(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := node.DefaultDevConfig()
			c.NATS.Listen = tt.listen
			err := c.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() with --nats-listen %q = %v, want error %v", tt.listen, err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "--nats-listen") {
				t.Errorf("Validate() = %v, want it to name --nats-listen", err)
			}
		})
	}
}
