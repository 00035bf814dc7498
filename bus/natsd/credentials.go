package natsd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/toolbus/toolbus/deploy"
	"github.com/toolbus/toolbus/internal/cause"
)

// CredentialsConfig is what [WriteCredentials] writes and where. Each
// field's errors name the flag of `toolbus nats-credentials` that sets
// it, given after the field's name here.
type CredentialsConfig struct {
	// Format (--format) is "env", TOOLBUS_<USER>_NATS_PASSWORD=... lines
	// for the compose file, or "k8s", a Secret per user for Kubernetes.
	Format string
	// Out (--out) is the file to write, made with mode 0600; empty for
	// standard output.
	Out string
	// Force (--force) replaces an existing Out, and with it the passwords
	// the cluster knows; without it an existing Out is an error.
	Force bool
	// Users (--users) are the NATS users to make a password for.
	Users []string
}

// DefaultCredentialsConfig returns the settings of `toolbus
// nats-credentials` without flags: an environment file of
// [deploy.Users] on standard output.
func DefaultCredentialsConfig() CredentialsConfig {
	return CredentialsConfig{Format: "env", Users: slices.Clone(deploy.Users)}
}

// Validate checks Format; [WriteCredentials] checks Users as it makes
// their passwords.
func (c CredentialsConfig) Validate() error {
	_, err := c.writer()
	return err
}

func (c CredentialsConfig) writer() (func(deploy.Credentials, io.Writer) error, error) {
	switch c.Format {
	case "env":
		return deploy.Credentials.WriteEnv, nil
	case "k8s":
		return deploy.Credentials.WriteSecrets, nil
	}
	return nil, fmt.Errorf("--format %q is not a format: give env or k8s", c.Format)
}

// WriteCredentials makes a random password for each of cfg's users, and
// the key the ingress replicas share to sign MCP request states, and
// writes them in cfg's format to stdout or to cfg.Out, saying on stderr
// what it wrote there.
func WriteCredentials(cfg CredentialsConfig, stdout, stderr io.Writer) error {
	write, err := cfg.writer()
	if err != nil {
		return err
	}
	creds, err := deploy.NewCredentials(cfg.Users...)
	if err != nil {
		return fmt.Errorf("--users: %w", err)
	}
	var b bytes.Buffer
	if err := write(creds, &b); err != nil {
		return err
	}
	if cfg.Out == "" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	if err := writeSecretFile(cfg.Out, b.Bytes(), cfg.Force); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote the NATS passwords of %d users (%s) to %s\n", len(creds.Users()), cfg.Format, cfg.Out)
	return nil
}

// writeSecretFile writes data to path, readable by this user alone. An
// existing file is an error unless force, when it is replaced.
func writeSecretFile(path string, data []byte, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if force {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	fh, err := os.OpenFile(path, flags, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("--out %s exists and holds the passwords the cluster may be running with: give --force to replace them, or another --out", path)
	case err != nil:
		return fmt.Errorf("cannot create --out %s (%v): give a path in a directory this user can write", path, cause.Root(err))
	}
	// A file replaced with --force keeps its mode: make it private.
	err = fh.Chmod(0o600)
	if err == nil {
		_, err = fh.Write(data)
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot write --out %s (%v): give a path on a writable file system", path, cause.Root(err))
	}
	return nil
}
