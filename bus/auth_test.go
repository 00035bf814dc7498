package bus_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/bus"
)

// startSecured starts a NATS server on a free loopback port with the
// authorization and TLS of opts, and returns its host:port.
func startSecured(t *testing.T, opts *server.Options) string {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("secured server not ready after 10s")
	}
	return srv.Addr().String()
}

// connect connects with opts and closes the connection at the end of the
// test; it returns the error of Connect.
func connect(t *testing.T, url string, opts ...bus.Option) error {
	t.Helper()
	nc, err := bus.Connect(url, opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return err
}

func TestConnectUserPassword(t *testing.T) {
	addr := startSecured(t, &server.Options{Users: []*server.User{{Username: "worker", Password: "s3cret-pass"}}})
	tests := []struct {
		name    string
		url     string
		opts    []bus.Option
		wantErr error
	}{
		{"option", "nats://" + addr, []bus.Option{bus.WithUserPassword("worker", "s3cret-pass")}, nil},
		{"in the URL", "nats://worker:s3cret-pass@" + addr, nil, nil},
		{"option and the URL", "nats://worker:wrong@" + addr, []bus.Option{bus.WithUserPassword("worker", "s3cret-pass")}, bus.ErrAuthConflict},
		{"wrong password", "nats://" + addr, []bus.Option{bus.WithUserPassword("worker", "wrong")}, nats.ErrAuthorization},
		{"wrong password in the URL", "nats://worker:wrong@" + addr, nil, nats.ErrAuthorization},
		{"none", "nats://" + addr, nil, nats.ErrAuthorization},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := connect(t, tc.url, tc.opts...)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Connect = %v, want %v", err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "wrong") {
				t.Errorf("Connect error %q shows the password", err)
			}
		})
	}
}

func TestConnectToken(t *testing.T) {
	addr := startSecured(t, &server.Options{Authorization: "tok-3141592653"})
	if err := connect(t, "nats://"+addr, bus.WithToken("tok-3141592653")); err != nil {
		t.Fatalf("Connect with the token = %v, want nil", err)
	}
	if err := connect(t, "nats://"+addr, bus.WithToken("tok-other")); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("Connect with another token = %v, want %v", err, nats.ErrAuthorization)
	}
}

func TestConnectNkey(t *testing.T) {
	dir := t.TempDir()
	user := newNkeyUser(t, dir, "worker.nk")
	other := newNkeyUser(t, dir, "other.nk")
	addr := startSecured(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: user.public}}})
	if err := connect(t, "nats://"+addr, bus.WithNkeySeedFile(user.seedFile)); err != nil {
		t.Fatalf("Connect with the user's seed = %v, want nil", err)
	}
	if err := connect(t, "nats://"+addr, bus.WithNkeySeedFile(other.seedFile)); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("Connect with another seed = %v, want %v", err, nats.ErrAuthorization)
	}
}

type nkeyUser struct{ public, seedFile string }

func newNkeyUser(t *testing.T, dir, name string) nkeyUser {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return nkeyUser{public: pub, seedFile: path}
}

func TestConnectTLS(t *testing.T) {
	pki := newPKI(t)
	serverTLS := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pki.serverCert},
		ClientCAs:    pki.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	addr := startSecured(t, &server.Options{TLS: true, TLSVerify: true, TLSConfig: serverTLS, TLSTimeout: 5})
	target := "tls://" + addr
	trust := bus.WithTLSCA(pki.caFile)
	client := bus.WithTLSClientCert(pki.clientCertFile, pki.clientKeyFile)
	// The server's certificate names "nats.toolbus.test" only, not the
	// loopback address the test reaches it by.
	name := bus.WithTLSServerName("nats.toolbus.test")
	tests := []struct {
		name string
		opts []bus.Option
		ok   bool
	}{
		{"CA, client certificate and server name", []bus.Option{trust, client, name}, true},
		{"no client certificate", []bus.Option{trust, name}, false},
		{"server name not given", []bus.Option{trust, client}, false},
		{"CA not given", []bus.Option{client, name}, false},
		{"no TLS", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := connect(t, target, tc.opts...)
			if (err == nil) != tc.ok {
				t.Fatalf("Connect = %v, want success %v", err, tc.ok)
			}
		})
	}
}

