package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/mcpbridge"
)

// newBridge returns the bridge to the MCP server of --mcp-command or
// --mcp-url, or nil when there is none. It imports no tool of origin, the
// cluster rt serves on.
func newBridge(rt *worker.Runtime, origin string, cfg workerConfig, log *slog.Logger) (*mcpbridge.Bridge, error) {
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
	opts := []mcpbridge.Option{mcpbridge.WithLogger(log), mcpbridge.WithOrigin(origin)}
	if cfg.mcpPrefix != "" {
		opts = append(opts, mcpbridge.WithPrefix(cfg.mcpPrefix))
	}
	b, err := mcpbridge.New(rt, connect, opts...)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return b, nil
}
