package bus

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// ErrAuthConflict is returned by [Connect] when more than one way of
// authenticating is given: a user and password, a token, an nkey seed and a
// credentials file exclude each other.
var ErrAuthConflict = errors.New("bus: more than one NATS authentication option")

// auth is the one way a connection authenticates, named for errors.
type auth struct {
	option string
	nats   nats.Option
}

// tlsSettings collects the TLS options; any of them turns TLS on.
type tlsSettings struct {
	roots      *x509.CertPool
	cert       *tls.Certificate
	serverName string
}

func (c *connConfig) setAuth(option string, o nats.Option) error {
	if c.auth != nil {
		return fmt.Errorf("%w: %s and %s", ErrAuthConflict, c.auth.option, option)
	}
	c.auth = &auth{option: option, nats: o}
	return nil
}

func (c *connConfig) tlsSettings() *tlsSettings {
	if c.tls == nil {
		c.tls = &tlsSettings{}
	}
	return c.tls
}

// WithUserPassword authenticates with a user name and password (default:
// those of the URL, as in nats://user:password@host:4222, or none).
func WithUserPassword(user, password string) Option {
	return func(c *connConfig) error {
		if user == "" {
			return errors.New("bus: WithUserPassword: empty user")
		}
		return c.setAuth("WithUserPassword", nats.UserInfo(user, password))
	}
}

// WithToken authenticates with a token (default: the URL's, as in
// nats://token@host:4222, or none).
func WithToken(token string) Option {
	return func(c *connConfig) error {
		if token == "" {
			return errors.New("bus: WithToken: empty token")
		}
		return c.setAuth("WithToken", nats.Token(token))
	}
}

// WithNkeySeedFile authenticates with the user nkey whose seed ("SU…") is in
// the file at path; the server knows the user by its public key. The file
// is read and checked at once.
func WithNkeySeedFile(path string) Option {
	return func(c *connConfig) error {
		if err := readable("WithNkeySeedFile", path); err != nil {
			return err
		}
		o, err := nats.NkeyOptionFromSeed(path)
		if err != nil {
			return fmt.Errorf("bus: WithNkeySeedFile %s: %w", path, err)
		}
		return c.setAuth("WithNkeySeedFile", o)
	}
}

// credsMarker opens the user JWT of a NATS credentials file.
var credsMarker = []byte("-----BEGIN NATS USER JWT-----")

// WithCredsFile authenticates with a NATS credentials file (a user JWT and
// its nkey seed, as nsc writes them), for servers in operator mode. The
// file is checked at once and read again on every reconnect, so that a
// rotated file is picked up.
func WithCredsFile(path string) Option {
	return func(c *connConfig) error {
		if err := readable("WithCredsFile", path); err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("bus: WithCredsFile: %w", err)
		}
		if !bytes.Contains(b, credsMarker) {
			return fmt.Errorf("bus: WithCredsFile: %s holds no NATS user JWT", path)
		}
		return c.setAuth("WithCredsFile", nats.UserCredentials(path))
	}
}

// WithTLSCA turns TLS on and trusts the servers whose certificates the PEM
// certificates in the file at path sign (default: the system's roots).
func WithTLSCA(path string) Option {
	return func(c *connConfig) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("bus: WithTLSCA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("bus: WithTLSCA: %s holds no PEM certificate", path)
		}
		c.tlsSettings().roots = pool
		return nil
	}
}

// WithTLSClientCert turns TLS on and presents the certificate and key in the
// PEM files at certFile and keyFile, for servers that verify clients
// (default: no client certificate).
func WithTLSClientCert(certFile, keyFile string) Option {
	return func(c *connConfig) error {
		if err := readable("WithTLSClientCert", certFile); err != nil {
			return err
		}
		if err := readable("WithTLSClientCert", keyFile); err != nil {
			return err
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("bus: WithTLSClientCert: %w", err)
		}
		c.tlsSettings().cert = &cert
		return nil
	}
}

// WithTLSServerName turns TLS on and expects the server's certificate to be
// for name (default: the host of the URL), for servers reached by an
// address their certificate does not name.
func WithTLSServerName(name string) Option {
	return func(c *connConfig) error {
		if name == "" {
			return errors.New("bus: WithTLSServerName: empty name")
		}
		c.tlsSettings().serverName = name
		return nil
	}
}

// securityOptions returns the nats.go options of the authentication and TLS
// settings.
func (c *connConfig) securityOptions() []nats.Option {
	var opts []nats.Option
	if c.auth != nil {
		opts = append(opts, c.auth.nats)
	}
	if t := c.tls; t != nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: t.roots, ServerName: t.serverName}
		if t.cert != nil {
			cfg.Certificates = []tls.Certificate{*t.cert}
		}
		opts = append(opts, nats.Secure(cfg))
	}
	return opts
}

// NewToken returns 32 random bytes in URL-safe base64, fit for a NATS token
// or password: usable as is on a command line, in an environment file and
// in a nats://token@host URL.
func NewToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails: a broken random source crashes the program instead
	return base64.RawURLEncoding.EncodeToString(b)
}

// readable checks that path names a regular file this process can read.
func readable(option, path string) error {
	if path == "" {
		return fmt.Errorf("bus: %s: empty file name", option)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("bus: %s: %w", option, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("bus: %s: %w", option, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("bus: %s: %s is not a regular file", option, path)
	}
	return nil
}

// urlHasUser reports whether any of the comma-separated URLs carries a user,
// password or token.
func urlHasUser(urls string) bool {
	for _, p := range strings.Split(urls, ",") {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// RedactURL returns url (a comma-separated list is accepted) with every
// password and token replaced by "xxxxx", fit for logs and errors.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if strings.Contains(p, "@") {
				// Unparsable but carrying credentials: say nothing of it.
				parts[i] = "xxxxx"
			}
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			// A user alone is how a URL carries a token.
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
