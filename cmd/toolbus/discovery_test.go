package main

import "testing"

func TestWorkerConfigBridgeFlags(t *testing.T) {
	tests := []struct {
		name    string
		cfg     workerConfig
		wantErr bool
	}{
		{"toolsets only", workerConfig{tools: []string{"demo"}}, false},
		{"bridge only", workerConfig{mcpCommand: "server --stdio"}, false},
		{"bridge with a prefix", workerConfig{mcpURL: "http://127.0.0.1:9/mcp", mcpPrefix: "ext"}, false},
		{"both transports", workerConfig{mcpCommand: "server", mcpURL: "http://127.0.0.1:9/mcp"}, true},
		{"prefix without a server", workerConfig{tools: []string{"demo"}, mcpPrefix: "ext"}, true},
		{"nothing to serve", workerConfig{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.validate(); (err != nil) != tt.wantErr {
				t.Errorf("validate(%+v) = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
		})
	}
}

func TestWorkerConfigA2AFlags(t *testing.T) {
	tests := []struct {
		name    string
		cfg     a2aBridgeConfig
		wantErr bool
	}{
		{"none", a2aBridgeConfig{}, false},
		{"a URL", a2aBridgeConfig{url: "http://127.0.0.1:9"}, false},
		{"a URL, a prefix and a token", a2aBridgeConfig{url: "http://127.0.0.1:9", prefix: "agent", token: "t"}, false},
		{"a token and an API key", a2aBridgeConfig{url: "http://127.0.0.1:9", token: "t", apiKey: "k"}, true},
		{"a prefix without a URL", a2aBridgeConfig{prefix: "agent"}, true},
		{"a token without a URL", a2aBridgeConfig{token: "t"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := workerConfig{a2a: tt.cfg}
			if tt.cfg.url == "" {
				cfg.tools = []string{"demo"}
			}
			if err := cfg.validate(); (err != nil) != tt.wantErr {
				t.Errorf("validate(%+v) = %v, want error %v", tt.cfg, err, tt.wantErr)
			}
		})
	}
}
