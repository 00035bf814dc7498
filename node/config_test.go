package node_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/node"
)

func TestWorkerConfigBridgeFlags(t *testing.T) {
	tests := []struct {
		name    string
		cfg     node.WorkerConfig
		wantErr bool
	}{
		{"toolsets only", node.WorkerConfig{Tools: []string{"demo"}}, false},
		{"bridge only", node.WorkerConfig{MCP: node.MCPBridgeConfig{Command: "server --stdio"}}, false},
		{"bridge with a prefix", node.WorkerConfig{MCP: node.MCPBridgeConfig{URL: "http://127.0.0.1:9/mcp", Prefix: "ext"}}, false},
		{"both transports", node.WorkerConfig{MCP: node.MCPBridgeConfig{Command: "server", URL: "http://127.0.0.1:9/mcp"}}, true},
		{"prefix without a server", node.WorkerConfig{Tools: []string{"demo"}, MCP: node.MCPBridgeConfig{Prefix: "ext"}}, true},
		{"nothing to serve", node.WorkerConfig{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Tracing = node.DefaultTracingConfig()
			tt.cfg.Concurrency = node.DefaultWorkerConfig().Concurrency
			if err := tt.cfg.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate(%+v) = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
		})
	}
}

func TestWorkerConfigA2AFlags(t *testing.T) {
	tests := []struct {
		name    string
		cfg     node.A2ABridgeConfig
		wantErr bool
	}{
		{"none", node.A2ABridgeConfig{}, false},
		{"a URL", node.A2ABridgeConfig{URL: "http://127.0.0.1:9"}, false},
		{"a URL, a prefix and a token", node.A2ABridgeConfig{URL: "http://127.0.0.1:9", Prefix: "agent", Token: "t"}, false},
		{"a token and an API key", node.A2ABridgeConfig{URL: "http://127.0.0.1:9", Token: "t", APIKey: "k"}, true},
		{"a prefix without a URL", node.A2ABridgeConfig{Prefix: "agent"}, true},
		{"a token without a URL", node.A2ABridgeConfig{Token: "t"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := node.WorkerConfig{A2A: tt.cfg, Tracing: node.DefaultTracingConfig(), Concurrency: node.DefaultWorkerConfig().Concurrency}
			if cfg.A2A.CardRefresh == 0 {
				cfg.A2A.CardRefresh = node.DefaultWorkerConfig().A2A.CardRefresh
			}
			if tt.cfg.URL == "" {
				cfg.Tools = []string{"demo"}
			}
			if err := cfg.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate(%+v) = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
		})
	}
}

// TestFlagTables binds every table to a flag set of its own, as the
// commands do: a field of a type Bind does not know, or a name given
// twice, panics here rather than in the binary.
func TestFlagTables(t *testing.T) {
	gc, wc, tc := node.DefaultGatewayConfig(), node.DefaultWorkerConfig(), node.DefaultTracingConfig()
	gateway := pflag.NewFlagSet("ingress", pflag.ContinueOnError)
	node.Bind(gateway, &gc, node.GatewayFlags)
	node.Bind(gateway, &tc, node.TracingFlags)
	worker := pflag.NewFlagSet("worker", pflag.ContinueOnError)
	node.Bind(worker, &wc, node.StandaloneWorkerFlags)
	node.Bind(worker, &wc, node.WorkerFlags)
	if err := gateway.Parse([]string{"--listen", "127.0.0.1:0", "--job-ttl", "1h", "--fair=false", "--auth=off"}); err != nil {
		t.Fatal(err)
	}
	if gc.Listen != "127.0.0.1:0" || gc.Jobs.TTL != time.Hour || gc.Fair {
		t.Errorf("parsed %+v, want --listen, --job-ttl and --fair set", gc)
	}
	if err := gc.Validate(); err != nil {
		t.Errorf("Validate() of the defaults and four flags = %v, want nil", err)
	}
}

// TestGatewayConfigJobsFlags: Validate refuses a jobs setting that the
// jobs service or runner would refuse once connected, naming its flag,
// and checks none while jobs are off.
func TestGatewayConfigJobsFlags(t *testing.T) {
	tests := []struct {
		name string
		edit func(*node.JobsConfig)
		flag string // "" for no error
	}{
		{"defaults", func(*node.JobsConfig) {}, ""},
		{"progress interval zero", func(c *node.JobsConfig) { c.ProgressInterval = 0 }, "--job-progress-interval"},
		{"wait backoff out of order", func(c *node.JobsConfig) { c.WaitBackoff, c.MaxWaitBackoff = time.Second, time.Millisecond }, "--job-wait-backoff"},
		{"no attempts", func(c *node.JobsConfig) { c.MaxAttempts = -1 }, "--job-max-attempts"},
		{"off: not checked", func(c *node.JobsConfig) { c.On, c.ProgressInterval = false, 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := node.DefaultGatewayConfig()
			cfg.Auth.Mode = "off"
			cfg.Jobs.On = true
			tt.edit(&cfg.Jobs)
			err := cfg.Validate()
			switch {
			case tt.flag == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.flag != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.flag)):
				t.Errorf("Validate = %v, want an error naming %s first", err, tt.flag)
			}
		})
	}
}

