package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
)

func TestSecurityConfigAuth(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	body := `{"keys":[{"name":"crawler","sha256":"` + auth.HashAPIKey("k") + `","allow":["fetch_page"]}],"allow":{"agent":["math.*"]}}`
	if err := os.WriteFile(keys, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("a secret of thirty-two bytes, at least\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dev     bool
		args    []string
		wantErr error
		wantOn  bool
	}{
		{name: "ingress without configuration", wantErr: ErrNoAuth},
		{name: "ingress explicitly open", args: []string{"--auth=off"}},
		{name: "dev is open by default", dev: true},
		{name: "keys", args: []string{"--auth-file", keys}, wantOn: true},
		{name: "jwt", args: []string{"--jwt-secret-file", secret, "--jwt-issuer", "i", "--jwt-audience", "a"}, wantOn: true},
		{name: "dev with keys", dev: true, args: []string{"--auth=on", "--auth-file", keys}, wantOn: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultGatewayConfig()
			if tc.dev {
				c.Auth.Mode = "off"
			}
			fs := pflag.NewFlagSet("ingress", pflag.ContinueOnError)
			Bind(fs, &c, GatewayFlags)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			a, err := c.Auth.Load()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Auth.Load(%q) error = %v, want %v", tc.args, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			var opts []ingress.Option
			if c.Auth.Mode == "on" {
				opts = append(opts, ingress.WithAuth(a))
			}
			if got := len(opts) > 0; got != tc.wantOn {
				t.Errorf("Auth.Load(%q) turns auth on = %v, want %v", tc.args, got, tc.wantOn)
			}
			if _, err := ingress.New(nopDispatcher{}, opts...); err != nil {
				t.Errorf("ingress.New with the options: %v", err)
			}
		})
	}
}

func TestSecurityConfigOperator(t *testing.T) {
	body := `{"keys":[{"name":"ops","sha256":"` + auth.HashAPIKey("o") + `","operator":true},{"name":"crawler","sha256":"` + auth.HashAPIKey("k") + `"}]}`
	c := authFlags(t, body, "--jwt-operator-role", "toolbus-operator", "--jwt-roles-claim", "groups")
	a, err := c.Auth.Load()
	if err != nil {
		t.Fatalf("Auth.Load() error = %v", err)
	}
	if len(a.Keys) != 2 || !a.Keys[0].Operator || a.Keys[1].Operator {
		t.Errorf("keys = %+v, want ops alone an operator", a.Keys)
	}
	if a.JWT == nil || a.JWT.OperatorRole != "toolbus-operator" || a.JWT.RolesClaim != "groups" {
		t.Errorf("jwt = %+v, want operator role toolbus-operator in claim groups", a.JWT)
	}
}

// TestSecurityConfigShares: a key's weight and exemption in --auth-file,
// and the JWT's weight claim and exempt role, reach the authenticator;
// a weight out of range is refused before the ingress is made.
func TestSecurityConfigShares(t *testing.T) {
	body := `{"keys":[{"name":"big","sha256":"` + auth.HashAPIKey("b") + `","weight":4},` +
		`{"name":"probe","sha256":"` + auth.HashAPIKey("p") + `","exempt":true},{"name":"plain","sha256":"` + auth.HashAPIKey("k") + `"}]}`
	c := authFlags(t, body, "--jwt-weight-claim", "share", "--jwt-exempt-role", "probe")
	a, err := c.Auth.Load()
	if err != nil {
		t.Fatalf("Auth.Load() error = %v", err)
	}
	got := map[string]auth.APIKey{}
	for _, k := range a.Keys {
		got[k.Name] = k
	}
	if got["big"].Weight != 4 || got["big"].Exempt || !got["probe"].Exempt || got["plain"].Weight != 0 || got["plain"].Exempt {
		t.Errorf("keys = %+v, want big of weight 4, probe exempt, plain neither", a.Keys)
	}
	if a.JWT == nil || a.JWT.WeightClaim != "share" || a.JWT.ExemptRole != "probe" {
		t.Errorf("jwt = %+v, want weight claim share and exempt role probe", a.JWT)
	}

	c = authFlags(t, `{"keys":[{"name":"big","sha256":"`+auth.HashAPIKey("b")+`","weight":5000}]}`)
	a, err = c.Auth.Load()
	if err == nil {
		_, err = ingress.New(nopDispatcher{}, ingress.WithAuth(a))
	}
	if err == nil {
		t.Error("an ingress with a key of weight 5000 was made, want an error")
	}
}

func TestParseMethodCaps(t *testing.T) {
	tests := []struct {
		name    string
		pairs   []string
		want    map[string]int
		wantErr bool
	}{
		{name: "none", want: map[string]int{}},
		{name: "two", pairs: []string{"fetch_page=64", "math.add=2"}, want: map[string]int{"fetch_page": 64, "math.add": 2}},
		{name: "no number", pairs: []string{"fetch_page"}, wantErr: true},
		{name: "zero", pairs: []string{"fetch_page=0"}, wantErr: true},
		{name: "no method", pairs: []string{"=3"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GatewayConfig{MethodMaxInFlight: tc.pairs}.methodCaps()
			if (err != nil) != tc.wantErr {
				t.Fatalf("methodCaps(%q) error = %v, want error %v", tc.pairs, err, tc.wantErr)
			}
			if err == nil && len(got) != len(tc.want) {
				t.Errorf("methodCaps(%q) = %v, want %v", tc.pairs, got, tc.want)
			}
			for m, n := range tc.want {
				if got[m] != n {
					t.Errorf("methodCaps(%q)[%s] = %d, want %d", tc.pairs, m, got[m], n)
				}
			}
		})
	}
}

// nopDispatcher answers nothing; the tests here only build servers.
type nopDispatcher struct{}

func (nopDispatcher) Dispatch(context.Context, []schema.Call, func(int, schema.Response)) {}

// authFlags returns a gateway config bound from flags that name an
// --auth-file holding keys, a JWT secret file, issuer and audience, and
// more.
func authFlags(t *testing.T, keys string, more ...string) GatewayConfig {
	t.Helper()
	dir := t.TempDir()
	keysFile := filepath.Join(dir, "keys.json")
	if err := os.WriteFile(keysFile, []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("a secret of thirty-two bytes, at least\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := DefaultGatewayConfig()
	fs := pflag.NewFlagSet("ingress", pflag.ContinueOnError)
	Bind(fs, &c, GatewayFlags)
	args := append([]string{"--auth-file", keysFile, "--jwt-secret-file", secret, "--jwt-issuer", "i", "--jwt-audience", "a"}, more...)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return c
}
