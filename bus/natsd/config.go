package natsd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
)

const (
	// DefaultListen is the address clients connect to when neither
	// [Config.Listen] is overridden nor the configuration file names one.
	DefaultListen = "127.0.0.1:4222"
	// MaxPayload is the largest [Config.MaxPayload]: the server's default
	// limit of the bytes pending for one client, which a message must fit.
	MaxPayload = 64 << 20

	// dataName is the folder of the store under the user's state
	// directory ([DefaultData]).
	dataName = "toolbus/nats"
	// passwordExt ends the name of the file, in the JetStream store's
	// directory, that keeps a role user's password: worker.password.
	passwordExt = ".password"
)

// Config is how a server of [Start] listens, stores and lets clients in.
// The zero value is not usable: start from [DefaultConfig]. Each field's
// errors name the flag of `toolbus nats` that sets it, given after the
// field's name here.
type Config struct {
	// Listen (--nats-listen) is the host:port clients connect to; port 0
	// picks a free port.
	Listen string
	// Data (--data) is the directory of the JetStream store and of the
	// users' password files, kept across restarts.
	Data string
	// File (--config) is a nats-server configuration file, for cluster
	// routes, accounts, users, permissions and TLS; empty for none.
	// JetStream is on whatever it says.
	File string
	// Token (--nats-token) is one all-powerful token instead of the role
	// users: a client with it can act as any caller and any worker.
	Token string
	// TokenFile (--token-file) is a file holding such a token, made with a
	// generated one (mode 0600) when missing; the token is never printed.
	TokenFile string
	// Monitor (--monitor-listen) is the host:port of the HTTP monitoring
	// endpoints /healthz, /varz and /jsz; port 0 picks a free port, empty
	// means none.
	Monitor string
	// MaxPayload (--max-payload) is the largest message in bytes, from 1
	// to [MaxPayload].
	MaxPayload int32
	// NoAuth (--no-auth) runs an open bus on purpose: anyone who reaches
	// it can act as any caller and any worker.
	NoAuth bool
	// Overrides says which settings override File's. A setting it does
	// not name fills in only what File leaves out; without File every
	// setting applies.
	Overrides Overrides
}

// Overrides names the settings of a [Config] that override its
// configuration file's: on the command line, the flags given.
type Overrides struct {
	Listen, Monitor, Data, MaxPayload bool
}

// DefaultConfig returns the settings of `toolbus nats` without flags: the
// loopback port 4222, the store in [DefaultData], no monitoring, the
// payload limit of `toolbus dev` and the role users.
func DefaultConfig() Config {
	return Config{
		Listen:     DefaultListen,
		Data:       DefaultData(),
		MaxPayload: bus.DefaultEmbeddedMaxPayload,
	}
}

// DefaultData is the JetStream store when neither [Config.Data] nor the
// configuration file names one: it outlives the process, as jobs,
// idempotency records and the users' passwords must survive a restart,
// and it lies in the user's state directory ($XDG_STATE_HOME/toolbus/nats,
// or ~/.local/state/toolbus/nats), outside any working tree, since it
// holds secrets. Without a home directory it is ./toolbus-nats, which the
// repository's .gitignore leaves out.
func DefaultData() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, dataName)
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "state", dataName)
	}
	return "toolbus-nats"
}

// Validate checks the settings that do not depend on the configuration
// file, each error naming the flag to change; [Start] checks the rest
// once it has read the file.
func (c Config) Validate() error {
	if _, _, err := splitListen("--nats-listen", c.Listen); err != nil {
		return err
	}
	if c.Monitor != "" {
		if _, _, err := splitListen("--monitor-listen", c.Monitor); err != nil {
			return err
		}
	}
	if c.Data == "" && (c.Overrides.Data || c.File == "") {
		return errEmptyData
	}
	if c.Overrides.MaxPayload || c.File == "" {
		if err := c.checkMaxPayload(); err != nil {
			return err
		}
	}
	token := c.Token != "" || c.TokenFile != ""
	switch {
	case c.Token != "" && c.TokenFile != "":
		return errors.New("--nats-token and --token-file both give the token: keep one of them")
	case c.NoAuth && token:
		return errors.New("--no-auth opens the bus that a token would close: keep one of them")
	}
	return nil
}

var errEmptyData = errors.New("--data is empty: name the directory of the JetStream store")

func (c Config) checkMaxPayload() error {
	if c.MaxPayload <= 0 || c.MaxPayload > MaxPayload {
		return fmt.Errorf("--max-payload %d is out of range: give 1 to %d bytes", c.MaxPayload, MaxPayload)
	}
	return nil
}

// splitListen reads the host:port address of flag; port 0 picks a free
// port.
func splitListen(flag, addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s %q is not a host:port address such as 127.0.0.1:4222", flag, addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}