// TestConfigPartsFlags: Validate refuses a setting that a part (the
// aggregator, the ingress, the gateway, the worker runtime, the A2A
// bridge) would refuse once connected, before anything connects, and its
// error names the setting's flag.
func TestConfigPartsFlags(t *testing.T) {
	gateway := []struct {
		name string
		edit func(*node.GatewayConfig)
		flag string
	}{
		{"CPU target past 1", func(c *node.GatewayConfig) { c.FairCPUTarget = 2 }, "--fair-cpu-target"},
		{"negative seats", func(c *node.GatewayConfig) { c.FairSeats = -1 }, "--fair-seats"},
		{"hold bounds out of order", func(c *node.GatewayConfig) { c.FairHoldMin, c.FairHoldMax = time.Second, time.Millisecond }, "--fair-hold-min"},
		{"negative in-flight cap", func(c *node.GatewayConfig) { c.MaxInFlight = -5 }, "--max-in-flight"},
		{"negative ping misses", func(c *node.GatewayConfig) { c.WSPingMisses = -1 }, "--ws-ping-misses"},
		{"negative default timeout", func(c *node.GatewayConfig) { c.DefaultTimeout = -time.Second }, "--default-timeout"},
		{"negative body limit", func(c *node.GatewayConfig) { c.Limits.MaxBodyBytes = -1 }, "--max-body-bytes"},
		{"no heartbeat misses", func(c *node.GatewayConfig) { c.HeartbeatMisses = 0 }, "--heartbeat-misses"},
		{"more replicas than nodes allow", func(c *node.GatewayConfig) { c.Jobs.Replicas = 9 }, "--job-replicas"},
		{"tools retention under a minute", func(c *node.GatewayConfig) { c.ToolsRetention = time.Second }, "--tools-retention"},
		{"negative idempotency TTL", func(c *node.GatewayConfig) {
			c.Idempotency.On, c.Idempotency.TTL = true, -time.Second
		}, "--idempotency-ttl"},
	}
	for _, tt := range gateway {
		t.Run(tt.name, func(t *testing.T) {
			cfg := node.DefaultGatewayConfig()
			cfg.Auth.Mode = "off"
			tt.edit(&cfg)
			checkNamesFlag(t, cfg.Validate(), tt.flag)
		})
	}
	worker := []struct {
		name string
		edit func(*node.WorkerConfig)
		flag string
	}{
		{"negative concurrency", func(c *node.WorkerConfig) { c.Concurrency = -3 }, "--concurrency"},
		{"no card refresh", func(c *node.WorkerConfig) { c.A2A.URL, c.A2A.CardRefresh = "http://127.0.0.1:9", 0 }, "--a2a-card-refresh"},
		{"agent URL not http", func(c *node.WorkerConfig) { c.A2A.URL = "ftp://127.0.0.1:9" }, "--a2a-url"},
	}
	for _, tt := range worker {
		t.Run(tt.name, func(t *testing.T) {
			cfg := node.DefaultWorkerConfig()
			cfg.Tracing = node.DefaultTracingConfig()
			tt.edit(&cfg)
			checkNamesFlag(t, cfg.Validate(), tt.flag)
		})
	}
}

// checkNamesFlag fails the test unless err is an error whose flags, the
// part of its text before the first ": ", include flag.
func checkNamesFlag(t *testing.T, err error, flag string) {
	t.Helper()
	if err == nil {
		t.Fatalf("Validate = nil, want an error naming %s", flag)
	}
	flags, _, _ := strings.Cut(err.Error(), ": ")
	if !slices.Contains(strings.FieldsFunc(flags, func(r rune) bool { return r == ',' || r == ' ' }), flag) {
		t.Errorf("Validate = %v, want an error naming %s first", err, flag)
	}
}

// TestDevConfigPprof: the profiler is off without --pprof and refused on
// an address that is not loopback, naming the flag; Validate starts
// nothing.
func TestDevConfigPprof(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		wantErr    bool
	}{
		{"unset", "", false},
		{"loopback", "127.0.0.1:6060", false},
		{"all interfaces", "0.0.0.0:6060", true},
		{"no host", ":6060", true},
		{"a name", "localhost:6060", true},
		{"no port", "127.0.0.1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := node.DefaultDevConfig()
			c.NATS.Listen, c.Pprof = "", tc.addr
			err := c.Validate()
			switch {
			case tc.wantErr:
				checkNamesFlag(t, err, "--pprof")
			case err != nil:
				t.Errorf("Validate with --pprof %q = %v, want nil", tc.addr, err)
			}
		})
	}
}
