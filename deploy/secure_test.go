package deploy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/jobs"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/demo"
)

const (
	ingressPassword = "ingress-test-pass"
	workerPassword  = "worker-test-pass"
)

// startSecure starts one node of nats/cluster-secure.conf alone, on a free
// loopback port with its store in a temporary directory, and returns its
// URL.
func startSecure(t *testing.T) string {
	t.Helper()
	t.Setenv("NATS_SERVER_NAME", "nats-test")
	t.Setenv("TOOLBUS_INGRESS_NATS_PASSWORD", ingressPassword)
	t.Setenv("TOOLBUS_WORKER_NATS_PASSWORD", workerPassword)
	opts, err := server.ProcessConfigFile("nats/cluster-secure.conf")
	if err != nil {
		t.Fatalf("ProcessConfigFile(nats/cluster-secure.conf): %v", err)
	}
	// One node: no routes, no monitoring port, nothing beyond loopback.
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = t.TempDir()
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
		t.Fatal("secured NATS not ready after 10s")
	}
	return srv.ClientURL()
}

func TestSecureConfigParses(t *testing.T) {
	t.Setenv("NATS_SERVER_NAME", "nats-1")
	t.Setenv("TOOLBUS_INGRESS_NATS_PASSWORD", ingressPassword)
	t.Setenv("TOOLBUS_WORKER_NATS_PASSWORD", workerPassword)
	opts, err := server.ProcessConfigFile("nats/cluster-secure.conf")
	if err != nil {
		t.Fatalf("ProcessConfigFile: %v", err)
	}
	if !opts.JetStream || len(opts.Routes) != 3 {
		t.Errorf("cluster-secure.conf: JetStream %v, %d routes, want cluster.conf's JetStream and 3 routes", opts.JetStream, len(opts.Routes))
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	for _, name := range []string{"ingress", "worker"} {
		u := users[name]
		if u == nil || u.Permissions == nil || u.Account == nil || u.Account.Name != "TOOLBUS" {
			t.Errorf("user %s = %+v, want it in account TOOLBUS with permissions", name, u)
		}
	}
}

func TestSecureConfigNeedsPasswords(t *testing.T) {
	t.Setenv("NATS_SERVER_NAME", "nats-1")
	t.Setenv("TOOLBUS_INGRESS_NATS_PASSWORD", ingressPassword)
	// The worker's password is deliberately not set.
	if _, err := server.ProcessConfigFile("nats/cluster-secure.conf"); err == nil {
		t.Fatal("ProcessConfigFile without TOOLBUS_WORKER_NATS_PASSWORD = nil, want an error")
	}
}

// connectAs connects as user and collects the connection's asynchronous
// errors, where permission violations arrive.
func connectAs(t *testing.T, url, user, pass string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := bus.Connect(url, bus.WithName("toolbus-"+user), bus.WithUserPassword(user, pass),
		bus.WithNATSOptions(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

func TestSecurePermissions(t *testing.T) {
	url := startSecure(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ingressNC, ingressErrs := connectAs(t, url, "ingress", ingressPassword)
	workerNC, workerErrs := connectAs(t, url, "worker", workerPassword)

	// The ingress sets up the job stream and bucket, as it does at start.
	ingressJS, err := jetstream.New(ingressNC)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := jobs.New(ingressJS)
	if err != nil {
		t.Fatalf("ingress jobs.New: %v", err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatalf("ingress jobs service Start: %v", err)
	}
	t.Cleanup(func() { svc.Shutdown(context.Background()) })

	// A worker serves the demo tools, announces them, and runs them as
	// jobs.
	rt, err := worker.New(workerNC, worker.WithDiscovery(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(rt); err != nil {
		t.Fatal(err)
	}
	workerJS, err := jetstream.New(workerNC)
	if err != nil {
		t.Fatal(err)
	}
	runner, err := jobs.NewRunner(workerJS, rt)
	if err != nil {
		t.Fatalf("worker jobs.NewRunner: %v", err)
	}
	if err := runner.Start(ctx); err != nil {
		t.Fatalf("worker job runner Start: %v", err)
	}
	t.Cleanup(func() { runner.Shutdown(context.Background()) })
	if err := rt.Start(); err != nil {
		t.Fatalf("worker Start: %v", err)
	}
	t.Cleanup(func() { rt.Shutdown(context.Background()) })

	// The ingress's call reaches the worker and its answer comes back.
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := subjects.Call("echo")
	if err != nil {
		t.Fatal(err)
	}
	env := &schema.CallEnvelope{Version: schema.EnvelopeVersion, ID: []byte("1"), Method: "echo", Params: []byte(`{"secured":true}`)}
	msg, err := bus.CallMsg(subject, env, time.Now().Add(10*time.Second), "")
	if err != nil {
		t.Fatal(err)
	}
	answer, err := ingressNC.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatalf("ingress call of echo: %v", err)
	}
	reply, err := bus.ReadReply(answer)
	if err != nil || reply.Error != nil {
		t.Fatalf("echo reply = %+v, %v; want a result", reply, err)
	}

	// The worker may not call tools itself.
	if err := workerNC.Publish("toolbus.call.x", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := workerNC.Flush(); err != nil {
		t.Fatal(err)
	}
	waitForViolation(t, workerErrs, "worker publish to toolbus.call.x")

	// Nor take calls outside the workers' queue group, where it would see
	// every call.
	if _, err := workerNC.Subscribe("toolbus.call.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := workerNC.Flush(); err != nil {
		t.Fatal(err)
	}
	waitForViolation(t, workerErrs, "worker subscription to toolbus.call.> without the queue group")

	// The ingress may not take calls.
	if _, err := ingressNC.QueueSubscribe("toolbus.call.>", subjects.QueueGroup(), func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := ingressNC.Flush(); err != nil {
		t.Fatal(err)
	}
	waitForViolation(t, ingressErrs, "ingress subscription to toolbus.call.>")

	// Both serve their status, and `toolbus status` with the ingress's
	// credentials finds them.
	for _, p := range []struct {
		nc   *nats.Conn
		kind string
	}{{ingressNC, bus.KindIngress}, {workerNC, bus.KindWorker}} {
		st, err := bus.ServeStatus(p.nc, subjects, p.kind, "dev", func() bus.Status { return bus.Status{} })
		if err != nil {
			t.Fatalf("%s status service: %v", p.kind, err)
		}
		t.Cleanup(func() { st.Stop() })
	}
	found, err := bus.GatherStatus(ctx, ingressNC, subjects, time.Second)
	if err != nil || len(found) != 2 {
		t.Fatalf("GatherStatus as the ingress = %+v, %v; want the ingress and the worker", found, err)
	}
	for _, st := range found {
		if st.Extra["error"] != nil {
			t.Errorf("%s %s: %v", st.Kind, st.ID, st.Extra["error"])
		}
	}
	noViolation(t, ingressErrs, "ingress")
	noViolation(t, workerErrs, "worker")
}

// noViolation fails the test if errs holds a permission violation.
func noViolation(t *testing.T, errs <-chan error, who string) {
	t.Helper()
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("%s: %v", who, err)
			}
		default:
			return
		}
	}
}

func waitForViolation(t *testing.T, errs <-chan error, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) {
				return
			}
			t.Logf("%s: other asynchronous error %v", what, err)
		case <-timeout:
			t.Fatalf("%s: no permissions violation within 10s", what)
		}
	}
}
