package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/node"
)

// TestAPIKey: the key printed once authenticates its caller through the
// --auth-file the command wrote, with the methods it allowed; the file
// keeps its other members and is the user's alone; a name given twice is
// refused.
func TestAPIKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`{"default_allow":["echo"],"keys":[{"name":"old","sha256":"`+auth.HashAPIKey("old-key")+`","allow":["sum"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := execute(t, ctx, "api-key", "agent-7", "--allow", "math.*", "--allow", "sleep", "--auth-file", path)
	if err != nil {
		t.Fatalf("toolbus api-key = %v", err)
	}
	key := regexp.MustCompile(`tbk_[A-Za-z0-9_-]{43}`).FindString(out)
	if key == "" {
		t.Fatalf("toolbus api-key printed %q, want a key", out)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("--auth-file mode = %v, %v, want 0600", st.Mode().Perm(), err)
	}
	cfg, err := node.AuthConfig{Mode: "on", File: path}.Load()
	if err != nil {
		t.Fatalf("the written --auth-file does not load: %v", err)
	}
	if len(cfg.DefaultAllow) != 1 || cfg.DefaultAllow[0] != "echo" {
		t.Errorf("default_allow = %v, want the file's [echo] kept", cfg.DefaultAllow)
	}
	au, err := auth.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, caller, method string
		allowed             bool
	}{
		{key, "agent-7", "math.add", true},
		{key, "agent-7", "sleep", true},
		{key, "agent-7", "sum", false},
		{"old-key", "old", "sum", true},
	} {
		r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/rpc", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set(auth.APIKeyHeader, tc.key)
		p, err := au.Authenticate(r)
		if err != nil || p.Name != tc.caller {
			t.Fatalf("Authenticate(%s) = %+v, %v, want caller %s", tc.key, p, err, tc.caller)
		}
		if got := p.Allows(tc.method); got != tc.allowed {
			t.Errorf("%s allows %s = %v, want %v", tc.caller, tc.method, got, tc.allowed)
		}
	}
	if _, err := execute(t, ctx, "api-key", "agent-7", "--auth-file", path); err == nil || !strings.Contains(err.Error(), "already has a key of agent-7") {
		t.Errorf("a second key of agent-7 = %v, want a refusal naming it", err)
	}
	if _, err := execute(t, ctx, "api-key", "x", "--allow", "bad pattern"); err == nil || !strings.Contains(err.Error(), "--allow") {
		t.Errorf("api-key with a bad pattern = %v, want a refusal naming --allow", err)
	}
	out, err = execute(t, ctx, "api-key", "printed")
	if err != nil || !strings.Contains(out, `"name":"printed"`) || !strings.Contains(out, `"sha256":"`) {
		t.Errorf("api-key without --auth-file = %q, %v, want the entry printed", out, err)
	}
}
