package node

import (
	"errors"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/listen"
)

// DevConfig is everything `toolbus dev` runs in one process: an embedded
// NATS server, a gateway and a worker on it. Each field names, in
// parentheses, the flag that sets it ([DevFlags], and the gateway's and
// worker's own), and its default, which [DefaultDevConfig] holds. The
// zero value is not usable.
type DevConfig struct {
	// Gateway is the ingress: on "127.0.0.1:8080", with authentication
	// off, and [DefaultGatewayConfig] otherwise.
	Gateway GatewayConfig
	// Worker is the worker: without a metrics port of its own (the
	// ingress serves its metrics) nor a heap goal of its own (the
	// gateway's is the process's), and [DefaultWorkerConfig] otherwise.
	// It serves under the gateway's prefix.
	Worker WorkerConfig
	// NATS is the embedded server: Listen (--nats-listen) is its TCP
	// address for outside clients, empty for none, default
	// "127.0.0.1:4222"; Token (--nats-token) the token they present,
	// default one generated at start; DataDir (--data) its JetStream
	// store, default a temporary directory.
	NATS bus.EmbeddedConfig
	// LocalCalls (--local-calls) runs a call of a tool of the worker in
	// the process while the tool has a free slot. Default true.
	LocalCalls bool
	// Pprof (--pprof) is a loopback address where the process serves the
	// Go profiler's endpoints, to profile it under load ([ServeProfiler]);
	// empty for none, the default.
	Pprof string
}

// DefaultDevConfig returns the settings of `toolbus dev` without flags,
// which `toolbus demo` and `toolbus bench` start from too.
func DefaultDevConfig() DevConfig {
	c := DevConfig{Gateway: DefaultGatewayConfig(), Worker: DefaultWorkerConfig(),
		NATS: bus.EmbeddedConfig{Listen: "127.0.0.1:4222"}, LocalCalls: true}
	c.Gateway.Listen, c.Gateway.Auth.Mode = "127.0.0.1:8080", "off"
	// The gateway keeps the process's heap goal.
	c.Worker.MetricsListen, c.Worker.GCHeadroom = "", 0
	return c
}

// Validate checks c as [WorkerConfig.Validate] and
// [GatewayConfig.Validate] do, and that the embedded server can listen
// on its address.
func (c DevConfig) Validate() error {
	if err := errors.Join(c.Worker.Validate(), c.Gateway.Validate(), checkProfiler(c.Pprof)); err != nil {
		return err
	}
	if c.NATS.Listen != "" {
		return listen.Check(c.NATS.Listen, `choose another address with --nats-listen, or --nats-listen "" for none`)
	}
	return nil
}
