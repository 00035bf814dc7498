package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/bus"
)

// natsAuth is how a process that connects to NATS over the network
// authenticates and secures its connection.
type natsAuth struct {
	user         string
	password     string
	passwordFile string
	token        string
	tokenFile    string
	nkey         string
	creds        string
	tlsCA        string
	tlsCert      string
	tlsKey       string
}

func (a *natsAuth) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&a.user, "nats-user", "", "NATS user name (with --nats-password or --nats-password-file; a user and password in the --nats URL work too)")
	f.StringVar(&a.password, "nats-password", "", "NATS password of --nats-user")
	f.StringVar(&a.passwordFile, "nats-password-file", "", "file holding the NATS password of --nats-user, so that it is on no command line (white space around it is ignored); toolbus nats keeps its users' passwords in such files")
	f.StringVar(&a.token, "nats-token", "", "NATS authentication token")
	f.StringVar(&a.tokenFile, "token-file", "", "file holding the NATS authentication token, so that it is on no command line (white space around it is ignored): the file `toolbus nats --token-file` keeps")
	f.StringVar(&a.nkey, "nats-nkey", "", "file holding the NATS user nkey seed (SU...) to authenticate with")
	f.StringVar(&a.creds, "nats-creds", "", "NATS credentials file (user JWT and seed) to authenticate with")
	f.StringVar(&a.tlsCA, "nats-tls-ca", "", "PEM file of the CA that signs the NATS servers' certificates; turns TLS on")
	f.StringVar(&a.tlsCert, "nats-tls-cert", "", "PEM client certificate presented to NATS (with --nats-tls-key); turns TLS on")
	f.StringVar(&a.tlsKey, "nats-tls-key", "", "PEM key of --nats-tls-cert")
}

// options turns the flags into [bus.Connect] options. It checks the flags
// together and that the files they name exist, so that a mistake names its
// flag before anything starts; the options check the files' contents when
// the connection opens.
func (a *natsAuth) options() ([]bus.Option, error) {
	if (a.tlsCert == "") != (a.tlsKey == "") {
		return nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-nkey", a.nkey}, {"--nats-creds", a.creds},
		{"--nats-tls-ca", a.tlsCA}, {"--nats-tls-cert", a.tlsCert}, {"--nats-tls-key", a.tlsKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	given := 0
	for _, v := range []string{a.user, a.token + a.tokenFile, a.nkey, a.creds} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		return nil, errors.New("give one of --nats-user, --nats-token (or --token-file), --nats-nkey and --nats-creds")
	}
	if a.password != "" && a.user == "" {
		return nil, errors.New("--nats-password needs --nats-user")
	}
	token := a.token
	if a.tokenFile != "" {
		if a.token != "" {
			return nil, errors.New("--nats-token and --token-file both give the token: keep one of them")
		}
		var err error
		if token, err = readSecretFile("--token-file", a.tokenFile, "the NATS token"); err != nil {
			return nil, err
		}
	}
	password := a.password
	if a.passwordFile != "" {
		var err error
		if password, err = a.readPasswordFile(); err != nil {
			return nil, err
		}
	}
	var opts []bus.Option
	if a.user != "" {
		opts = append(opts, bus.WithUserPassword(a.user, password))
	}
	if token != "" {
		opts = append(opts, bus.WithToken(token))
	}
	if a.nkey != "" {
		opts = append(opts, bus.WithNkeySeedFile(a.nkey))
	}
	if a.creds != "" {
		opts = append(opts, bus.WithCredsFile(a.creds))
	}
	if a.tlsCert != "" {
		opts = append(opts, bus.WithTLSClientCert(a.tlsCert, a.tlsKey))
	}
	if a.tlsCA != "" {
		opts = append(opts, bus.WithTLSCA(a.tlsCA))
	}
	return opts, nil
}

// readPasswordFile returns the password kept in --nats-password-file,
// without surrounding white space such as a final newline, as `toolbus
// nats` reads the files it keeps.
func (a *natsAuth) readPasswordFile() (string, error) {
	switch {
	case a.password != "":
		return "", errors.New("--nats-password and --nats-password-file both give the password: keep one of them")
	case a.user == "":
		return "", fmt.Errorf("--nats-password-file %s needs --nats-user: name the user whose password it holds", a.passwordFile)
	}
	return readSecretFile("--nats-password-file", a.passwordFile, "the password of --nats-user "+a.user)
}

// readSecretFile returns the secret kept in path, given with flag, without
// surrounding white space such as a final newline; what names the secret
// in its errors.
func readSecretFile(flag, path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		// The sentence names the path: keep only the cause of err.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("cannot read %s %s, which should hold %s; give a file this user can read: %w", flag, path, what, err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("%s %s is empty: put %s in it", flag, path, what)
	}
	return secret, nil
}