func TestSecurityOptionsCheckInput(t *testing.T) {
	pki := newPKI(t)
	missing := filepath.Join(t.TempDir(), "missing")
	notCreds := pki.caFile
	tests := []struct {
		name    string
		opt     bus.Option
		option  string
		wantErr error
	}{
		{"nkey seed missing", bus.WithNkeySeedFile(missing), "WithNkeySeedFile", fs.ErrNotExist},
		{"nkey seed not a seed", bus.WithNkeySeedFile(pki.caFile), "WithNkeySeedFile", nil},
		{"creds missing", bus.WithCredsFile(missing), "WithCredsFile", fs.ErrNotExist},
		{"creds not creds", bus.WithCredsFile(notCreds), "WithCredsFile", nil},
		{"CA missing", bus.WithTLSCA(missing), "WithTLSCA", fs.ErrNotExist},
		{"CA not PEM", bus.WithTLSCA(pki.clientKeyFile), "WithTLSCA", nil},
		{"client cert missing", bus.WithTLSClientCert(missing, pki.clientKeyFile), "WithTLSClientCert", fs.ErrNotExist},
		{"client key missing", bus.WithTLSClientCert(pki.clientCertFile, missing), "WithTLSClientCert", fs.ErrNotExist},
		{"client key not the cert's", bus.WithTLSClientCert(pki.clientCertFile, pki.caKeyFile), "WithTLSClientCert", nil},
		{"empty user", bus.WithUserPassword("", "x"), "WithUserPassword", nil},
		{"empty token", bus.WithToken(""), "WithToken", nil},
		{"empty server name", bus.WithTLSServerName(""), "WithTLSServerName", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// No server listens here: the option must fail before any dial.
			_, err := bus.Connect("nats://127.0.0.1:1", tc.opt)
			if err == nil {
				t.Fatal("Connect = nil, want an error")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Connect = %v, want %v", err, tc.wantErr)
			}
			if errors.Is(err, nats.ErrNoServers) {
				t.Errorf("Connect = %v, want the option to fail before dialing", err)
			}
			// Naming the option is the contract of these messages: an
			// operator reads them, there is nothing to match with errors.Is.
			if !strings.Contains(err.Error(), tc.option) {
				t.Errorf("Connect = %q, want it to name %s", err, tc.option)
			}
		})
	}
}

func TestAuthOptionsConflict(t *testing.T) {
	_, err := bus.Connect("nats://127.0.0.1:1", bus.WithUserPassword("u", "p"), bus.WithToken("t"))
	if !errors.Is(err, bus.ErrAuthConflict) {
		t.Fatalf("Connect with a password and a token = %v, want %v", err, bus.ErrAuthConflict)
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://worker:s3cret@nats-1:4222", "nats://worker:xxxxx@nats-1:4222"},
		{"nats://tok3n@nats-1:4222", "nats://xxxxx@nats-1:4222"},
		{"nats://a:b@n1:4222,nats://n2:4222", "nats://a:xxxxx@n1:4222,nats://n2:4222"},
	}
	for _, tc := range tests {
		if got := bus.RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// pki is a CA, a server certificate for nats.toolbus.test and a client
// certificate it signed, the CA and client files written as PEM.
type pki struct {
	pool           *x509.CertPool
	serverCert     tls.Certificate
	caFile         string
	caKeyFile      string
	clientCertFile string
	clientKeyFile  string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "toolbus test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage, dns []string) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: "toolbus test " + strings.Join(dns, ",")},
			DNSNames:     dns,
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	srvDER, srvKey := leaf(2, x509.ExtKeyUsageServerAuth, []string{"nats.toolbus.test"})
	cliDER, cliKey := leaf(3, x509.ExtKeyUsageClientAuth, []string{"worker.toolbus.test"})
	p := pki{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.serverCert = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	p.caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	p.caKeyFile = writePEM(t, dir, "ca-key.pem", "EC PRIVATE KEY", marshalKey(t, caKey))
	p.clientCertFile = writePEM(t, dir, "client.pem", "CERTIFICATE", cliDER)
	p.clientKeyFile = writePEM(t, dir, "client-key.pem", "EC PRIVATE KEY", marshalKey(t, cliKey))
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func marshalKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	b, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
