package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// Users are the NATS users of nats/cluster-secure.conf, which the compose
// file and the Kubernetes manifests connect as: the ingress and the
// workers.
var Users = []string{"ingress", "worker"}

// SecretKey is the key of the password in each user's Kubernetes Secret.
const SecretKey = "password"

// The MCP state key every ingress replica signs an MCP tools/call's
// request state with (--mcp-state-key), so that a client's retry resumes
// its job on whichever replica it reaches: MCPStateKeyVar in the
// environment file, and the Secret MCPStateSecretName under
// MCPStateSecretKey.
const (
	MCPStateKeyVar     = "TOOLBUS_MCP_STATE_KEY"
	MCPStateSecretName = "toolbus-mcp-state"
	MCPStateSecretKey  = "key"
)

// userName is what a user name may be: it becomes part of an environment
// variable and of a Kubernetes object's name.
var userName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// PasswordVar returns the environment variable that carries user's
// password to the NATS servers (nats/cluster-secure.conf reads it) and,
// in the compose file, to the processes: TOOLBUS_WORKER_NATS_PASSWORD for
// "worker", TOOLBUS_WORKER_MATH_NATS_PASSWORD for "worker-math".
func PasswordVar(user string) string {
	return "TOOLBUS_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_NATS_PASSWORD"
}

// SecretName returns the name of the Kubernetes Secret holding user's
// password under [SecretKey]: toolbus-nats-worker for "worker".
func SecretName(user string) string { return "toolbus-nats-" + user }

// Credentials are generated passwords of NATS users, in the order the
// users were given. Make them with [NewCredentials].
type Credentials struct {
	users     []string
	passwords []string
	// mcpStateKey is the ingresses' shared MCP state key.
	mcpStateKey string
}

// NewCredentials generates a random password for each user, [Users] when
// none are given: "p" and 32 random bytes in hex, which the NATS
// configuration reads from the environment as the string it is (a value
// that looks like a number, a size or a boolean would be read as one) and
// which needs no quoting in an environment file, a shell or YAML. A user name is lower-case
// letters, digits and '-', starting with a letter, at most 40 long, and
// given once.
func NewCredentials(users ...string) (Credentials, error) {
	if len(users) == 0 {
		users = Users
	}
	var c Credentials
	for _, u := range users {
		if !userName.MatchString(u) {
			return Credentials{}, fmt.Errorf("NATS user name %q is not lower-case letters, digits and '-' starting with a letter (at most 40): name it like worker-math", u)
		}
		if slices.Contains(c.users, u) {
			return Credentials{}, fmt.Errorf("NATS user %q is named twice: name each user once", u)
		}
		c.users = append(c.users, u)
		c.passwords = append(c.passwords, newPassword())
	}
	c.mcpStateKey = newPassword()
	return c, nil
}

func newPassword() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails: a broken random source crashes the program instead
	return "p" + hex.EncodeToString(b)
}

// Users returns the users, in order.
func (c Credentials) Users() []string { return slices.Clone(c.users) }

// MCPStateKey returns the key the ingress replicas share to sign MCP
// request states with ([MCPStateKeyVar]).
func (c Credentials) MCPStateKey() string { return c.mcpStateKey }

// Password returns user's password, or "" for a user c does not hold.
func (c Credentials) Password(user string) string {
	if i := slices.Index(c.users, user); i >= 0 {
		return c.passwords[i]
	}
	return ""
}

// WriteEnv writes the passwords as an environment file, one
// [PasswordVar]=password line per user: what docker compose reads as
// deploy/.env (or with --env-file), and what a shell can source.
func (c Credentials) WriteEnv(w io.Writer) error {
	if len(c.users) == 0 {
		return errors.New("no credentials: make them with NewCredentials")
	}
	var b strings.Builder
	b.WriteString("# NATS passwords of toolbus's users (deploy/nats/cluster-secure.conf),\n")
	b.WriteString("# made by `toolbus nats-credentials`. Keep this file secret. The compose\n")
	b.WriteString("# file reads it as deploy/.env.\n")
	for i, u := range c.users {
		fmt.Fprintf(&b, "%s=%s\n", PasswordVar(u), c.passwords[i])
	}
	b.WriteString("# The key every ingress replica signs MCP request states with.\n")
	fmt.Fprintf(&b, "%s=%s\n", MCPStateKeyVar, c.mcpStateKey)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSecrets writes the passwords as Kubernetes Secrets, one
// [SecretName] per user with the password under [SecretKey], which the
// manifests in k8s/ and the NATS chart's values refer to.
func (c Credentials) WriteSecrets(w io.Writer) error {
	if len(c.users) == 0 {
		return errors.New("no credentials: make them with NewCredentials")
	}
	var b strings.Builder
	b.WriteString("# NATS passwords of toolbus's users, made by\n")
	b.WriteString("# `toolbus nats-credentials --format k8s`. Keep this file secret; apply it\n")
	b.WriteString("# (kubectl apply -f) before the NATS chart and the toolbus manifests.\n")
	for i, u := range c.users {
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, `apiVersion: v1
kind: Secret
metadata:
  name: %s
  labels: {app.kubernetes.io/name: toolbus, app.kubernetes.io/component: nats-credentials}
type: Opaque
stringData:
  %s: %q
`, SecretName(u), SecretKey, c.passwords[i])
	}
	fmt.Fprintf(&b, `---
apiVersion: v1
kind: Secret
metadata:
  name: %s
  labels: {app.kubernetes.io/name: toolbus, app.kubernetes.io/component: mcp-state}
type: Opaque
stringData:
  %s: %q
`, MCPStateSecretName, MCPStateSecretKey, c.mcpStateKey)
	_, err := io.WriteString(w, b.String())
	return err
}
