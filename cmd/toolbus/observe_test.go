package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/toolbustest"
)

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDevObservability checks what one toolbus dev process shows of
// itself: the ingress's, the worker's and the jobs' metrics at one
// /metrics, the dashboard, and both parts in toolbus status.
func TestDevObservability(t *testing.T) {
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data", t.TempDir())
	url := dev.waitFor(t, readyLine)
	natsURL := dev.waitFor(t, natsLine)
	token := dev.waitFor(t, joinLine)
	base := strings.TrimSuffix(url, "/rpc")
	if r := postEcho(t, url); r.Error != nil {
		t.Fatalf("echo: %v", r.Error)
	}

	code, metrics := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`toolbus_ingress_calls_total{code="ok",method="echo"} 1`,
		`toolbus_worker_calls_total{code="ok",method="echo"} 1`,
		`toolbus_jobs{state="queued"} 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code, page := get(t, base+"/ui/"); code != http.StatusOK || !strings.Contains(page, "<html") {
		t.Errorf("/ui/: %d", code)
	}
	code, state := get(t, base+"/ui/api/state")
	var st struct {
		Methods []struct {
			Method string
			Total  int
		}
		Jobs *struct{}
	}
	if err := json.Unmarshal([]byte(state), &st); code != http.StatusOK || err != nil {
		t.Fatalf("/ui/api/state: %d %v", code, err)
	}
	found := false
	for _, m := range st.Methods {
		found = found || (m.Method == "echo" && m.Total == 1)
	}
	if !found || st.Jobs == nil {
		t.Errorf("dashboard state %s: want echo with one call, and jobs", state)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := execute(t, ctx, "status", "--nats", natsURL, "--nats-token", token, "--json", "--wait", "500ms")
	if err != nil {
		t.Fatalf("toolbus status: %v", err)
	}
	var report struct {
		Instances []struct{ Kind string } `json:"instances"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	kinds := map[string]int{}
	for _, in := range report.Instances {
		kinds[in.Kind]++
	}
	if kinds["ingress"] != 1 || kinds["worker"] != 1 {
		t.Errorf("toolbus status found %v, want one ingress and one worker", kinds)
	}
}

// TestWorkerProbes checks a standalone worker's /metrics, /healthz and
// /readyz on --metrics-listen.
func TestWorkerProbes(t *testing.T) {
	dev := runCommand(t, "dev", "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--jobs=false")
	natsURL := dev.waitFor(t, natsLine)
	token := dev.waitFor(t, joinLine)
	addr := freeAddr(t)
	w := runCommand(t, "worker", "--nats", natsURL, "--nats-token", token, "--jobs=false", "--metrics-listen", addr)
	toolbustest.Eventually(t, func() bool {
		code, _ := tryGet("http://" + addr + "/readyz")
		return code == http.StatusOK
	}, "the worker's /readyz answers 200")
	if code, _ := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if _, m := get(t, "http://"+addr+"/metrics"); !strings.Contains(m, `toolbus_worker_in_flight{method="echo"} 0`) {
		t.Errorf("worker /metrics lacks its in-flight gauge:\n%.500s", m)
	}
	if err := w.stop(); err != nil {
		t.Errorf("worker stopped with %v", err)
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tryGet(url string) (int, string) {
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestObservabilityFlagErrors(t *testing.T) {
	const noNATS = "nats://127.0.0.1:1"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"ingress", "--nats", noNATS, "--trace-exporter", "jaeger"}, "--trace-exporter"},
		{[]string{"worker", "--nats", noNATS, "--trace-sample", "2"}, "--trace-sample"},
		{[]string{"dev", "--listen", "127.0.0.1:0", "--nats-listen", "", "--trace-endpoint", "http://c:4318"}, "--trace-endpoint"},
		{[]string{"dev", "--listen", "127.0.0.1:0", "--nats-listen", "", "--message-log", "bad..name"}, "message log"},
		{[]string{"dev", "--listen", "127.0.0.1:0", "--nats-listen", "", "--message-log", "echo", "--message-log-max-bytes", "-1"}, "max bytes"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := execute(t, ctx, tt.args...)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("toolbus %s = %v, want an error naming %s", strings.Join(tt.args, " "), err, tt.want)
		}
	}
}
