package main

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/bench"
	"github.com/toolbus/toolbus/internal/proc"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
)

// runPart runs the toolbus command line args as a process of its own (this
// test binary, as TestMain runs it), logging at level info in JSON, and
// returns it once it prints a line that ready matches, with the match's
// first group. Its standard error, where it logs, is kept in log. The
// process is stopped when the test ends.
func runPart(t *testing.T, ready *regexp.Regexp, args ...string) (p *proc.Process, match string, log *syncBuffer) {
	t.Helper()
	log = &syncBuffer{}
	p, err := proc.Start(context.Background(), proc.Spec{
		Name:    "toolbus " + args[0],
		Command: append([]string{os.Args[0], "--log-level", "info", "--log-format", "json"}, args...),
		Env:     []string{runMainEnv + "=1"},
		Ready:   ready,
		Stdout:  log,
		Stderr:  log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop %s: %v", p, err)
		}
	})
	return p, p.Ready()[1], log
}

// echoAnswered sends echo calls to the ingress at rpcURL until one is
// answered with a result, and checks that it is params. A call may find
// no worker for a while (-32601, or -32003 while the ingress or the
// worker reconnects); any other error fails the test.
func echoAnswered(t *testing.T, rpcURL, params string) {
	t.Helper()
	var last schema.Response
	toolbustest.Eventually(t, func() bool {
		last = call(t, rpcURL, `{"jsonrpc":"2.0","id":1,"method":"echo","params":`+params+`}`)
		if last.Error == nil {
			return true
		}
		if c := last.Error.Code; c != schema.CodeMethodNotFound && c != schema.CodeUnavailable {
			t.Fatalf("echo %s = %+v, want a result", params, last.Error)
		}
		return false
	}, "an echo call is answered")
	if got := compact(last.Result); got != params {
		t.Errorf("echo %s = %s, want %s", params, got, params)
	}
}

// readyzUntil waits until the /readyz of the part at base answers code,
// and returns its reason.
func readyzUntil(t *testing.T, base string, code int, what string) string {
	t.Helper()
	var why string
	toolbustest.Eventually(t, func() bool {
		var got int
		got, why = readiness(t, base+"/readyz")
		return got == code
	}, what)
	return why
}

