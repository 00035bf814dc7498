package node_test

import (
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
			cfg := node.WorkerConfig{A2A: tt.cfg, Tracing: node.DefaultTracingConfig()}
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
