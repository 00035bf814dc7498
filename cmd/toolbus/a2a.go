package main

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/a2abridge"
)

// a2aBridgeConfig is what a worker bridges a remote A2A agent with.
type a2aBridgeConfig struct {
	url          string
	prefix       string
	token        string
	apiKey       string
	apiKeyHeader string
	refresh      time.Duration
}

func (c *a2aBridgeConfig) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&c.url, "a2a-url", "", "serve the skills of the A2A agent at this base URL (its card is read at /.well-known/agent-card.json under it) or card URL (ending in .json)")
	f.StringVar(&c.prefix, "a2a-prefix", "", "put this prefix and a dot before the bridged A2A skills' method names")
	f.StringVar(&c.token, "a2a-token", "", "bearer token sent to the A2A agent (prefer the environment variable: a flag shows in the process list)")
	f.StringVar(&c.apiKey, "a2a-api-key", "", "API key sent to the A2A agent in --a2a-api-key-header (prefer the environment variable)")
	f.StringVar(&c.apiKeyHeader, "a2a-api-key-header", a2abridge.DefaultAPIKeyHeader, "header that carries --a2a-api-key")
	f.DurationVar(&c.refresh, "a2a-card-refresh", a2abridge.DefaultCardRefresh, "how often the A2A agent's card is read again, to serve new skills and withdraw dropped ones")
}

// validate checks that the A2A flags fit together; the worker calls it
// before anything connects. The URL and prefix are checked by
// [a2abridge.New].
func (c *a2aBridgeConfig) validate() error {
	if c.url == "" {
		if c.prefix != "" || c.token != "" || c.apiKey != "" {
			return errors.New("worker: --a2a-prefix, --a2a-token and --a2a-api-key need --a2a-url")
		}
		return nil
	}
	if c.token != "" && c.apiKey != "" {
		return errors.New("worker: give --a2a-token or --a2a-api-key, not both")
	}
	return nil
}

func (c *a2aBridgeConfig) options(log *slog.Logger) []a2abridge.Option {
	var opts []a2abridge.Option
	if log != nil {
		opts = append(opts, a2abridge.WithLogger(log))
	}
	if c.prefix != "" {
		opts = append(opts, a2abridge.WithPrefix(c.prefix))
	}
	if c.token != "" {
		opts = append(opts, a2abridge.WithBearerToken(c.token))
	}
	if c.apiKey != "" {
		opts = append(opts, a2abridge.WithAPIKey(c.apiKeyHeader, c.apiKey))
	}
	return append(opts, a2abridge.WithCardRefresh(c.refresh))
}

// bridge returns the bridge to the agent of --a2a-url, or nil when there
// is none.
func (c *a2aBridgeConfig) bridge(rt *worker.Runtime, log *slog.Logger) (*a2abridge.Bridge, error) {
	if c.url == "" {
		return nil, nil
	}
	b, err := a2abridge.New(rt, c.url, c.options(log)...)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return b, nil
}
