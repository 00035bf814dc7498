package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"
	"go.uber.org/fx"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/discovery"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/mcpbridge"
)

// newRegistry returns the ingress's registry of announced tools, following
// the announcements on nc while the app runs.
func newRegistry(lc fx.Lifecycle, nc *nats.Conn, prefix string, log *slog.Logger) (*discovery.Registry, error) {
	subjects, err := bus.NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	feed, err := bus.NewAnnouncements(nc, subjects)
	if err != nil {
		return nil, err
	}
	reg, err := discovery.New(discovery.WithLogger(log))
	if err != nil {
		return nil, err
	}
	if err := reg.Start(feed); err != nil {
		return nil, err
	}
	// Hooks stop in reverse order, so the registry closes after the
	// ingress appended later has shut down.
	lc.Append(fx.StopHook(reg.Close))
	return reg, nil
}

// newBridge returns the bridge to the MCP server of --mcp-command or
// --mcp-url, or nil when there is none.
func newBridge(rt *worker.Runtime, cfg workerConfig, log *slog.Logger) (*mcpbridge.Bridge, error) {
	var connect mcpbridge.Connector
	switch {
	case cfg.mcpCommand != "":
		args := strings.Fields(cfg.mcpCommand)
		if len(args) == 0 {
			return nil, errors.New("worker: --mcp-command is blank")
		}
		connect = mcpbridge.Command(args[0], args[1:]...)
	case cfg.mcpURL != "":
		connect = mcpbridge.URL(cfg.mcpURL, nil)
	default:
		return nil, nil
	}
	opts := []mcpbridge.Option{mcpbridge.WithLogger(log)}
	if cfg.mcpPrefix != "" {
		opts = append(opts, mcpbridge.WithPrefix(cfg.mcpPrefix))
	}
	b, err := mcpbridge.New(rt, connect, opts...)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return b, nil
}
