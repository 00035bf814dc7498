package deploy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

func TestPermissionsAreTheFiles(t *testing.T) {
	// The file as a node runs it: with cluster.conf and the passwords
	// from the environment.
	t.Setenv("NATS_SERVER_NAME", "nats-1")
	t.Setenv("TOOLBUS_INGRESS_NATS_PASSWORD", ingressPassword)
	t.Setenv("TOOLBUS_WORKER_NATS_PASSWORD", workerPassword)
	opts, err := server.ProcessConfigFile("nats/cluster-secure.conf")
	if err != nil {
		t.Fatalf("ProcessConfigFile: %v", err)
	}
	got, err := Permissions()
	if err != nil {
		t.Fatalf("Permissions() = %v", err)
	}
	if len(got) != len(Users) {
		t.Errorf("Permissions() has %d users, want %d (%v)", len(got), len(Users), Users)
	}
	for _, u := range opts.Users {
		if !reflect.DeepEqual(got[u.Username], u.Permissions) {
			t.Errorf("Permissions()[%s] = %+v, want the file's %+v", u.Username, got[u.Username], u.Permissions)
		}
	}
	// The worker may answer what it receives and publish no call; the
	// ingress publishes calls.
	if w := got["worker"]; w == nil || w.Response == nil || allows(w.Publish, "toolbus.call.>") {
		t.Errorf("Permissions()[worker] = %+v, want allow_responses and no call subject", w)
	}
	if i := got["ingress"]; i == nil || !allows(i.Publish, "toolbus.call.>") {
		t.Errorf("Permissions()[ingress] = %+v, want toolbus.call.> among its publish subjects", i)
	}
}

// allows reports whether p allows subject by name.
func allows(p *server.SubjectPermission, subject string) bool {
	return p != nil && slices.Contains(p.Allow, subject)
}

func TestPermissionsAreFresh(t *testing.T) {
	a, err := Permissions()
	if err != nil {
		t.Fatal(err)
	}
	a["worker"].Publish.Allow = append(a["worker"].Publish.Allow, "toolbus.call.>")
	delete(a, "ingress")
	b, err := Permissions()
	if err != nil {
		t.Fatal(err)
	}
	if b["ingress"] == nil || allows(b["worker"].Publish, "toolbus.call.>") {
		t.Errorf("Permissions() after a caller changed its result = %+v, want the file's permissions again", b)
	}
}

func TestPermissionsRefuses(t *testing.T) {
	tests := []struct {
		name string
		conf string
		want string // what the message must name
	}{
		{name: "no include", conf: strings.Replace(secureConf, secureInclude, "", 1), want: secureInclude},
		{name: "no worker", conf: strings.Replace(secureConf, "{ user: worker,", "{ user: someone,", 1), want: "worker"},
		{name: "unparsable", conf: secureConf + "\naccounts {\n", want: "not a usable"},
		// A user without permissions may do anything.
		{name: "user without permissions", conf: strings.Replace(secureConf, ", permissions: $WORKER_PERMISSIONS }",
			" }\n{ user: spare, password: x, permissions: $WORKER_PERMISSIONS }", 1), want: "worker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.conf == secureConf {
				t.Fatal("the test's change did not apply to nats/cluster-secure.conf: update the test")
			}
			got, err := permissionsOf(tt.conf)
			if err == nil {
				t.Fatalf("permissionsOf(changed file) = %v, nil, want an error", got)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("permissionsOf(changed file) = %v, want it to name %s", err, tt.want)
			}
		})
	}
}
