package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// RunRemote runs the kit as `toolbus conform` does, against a worker that
// joins the NATS server of remote: it connects there with remote's
// credentials, passes them on to the worker in the environment, each
// under the variable env names for its flag (so that a worker reads them
// as `toolbus worker` does), and runs cfg ([Run]) on that connection,
// which it closes at the end. cfg's Conn is ignored. Unlike [Run], it
// refuses a start or drain timeout that is not positive, naming its flag.
func RunRemote(ctx context.Context, remote bus.RemoteConfig, env func(flag string) string, cfg Config) (*Report, error) {
	if cfg.StartTimeout <= 0 || cfg.DrainTimeout <= 0 {
		return nil, errors.New("conform: --start-timeout and --drain-timeout must be positive durations, such as 30s")
	}
	opts, err := remote.Options()
	if err != nil {
		return nil, fmt.Errorf("conform: %w", err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts = append([]bus.Option{bus.WithName("toolbus-conform"), bus.WithLogger(quiet)},
		append(opts, bus.WithNATSOptions(nats.Timeout(bus.DefaultConnectTimeout)))...)
	nc, err := bus.Connect(remote.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("conform: NATS not reachable at %s: %w (start one with `toolbus nats`, or give --nats and its credentials)", bus.RedactURL(remote.URL), err)
	}
	defer nc.Close()
	cfg.Conn = nc
	cfg.Env = append(remote.Env(env), cfg.Env...)
	return Run(ctx, cfg)
}
