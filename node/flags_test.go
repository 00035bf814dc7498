package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/node"
)

// TestExplain checks that each permanent condition of a startup comes
// back wrapped, with the flag that fixes it, and that any other error
// comes back as it was.
func TestExplain(t *testing.T) {
	tests := []struct {
		name string
		err  error
		flag string // a flag the advice names; empty for no advice
	}{
		{"credentials", fmt.Errorf("nats: authorization violation: %w", bus.ErrCredentials), "--nats-password"},
		{"TLS", bus.ErrTLS, "--nats-tls-ca"},
		{"server too old", bus.ErrServerTooOld, "toolbus nats"},
		{"no JetStream", bus.ErrNoJetStream, "--jobs=false"},
		{"replicas", fmt.Errorf("jobs stream: %w", bus.ErrReplicas), "--job-replicas"},
		{"JetStream config", bus.ErrJetStreamConfig, "--job-ttl"},
		{"another error", errors.New("connection refused"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := node.Explain(tt.err)
			if !errors.Is(got, tt.err) {
				t.Fatalf("Explain(%v) = %v, want it to wrap %v", tt.err, got, tt.err)
			}
			if tt.flag == "" {
				if got != tt.err {
					t.Errorf("Explain(%v) = %v, want it unchanged", tt.err, got)
				}
				return
			}
			if !strings.Contains(got.Error(), tt.flag) {
				t.Errorf("Explain(%v) = %q, want it to name %s", tt.err, got, tt.flag)
			}
		})
	}
	if got := node.Explain(nil); got != nil {
		t.Errorf("Explain(nil) = %v, want nil", got)
	}
}
