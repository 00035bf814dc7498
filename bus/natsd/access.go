package natsd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/deploy"
	"github.com/toolbus/toolbus/internal/cause"
)

// access is how clients join the server, as the ready lines say.
type access struct {
	token     string // the token clients present, or "" for none
	tokenFile string // the file keeping token; when set the token is not shown
	made      bool   // the token or the passwords were made at this start, not kept from an earlier one
	users     string // the configuration file whose users clients join as
	roles     []role // the users made without a configuration file
	open      bool   // anyone may join (NoAuth)
}

// role is a user the server makes when it has no configuration file: one
// of [deploy.Users], whose password is kept in passwordFile.
type role struct {
	user         string
	passwordFile string
}

// access settles how clients authenticate and sets opts to match: the
// file's own authorization, a token or, asked for explicitly, none; and
// without any of those, the users of nats/cluster-secure.conf with
// passwords kept in the store's directory.
func (c Config) access(opts *server.Options) (access, error) {
	own := c.File != "" && authorizes(opts)
	token := c.Token != "" || c.TokenFile != ""
	switch {
	case own && c.NoAuth:
		return access{}, fmt.Errorf("%s has an authorization of its own, which --no-auth would not remove: drop --no-auth", c.File)
	case own && token:
		return access{}, fmt.Errorf("%s has an authorization of its own: drop --nats-token and --token-file, or put the token in the file", c.File)
	case own:
		return access{users: c.File}, nil
	case c.NoAuth:
		return access{open: true}, nil
	case c.File != "" && !token:
		return access{}, fmt.Errorf("%s has no authorization, so anyone could use the bus: add users to it, give --nats-token or --token-file, or give --no-auth to run an open bus on purpose", c.File)
	case !token:
		// The password files are read, or made, once every other check
		// has passed.
		var a access
		for _, u := range deploy.Users {
			a.roles = append(a.roles, role{user: u, passwordFile: filepath.Join(opts.StoreDir, u+passwordExt)})
		}
		return a, nil
	}
	// A token file is read, or made, once every other check has passed.
	opts.Authorization = c.Token
	return access{token: c.Token, tokenFile: c.TokenFile}, nil
}

// authorizes reports whether a server configuration authenticates clients
// by itself: with users, nkeys, a token, operator JWTs, an auth callout or
// client certificates it verifies.
func authorizes(o *server.Options) bool {
	return len(o.Users) > 0 || len(o.Nkeys) > 0 || o.Username != "" || o.Authorization != "" ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.AuthCallout != nil || o.TLSVerify
}

// roleUsers returns the server's users for roles, each with the
// permissions nats/cluster-secure.conf gives it and the password kept in
// its file, made at the first start; made tells whether any password was
// made at this start.
func roleUsers(roles []role) (users []*server.User, made bool, err error) {
	perms, err := deploy.Permissions()
	if err != nil {
		return nil, false, fmt.Errorf("the permissions built into this program are unusable, so the bus cannot be closed with them (%w); give --config with users of your own", err)
	}
	users = make([]*server.User, 0, len(roles))
	for _, r := range roles {
		p := perms[r.user]
		if p == nil {
			return nil, false, fmt.Errorf("the permissions built into this program have no user %q; give --config with users of your own", r.user)
		}
		password, new, err := passwordFromFile(r.user, r.passwordFile)
		if err != nil {
			return nil, false, err
		}
		made = made || new
		users = append(users, &server.User{Username: r.user, Password: password, Permissions: p})
	}
	return users, made, nil
}

// tokenFromFile reads the token kept in path or, when there is no such
// file, makes one and keeps it there, readable by this user alone, so
// that a restart keeps the token its clients know.
func tokenFromFile(path string) (token string, made bool, err error) {
	return secretFile{
		path: path, named: "--token-file " + path, what: "a token",
		fixCreate: "give a path in a directory this user can write",
		fixWrite:  "give a path on a writable file system",
		make:      bus.NewToken,
	}.read()
}

// passwordFromFile reads the password of user kept in path or, when there
// is no such file, makes one and keeps it there, readable by this user
// alone, so that a restart keeps the password the ingress and workers
// read from it with --nats-password-file.
func passwordFromFile(user, path string) (password string, made bool, err error) {
	return secretFile{
		path: path, named: "the password file " + path + " of NATS user " + user, what: "a password",
		fixCreate: "give --data a directory this user can write",
		fixWrite:  "give --data a directory on a writable file system",
		make: func() string {
			c, err := deploy.NewCredentials(user)
			if err != nil {
				panic(err) // the users are deploy's own, whose names it accepts
			}
			return c.Password(user)
		},
	}.read()
}

// secretFile is a file that keeps a secret across restarts: a token or a
// password.
type secretFile struct {
	path      string
	named     string // how a sentence names the file
	what      string // what it holds, as in "put a token in it"
	fixCreate string // what to do when it cannot be created
	fixWrite  string // what to do when it cannot be written
	make      func() string
}

// read returns the secret kept in the file, without surrounding white
// space such as the final newline or, when there is no file, a new one
// from make, written to a new file of mode 0600.
func (f secretFile) read() (secret string, made bool, err error) {
	// Of two starts at once, one makes the file and the other reads it.
	for range 2 {
		var b []byte
		b, err = os.ReadFile(f.path)
		switch {
		case err == nil:
			secret = strings.TrimSpace(string(b))
			if secret == "" {
				return "", false, fmt.Errorf("%s is empty: put %s in it, or remove it to have one made", f.named, f.what)
			}
			return secret, false, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", false, fmt.Errorf("cannot read %s; give a file this user can read: %w", f.named, cause.Root(err))
		}
		secret = f.make()
		fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", false, fmt.Errorf("cannot create %s; %s: %w", f.named, f.fixCreate, cause.Root(err))
		}
		_, err = fh.WriteString(secret + "\n")
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.path)
			return "", false, fmt.Errorf("cannot write %s; %s: %w", f.named, f.fixWrite, cause.Root(err))
		}
		return secret, true, nil
	}
	return "", false, fmt.Errorf("cannot read %s, which another process made and removed at once: start again", f.named)
}
