package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/bus"
)

// TestCheckSubscribe runs the check against a server whose user may
// subscribe under toolbus.reply and nowhere under toolbus.jobs.
func TestCheckSubscribe(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "ingress", Password: "pass", Permissions: &server.Permissions{
			Subscribe: &server.SubjectPermission{Allow: []string{"toolbus.reply.>", "_INBOX.>"}},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready after 10s")
	}
	nc, err := bus.Connect(srv.ClientURL(), bus.WithUserPassword("ingress", "pass"),
		bus.WithNATSOptions(nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	refused := "toolbus.jobs.reply." + bus.ReplyToken() + ".*"
	err = bus.CheckSubscribe(ctx, nc, refused)
	if !errors.Is(err, nats.ErrPermissionViolation) || !bus.Permanent(err) {
		t.Fatalf("CheckSubscribe(%s) = %v, want a permanent permissions violation", refused, err)
	}
	// The refusal above is still the connection's last error: it is not
	// taken for a refusal of another subject.
	allowed := "toolbus.reply." + bus.ReplyToken() + ".*"
	if err := bus.CheckSubscribe(ctx, nc, allowed); err != nil {
		t.Fatalf("CheckSubscribe(%s) = %v, want nil", allowed, err)
	}
	// A wildcard the permission does not cover is refused, though a
	// subject under it is allowed.
	if err := bus.CheckSubscribe(ctx, nc, "toolbus.>"); !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("CheckSubscribe(toolbus.>) = %v, want a permissions violation", err)
	}

	nc.Close()
	if err := bus.CheckSubscribe(ctx, nc, allowed); err == nil || bus.Permanent(err) {
		t.Fatalf("CheckSubscribe on a closed connection = %v, want an error that may pass", err)
	}
}
