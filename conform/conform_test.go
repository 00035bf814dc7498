package conform_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/conform"
)

// runKit runs the kit against the foreign worker with faults, started as a
// process of the test binary, on a NATS server of its own; only limits the
// rules. It returns the report and what the kit printed.
func runKit(t *testing.T, only []string, faults ...fault) (*conform.Report, string) {
	t.Helper()
	list := []string{"none"}
	for _, f := range faults {
		list = append(list, string(f))
	}
	return runKitOn(t, only, foreignEnv+"="+strings.Join(list, ","))
}

// runKitOn runs the kit against the test binary started with env, which
// makes it a worker (see TestMain), on a NATS server of its own; only
// limits the rules.
func runKitOn(t *testing.T, only []string, env string) (*conform.Report, string) {
	t.Helper()
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect(bus.WithName("conform-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var out, workerOut bytes.Buffer
	rep, err := conform.Run(context.Background(), conform.Config{
		Conn:         nc,
		Command:      []string{os.Args[0]},
		Env:          []string{"TOOLBUS_NATS_URL=" + e.ClientURL(), "TOOLBUS_NATS_TOKEN=" + e.Token(), env},
		Out:          &out,
		WorkerOutput: &workerOut,
		Only:         only,
	})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kit:\n%s\nworker:\n%s", out.String(), workerOut.String())
		}
	})
	return rep, out.String()
}

func TestForeignWorkerConforms(t *testing.T) {
	rep, _ := runKit(t, nil)
	if rep.Failed() {
		t.Fatalf("the foreign worker fails %d rules", rep.Count(conform.Fail))
	}
	// It leaves rules 9 and 10 out; everything else it speaks, reports
	// included.
	for _, key := range conform.RuleKeys() {
		res, ok := rep.Result(key)
		want := conform.Pass
		if key == "orphan" || key == "free-slots" {
			want = conform.Skip
		}
		if !ok || res.Status != want {
			t.Errorf("rule %s: %v (ran: %v), want %v", key, res.Status, ok, want)
		}
	}
	// It ignores Toolbus-Ack-Delay, as a worker older than revision 7.
	if res, _ := rep.Result("ack-delay"); !strings.Contains(res.Note, "acknowledges at once") {
		t.Errorf("rule ack-delay note %q, want it to say that the worker acknowledges at once", res.Note)
	}
}

// TestGoWorkerHoldsBackTheAck runs the rules of rules 8 and 10 against
// toolbus's own worker runtime, which holds back the ack for
// Toolbus-Ack-Delay and names its free slots.
func TestGoWorkerHoldsBackTheAck(t *testing.T) {
	rep, _ := runKitOn(t, []string{"liveness", "ack-delay", "free-slots"}, goWorkerEnv+"=1")
	for _, key := range []string{"liveness", "ack-delay", "free-slots"} {
		if res, ok := rep.Result(key); !ok || res.Status != conform.Pass {
			t.Errorf("rule %s: %v (ran: %v), want PASS", key, res.Status, ok)
		}
	}
	if res, _ := rep.Result("ack-delay"); !strings.Contains(res.Note, "holds back the ack") {
		t.Errorf("rule ack-delay note %q, want it to say that the worker holds back the ack", res.Note)
	}
}

// TestGoWorkerAnnounces runs the discovery rules against toolbus's own
// worker runtime, which announces each method on its own subject.
func TestGoWorkerAnnounces(t *testing.T) {
	rep, _ := runKitOn(t, []string{"announce", "drain"}, goWorkerEnv+"=1")
	for _, key := range []string{"announce", "drain"} {
		if res, ok := rep.Result(key); !ok || res.Status != conform.Pass {
			t.Errorf("rule %s: %v %+v (ran: %v), want PASS", key, res.Status, res, ok)
		}
	}
}

// TestGoWorkerAsks runs rule 11 against toolbus's own worker runtime,
// whose conform.ask asks with worker.Ask.
func TestGoWorkerAsks(t *testing.T) {
	rep, _ := runKitOn(t, []string{"ask"}, goWorkerEnv+"=1")
	if res, ok := rep.Result("ask"); !ok || res.Status != conform.Pass {
		t.Errorf("rule ask: %v %+v (ran: %v), want PASS", res.Status, res, ok)
	}
}

// TestAskSkippedWithoutAsks: a worker that declares asks on no tool skips
// rule 11, which is optional.
func TestAskSkippedWithoutAsks(t *testing.T) {
	rep, _ := runKit(t, []string{"ask"}, noAsks)
	if res, ok := rep.Result("ask"); !ok || res.Status != conform.Skip {
		t.Errorf("rule ask: %v %+v (ran: %v), want SKIP", res.Status, res, ok)
	}
}

func TestBrokenWorkersFail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault fault
		rule  string
	}{
		{"drops the id", dropID, "envelope"},
		{"ignores cancel", ignoreCancel, "cancel"},
		{"never acks", neverAck, "liveness"},
		{"holds back the ack for good", holdAck, "ack-delay"},
		{"names a free slot outside its direct subjects", badDirect, "free-slots"},
		{"answers a crash with success", crashSucceeds, "crash"},
		{"runs late calls", runLate, "late"},
		{"leaves without saying so", noLeaving, "drain"},
		{"announces on the shared subject of older workers", sharedAnnounce, "announce"},
		{"announces every tool on one method's subject", allOnOne, "announce"},
		{"takes an answer that is not sealed", plainAnswers, "ask"},
		{"asks in a call that cannot be asked", askUnasked, "ask"},
		{"answers only on inbox reply subjects", inboxOnly, "reply-subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, out := runKit(t, []string{tc.rule}, tc.fault)
			res, ok := rep.Result(tc.rule)
			if !ok || res.Status != conform.Fail {
				t.Fatalf("rule %s: %v (ran: %v), want FAIL", tc.rule, res.Status, ok)
			}
			if !strings.Contains(out, "FAIL  "+tc.rule) || !strings.Contains(out, "does not conform") {
				t.Errorf("the kit printed\n%s\nwant a FAIL line naming %s and a summary that says so", out, tc.rule)
			}
			if res.Sent == "" || res.Want == "" || res.Got == "" {
				t.Errorf("failure %+v: want what was sent, expected and got", res)
			}
		})
	}
}

func TestRunRefusesABadConfiguration(t *testing.T) {
	e, err := bus.StartEmbedded(bus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	for _, tc := range []struct {
		name string
		cfg  conform.Config
		want error
	}{
		{"no connection", conform.Config{Command: []string{"true"}}, conform.ErrConfig},
		{"no command", conform.Config{Conn: nc}, conform.ErrConfig},
		{"a wildcard prefix", conform.Config{Conn: nc, Command: []string{"true"}, Prefix: "a.*"}, conform.ErrConfig},
		{"an unknown rule", conform.Config{Conn: nc, Command: []string{"true"}, Only: []string{"nope"}}, conform.ErrConfig},
		{"a command that does not exist", conform.Config{Conn: nc, Command: []string{"/nonexistent/worker"}}, conform.ErrStart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := conform.Run(context.Background(), tc.cfg); !errors.Is(err, tc.want) {
				t.Errorf("Run = %v, want %v", err, tc.want)
			}
		})
	}
}
