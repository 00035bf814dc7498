package deploy

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// secureConf is nats/cluster-secure.conf as shipped, built into the
// program so that a server started without the file grants what it grants.
//
//go:embed nats/cluster-secure.conf
var secureConf string

// secureInclude is the line of nats/cluster-secure.conf that brings in
// the cluster's settings: routes, listen addresses and the store, none of
// which concern what a user may do.
const secureInclude = "include ./cluster.conf"

// Permissions returns the NATS permissions nats/cluster-secure.conf gives
// each of its [Users], by user name, read from the shipped file itself
// rather than from a copy, so that a server given them lets each user do
// exactly what the secured deployment lets it do. The permissions are those
// of the default prefix "toolbus". Each call returns values of its own,
// which the caller may change.
func Permissions() (map[string]*server.Permissions, error) {
	return permissionsOf(secureConf)
}

// permissionsOf reads the users' permissions from conf, a text of
// nats/cluster-secure.conf. The file's include of cluster.conf is left
// out, as an include is resolved against a directory this text has none
// of, and placeholder passwords stand in for those the file reads from
// the environment.
func permissionsOf(conf string) (map[string]*server.Permissions, error) {
	lines := strings.Split(conf, "\n")
	kept := make([]string, 0, len(lines))
	found := false
	for _, l := range lines {
		if strings.TrimSpace(l) == secureInclude {
			found = true
			continue
		}
		kept = append(kept, l)
	}
	if !found {
		return nil, fmt.Errorf("nats/cluster-secure.conf has no line %q: keep the include, or change how Permissions reads the file", secureInclude)
	}
	var b strings.Builder
	for _, u := range Users {
		// A variable of the text itself is found before the environment's.
		fmt.Fprintf(&b, "%s: \"placeholder\"\n", PasswordVar(u))
	}
	b.WriteString(strings.Join(kept, "\n"))
	opts := &server.Options{}
	if err := opts.ProcessConfigString(b.String()); err != nil {
		return nil, fmt.Errorf("nats/cluster-secure.conf is not a usable NATS configuration: %w", err)
	}
	perms := make(map[string]*server.Permissions, len(Users))
	for _, u := range opts.Users {
		if u.Permissions == nil {
			return nil, fmt.Errorf("nats/cluster-secure.conf gives user %q no permissions: give every user a permissions block", u.Username)
		}
		perms[u.Username] = u.Permissions
	}
	var missing []string
	for _, u := range Users {
		if perms[u] == nil {
			missing = append(missing, u)
		}
	}
	if len(missing) > 0 {
		return nil, errors.New("nats/cluster-secure.conf has no user " + strings.Join(missing, " or ") + ": keep the users deploy.Users names")
	}
	return perms, nil
}
