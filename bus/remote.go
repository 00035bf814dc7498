package bus

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// DefaultRemoteURL is the NATS server a process joins unless told
// otherwise: one on this machine's standard port.
const DefaultRemoteURL = "nats://127.0.0.1:4222"

// RemoteConfig is how a process that joins NATS over the network reaches
// it: the servers, the one way it authenticates, TLS, and the prefix of
// the subjects its replies come under. Each field names, in parentheses,
// the flag of the commands that join NATS (`toolbus ingress`, `worker`,
// `status`, `conform`) that sets it; its errors name those flags. The zero
// value has no URL; [DefaultRemoteConfig] has one.
type RemoteConfig struct {
	// URL (--nats) is the servers' URL, or several comma-separated.
	URL string
	// User (--nats-user) authenticates with the password given in
	// Password (--nats-password) or kept in PasswordFile
	// (--nats-password-file).
	User, Password, PasswordFile string
	// Token (--nats-token) authenticates with a token, or with the one kept
	// in TokenFile (--token-file).
	Token, TokenFile string
	// NKey (--nats-nkey) is a file holding a user nkey seed, Creds
	// (--nats-creds) a credentials file (user JWT and seed).
	NKey, Creds string
	// TLSCA (--nats-tls-ca) is the CA of the servers' certificates, TLSCert
	// (--nats-tls-cert) and TLSKey (--nats-tls-key) the client
	// certificate; any of them turns TLS on.
	TLSCA, TLSCert, TLSKey string
	// InboxPrefix (--nats-inbox-prefix) is the prefix of the subjects of
	// the replies the process receives ([WithInboxPrefix]); empty for the
	// connection's default.
	InboxPrefix string
}

// DefaultRemoteConfig returns the settings of a process that joins NATS
// without flags: the server at [DefaultRemoteURL], no credentials.
func DefaultRemoteConfig() RemoteConfig { return RemoteConfig{URL: DefaultRemoteURL} }

// Options returns the [Connect] options of c. It checks the settings
// together and that the files they name exist, so that a mistake names
// its flag before anything starts, and reads the secrets kept in files;
// the options check the other files' contents when the connection opens.
func (c RemoteConfig) Options() ([]Option, error) {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	for _, f := range []struct{ flag, path string }{
		{"--nats-nkey", c.NKey}, {"--nats-creds", c.Creds},
		{"--nats-tls-ca", c.TLSCA}, {"--nats-tls-cert", c.TLSCert}, {"--nats-tls-key", c.TLSKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	given := 0
	for _, v := range []string{c.User, c.Token + c.TokenFile, c.NKey, c.Creds} {
		if v != "" {
			given++
		}
	}
	if given > 1 {
		return nil, errors.New("give one of --nats-user, --nats-token (or --token-file), --nats-nkey and --nats-creds")
	}
	if c.Password != "" && c.User == "" {
		return nil, errors.New("--nats-password needs --nats-user")
	}
	token := c.Token
	if c.TokenFile != "" {
		if c.Token != "" {
			return nil, errors.New("--nats-token and --token-file both give the token: keep one of them")
		}
		var err error
		if token, err = readSecretFile("--token-file", c.TokenFile, "the NATS token"); err != nil {
			return nil, err
		}
	}
	password := c.Password
	if c.PasswordFile != "" {
		var err error
		if password, err = c.ReadPasswordFile(); err != nil {
			return nil, err
		}
	}
	var opts []Option
	if c.User != "" {
		opts = append(opts, WithUserPassword(c.User, password))
	}
	if token != "" {
		opts = append(opts, WithToken(token))
	}
	if c.NKey != "" {
		opts = append(opts, WithNkeySeedFile(c.NKey))
	}
	if c.Creds != "" {
		opts = append(opts, WithCredsFile(c.Creds))
	}
	if c.TLSCert != "" {
		opts = append(opts, WithTLSClientCert(c.TLSCert, c.TLSKey))
	}
	if c.TLSCA != "" {
		opts = append(opts, WithTLSCA(c.TLSCA))
	}
	if c.InboxPrefix != "" {
		if err := CheckInboxPrefix(c.InboxPrefix); err != nil {
			return nil, fmt.Errorf("--nats-inbox-prefix: %w", err)
		}
		opts = append(opts, WithInboxPrefix(c.InboxPrefix))
	}
	return opts, nil
}

// ReadPasswordFile returns the password kept in PasswordFile, without
// surrounding white space such as a final newline, as `toolbus nats`
// reads the files it keeps.
func (c RemoteConfig) ReadPasswordFile() (string, error) {
	switch {
	case c.Password != "":
		return "", errors.New("--nats-password and --nats-password-file both give the password: keep one of them")
	case c.User == "":
		return "", fmt.Errorf("--nats-password-file %s needs --nats-user: name the user whose password it holds", c.PasswordFile)
	}
	return readSecretFile("--nats-password-file", c.PasswordFile, "the password of --nats-user "+c.User)
}

// Env returns the settings of c that a process reads from its
// environment as `toolbus worker` does, as "NAME=value" strings: the URL
// and the credentials given, each under the variable name gives its flag.
func (c RemoteConfig) Env(name func(flag string) string) []string {
	env := []string{name("nats") + "=" + c.URL}
	for _, v := range []struct{ flag, value string }{
		{"nats-token", c.Token}, {"token-file", c.TokenFile}, {"nats-user", c.User}, {"nats-password", c.Password},
		{"nats-password-file", c.PasswordFile},
		{"nats-creds", c.Creds}, {"nats-nkey", c.NKey},
	} {
		if v.value != "" {
			env = append(env, name(v.flag)+"="+v.value)
		}
	}
	return env
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
