package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/deploy"
)

// natsCredentialsFlags are the flags of `toolbus nats-credentials`.
type natsCredentialsFlags struct {
	format string
	out    string
	force  bool
	users  []string
}

func newNatsCredentialsCmd() *cobra.Command {
	var f natsCredentialsFlags
	cmd := &cobra.Command{
		Use:   "nats-credentials",
		Short: "Generate the NATS passwords (and the ingresses' MCP state key) of the secured deployment",
		Long: `nats-credentials generates a random password for each NATS user of
deploy/nats/cluster-secure.conf (ingress and worker, or --users) and writes
them for the compose file or for Kubernetes:

  --format env  TOOLBUS_<USER>_NATS_PASSWORD=... lines: the compose file reads
                them as deploy/.env
  --format k8s  a Secret toolbus-nats-<user> per user, the password under the
                key "password": the manifests in deploy/k8s and the NATS
                chart's values refer to them

With them it generates the key the ingress replicas share to sign MCP request
states (--mcp-state-key): TOOLBUS_MCP_STATE_KEY in the environment file, or
the Secret toolbus-mcp-state under the key "key".

It writes to standard output, or to --out, made readable by this user alone;
an existing --out is kept unless --force, since the running cluster knows its
passwords.`,
		Example: `  toolbus nats-credentials --out deploy/.env
  toolbus nats-credentials --format k8s --out toolbus-nats-secrets.yaml
  toolbus nats-credentials --users ingress,worker,worker-math --out deploy/.env
  docker run --rm "toolbus:$TOOLBUS_IMAGE_TAG" nats-credentials > deploy/.env`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.format, "format", "env", "env (an environment file for docker compose) or k8s (Kubernetes Secrets)")
	fl.StringVar(&f.out, "out", "", "file to write, mode 0600 (default: standard output)")
	fl.BoolVar(&f.force, "force", false, "replace an existing --out, and with it the passwords the cluster knows")
	fl.StringSliceVar(&f.users, "users", slices.Clone(deploy.Users), "NATS users to make a password for")
	return cmd
}

func (f *natsCredentialsFlags) run(stdout, stderr io.Writer) error {
	var write func(deploy.Credentials, io.Writer) error
	switch f.format {
	case "env":
		write = deploy.Credentials.WriteEnv
	case "k8s":
		write = deploy.Credentials.WriteSecrets
	default:
		return fmt.Errorf("--format %q is not a format: give env or k8s", f.format)
	}
	creds, err := deploy.NewCredentials(f.users...)
	if err != nil {
		return fmt.Errorf("--users: %w", err)
	}
	var b bytes.Buffer
	if err := write(creds, &b); err != nil {
		return err
	}
	if f.out == "" {
		_, err := stdout.Write(b.Bytes())
		return err
	}
	if err := writeSecretFile(f.out, b.Bytes(), f.force); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote the NATS passwords of %d users (%s) to %s\n", len(creds.Users()), f.format, f.out)
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
		return fmt.Errorf("cannot create --out %s (%v): give a path in a directory this user can write", path, rootCause(err))
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
		return fmt.Errorf("cannot write --out %s (%v): give a path on a writable file system", path, rootCause(err))
	}
	return nil
}