// TestPartsRecoverFromANatsRestart runs `toolbus nats` with the role users
// it generates, and a `toolbus ingress` and a `toolbus worker` that join
// it with the lines it prints, each a process of its own; stops `toolbus
// nats` and starts it again on the same data directory; and checks that
// the ingress and the worker recover by themselves: /readyz is 200 again,
// a call is answered and a job submitted after the restart succeeds.
func TestPartsRecoverFromANatsRestart(t *testing.T) {
	data := t.TempDir()
	nats, natsURL := runNatsIn(t, data)
	ingressArgs := strings.Fields(nats.waitFor(t, regexp.MustCompile(`(?m)^  toolbus (ingress --nats .*)$`)))
	workerArgs := strings.Fields(nats.waitFor(t, regexp.MustCompile(`(?m)^  toolbus (worker --nats .*)$`)))
	_, rpcURL, _ := runPart(t, bench.IngressReadyLine, append(ingressArgs, "--listen", "127.0.0.1:0", "--auth", "off")...)
	worker, _, _ := runPart(t, bench.WorkerReadyLine, append(workerArgs, "--tools", "demo", "--metrics-listen", "")...)
	base := strings.TrimSuffix(rpcURL, "/rpc")
	echoAnswered(t, rpcURL, `{"before":"restart"}`)

	stopNats(t, nats)
	why := readyzUntil(t, base, http.StatusServiceUnavailable, "the ingress's /readyz says NATS is gone")
	if !strings.Contains(why, "not connected to NATS") {
		t.Errorf("/readyz with NATS stopped says %q, want it to say NATS is not connected", why)
	}
	nats, _ = runNatsIn(t, data, "--nats-listen", strings.TrimPrefix(natsURL, "nats://"))
	if out := nats.out.String(); !strings.Contains(out, "passwords kept from an earlier start") {
		t.Errorf("the restart printed %q, want it to say the passwords were kept", out)
	}

	readyzUntil(t, base, http.StatusOK, "the ingress's /readyz is 200 after the restart")
	echoAnswered(t, rpcURL, `{"after":"restart"}`)
	// An outage longer than three announce intervals makes the ingress
	// forget the worker, which announces again after it reconnects, one
	// method after the other: sleep may be heard a moment after echo.
	toolbustest.Eventually(t, func() bool {
		out, err := execute(t, context.Background(), "tools", "show", "--url", rpcURL, "sleep")
		return err == nil && strings.Contains(out, `"workers": 1`)
	}, "the ingress hears the worker announce sleep again")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := execute(t, ctx, "jobs", "submit", "--url", rpcURL, "--wait", "--interval", "10ms", "sleep", `{"ms":20}`)
	if err != nil {
		t.Fatalf("jobs submit --wait sleep after the restart = %v; output:\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^succeeded `).MatchString(out) || !strings.Contains(out, `"slept_ms": 20`) {
		t.Errorf("jobs submit --wait sleep after the restart printed:\n%s\nwant it succeeded, having slept 20 ms", out)
	}
	select {
	case <-worker.Done():
		t.Errorf("the worker ended (%v), want it serving", worker.Err())
	default:
	}
	stopNats(t, nats)
}

// refusedLine is a log line of a failed attempt to reach NATS whose cause
// is the refusal of the credentials.
var refusedLine = regexp.MustCompile(`(?m)^.*"msg":"nats not connected".*refused the credentials.*$`)

// TestRefusedCredentialsUnderARunningIngress runs a `toolbus ingress`
// process against a NATS server that then comes back with another token,
// and checks what an operator sees: /readyz is 503 and says NATS refused
// the credentials and which flag gives them, the ingress keeps running
// and logs at most one line per attempt, which the server counts as a
// connection, and it is ready again by itself once the server takes its
// token again.
func TestRefusedCredentialsUnderARunningIngress(t *testing.T) {
	data := t.TempDir()
	start := func(addr, token string) *bus.Embedded {
		t.Helper()
		e, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: addr, Token: token, DataDir: data})
		if err != nil {
			t.Fatalf("start NATS on %s: %v", addr, err)
		}
		t.Cleanup(e.Shutdown)
		return e
	}
	first := start("127.0.0.1:0", "first-token")
	addr := first.Server().Addr().String()
	ingress, rpcURL, log := runPart(t, bench.IngressReadyLine, "ingress", "--nats", "nats://"+addr, "--nats-token", "first-token",
		"--listen", "127.0.0.1:0", "--auth", "off")
	base := strings.TrimSuffix(rpcURL, "/rpc")
	if code, why := readiness(t, base+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz once ready = %d %q, want 200", code, why)
	}

	first.Shutdown()
	second := start(addr, "second-token")
	// /readyz says first that the connection is gone, then, once an
	// attempt has been refused, why.
	var code int
	var why string
	toolbustest.Eventually(t, func() bool {
		code, why = readiness(t, base+"/readyz")
		return strings.Contains(why, "refused the credentials")
	}, "the ingress's /readyz says NATS refused the credentials")
	if code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with the credentials refused = %d %q, want 503", code, why)
	}
	for _, want := range []string{"NATS at " + addr + " refused the credentials", "now expects", "--nats-token or --token-file"} {
		if !strings.Contains(why, want) {
			t.Errorf("/readyz reason %q, want it to say %q", why, want)
		}
	}

	// A few refused attempts, each one line at most.
	toolbustest.Eventually(t, func() bool { return len(refusedLine.FindAllString(log.String(), -1)) >= 3 },
		"the ingress logs three refused attempts")
	lines := len(refusedLine.FindAllString(log.String(), -1))
	v, err := second.Server().Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(lines) > v.TotalConnections {
		t.Errorf("%d log lines about the refused credentials for %d attempts, want at most one per attempt:\n%s",
			lines, v.TotalConnections, strings.Join(refusedLine.FindAllString(log.String(), -1), "\n"))
	}
	select {
	case <-ingress.Done():
		t.Fatalf("the ingress ended (%v) once its credentials were refused, want it waiting for the fix", ingress.Err())
	default:
	}

	// The operator gives the server the ingress's token back.
	second.Shutdown()
	start(addr, "first-token")
	readyzUntil(t, base, http.StatusOK, "the ingress's /readyz is 200 with its token taken again")
}
