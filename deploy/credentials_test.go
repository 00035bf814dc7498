package deploy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestCredentialsReadByServer checks that the server reads every generated
// password from the environment as it was generated, whatever its
// characters.
func TestCredentialsReadByServer(t *testing.T) {
	t.Setenv("NATS_SERVER_NAME", "nats-1")
	for range 50 {
		creds, err := NewCredentials()
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range creds.Users() {
			t.Setenv(PasswordVar(u), creds.Password(u))
		}
		opts, err := server.ProcessConfigFile("nats/cluster-secure.conf")
		if err != nil {
			t.Fatalf("cluster-secure.conf with generated passwords: %v", err)
		}
		for _, u := range opts.Users {
			if want := creds.Password(u.Username); u.Password != want {
				t.Fatalf("the server read %s's password as %q, want %q", u.Username, u.Password, want)
			}
		}
	}
}

func TestNewCredentials(t *testing.T) {
	creds, err := NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(creds.Users(), ","); got != "ingress,worker" {
		t.Errorf("NewCredentials().Users() = %s, want ingress,worker", got)
	}
	if a, b := creds.Password("ingress"), creds.Password("worker"); len(a) < 40 || len(b) < 40 || a == b {
		t.Errorf("passwords %q and %q, want two different ones of 40 characters or more", a, b)
	}
	if creds.Password("nobody") != "" {
		t.Errorf("Password of a user not made = %q, want empty", creds.Password("nobody"))
	}
	for _, users := range [][]string{{"Ingress"}, {"worker_math"}, {"-worker"}, {""}, {"worker", "worker"}, {strings.Repeat("w", 41)}} {
		if _, err := NewCredentials(users...); err == nil {
			t.Errorf("NewCredentials(%q) succeeded, want an error", users)
		}
	}
	if got := PasswordVar("worker-math"); got != "TOOLBUS_WORKER_MATH_NATS_PASSWORD" {
		t.Errorf("PasswordVar(worker-math) = %s, want TOOLBUS_WORKER_MATH_NATS_PASSWORD", got)
	}
}

func TestCredentialsWriteEnv(t *testing.T) {
	creds, err := NewCredentials("ingress", "worker", "worker-math")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := creds.WriteEnv(&b); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("env line %q is not NAME=value", line)
		}
		got[k] = v
	}
	if len(got) != 4 {
		t.Errorf("env file sets %d variables, want 3 passwords and the MCP state key:\n%s", len(got), b.String())
	}
	if k := got[MCPStateKeyVar]; k != creds.MCPStateKey() || len(k) < 16 {
		t.Errorf("env file sets %s=%q, want the generated key of 16 bytes or more", MCPStateKeyVar, k)
	}
	for _, u := range creds.Users() {
		if got[PasswordVar(u)] != creds.Password(u) {
			t.Errorf("env file sets %s=%q, want %s's password", PasswordVar(u), got[PasswordVar(u)], u)
		}
	}
}

func TestCredentialsWriteSecrets(t *testing.T) {
	creds, err := NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	secrets := generatedSecrets(t, creds)
	if len(secrets) != len(Users)+1 {
		t.Fatalf("%d Secrets, want one per user and the MCP state key's", len(secrets))
	}
	if got := secrets["Secret/"+MCPStateSecretName].get("stringData." + MCPStateSecretKey); got != creds.MCPStateKey() {
		t.Errorf("Secret %s holds %v, want the MCP state key", MCPStateSecretName, got)
	}
	for _, u := range Users {
		s := secrets["Secret/"+SecretName(u)]
		if s == nil {
			t.Fatalf("no Secret %s", SecretName(u))
		}
		if got := s.get("stringData." + SecretKey); got != creds.Password(u) {
			t.Errorf("Secret %s holds %v, want %s's password", SecretName(u), got, u)
		}
		if s["apiVersion"] != "v1" || s["type"] != "Opaque" {
			t.Errorf("Secret %s: apiVersion %v, type %v, want v1 and Opaque", SecretName(u), s["apiVersion"], s["type"])
		}
	}
}
