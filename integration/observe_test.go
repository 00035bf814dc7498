//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
)

// TestObservability: after a steady load over the containers, the
// ingresses' metrics count every call the load sent, exactly; the workers'
// metrics count every call they ran; every ingress sees three live
// workers per method; every worker is ready on its probe port; and
// `toolbus status`, run inside a container, finds both ingresses and all
// three workers over the bus.
func TestObservability(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	load := StartLoad(t, steady(c, "observe"))
	runFor(4 * time.Second)
	results, _ := load.StopAndCheck()
	checkClean(t, "observe", results)
	sent := map[string]float64{}
	for _, r := range results {
		sent[r.Method]++
	}

	// Ingresses: calls by method summed over both replicas equal what the
	// load sent, all answered ok.
	answered := map[string]float64{}
	for i := range c.Ingress {
		mf := scrape(ctx, t, c.Ingress[i], "8080/tcp")
		for m, v := range sumBy(mf["toolbus_ingress_calls_total"], "method", map[string]string{"code": "ok"}) {
			answered[m] += v
		}
		workers := sumBy(mf["toolbus_workers"], "method", nil)
		for _, m := range []string{"echo", "sleep"} {
			if workers[m] != Workers {
				t.Errorf("ingress-%d: toolbus_workers{method=%q} = %v, want %d", i+1, m, workers[m], Workers)
			}
		}
		if n := len(mf["toolbus_ingress_call_duration_seconds"].GetMetric()); n == 0 {
			t.Errorf("ingress-%d: no call duration histogram", i+1)
		}
	}
	for m, n := range sent {
		if answered[m] != n {
			t.Errorf("ingresses counted %v ok calls of %s, the load sent %v", answered[m], m, n)
		}
	}

	// Workers: every call the load sent ran once, so the workers' counts
	// add up to it too; each is ready.
	ran := map[string]float64{}
	for i, w := range c.Worker {
		mf := scrape(ctx, t, w, "9464/tcp")
		for m, v := range sumBy(mf["toolbus_worker_calls_total"], "method", map[string]string{"code": "ok"}) {
			ran[m] += v
		}
		if err := healthy(ctx, w, "9464/tcp", "/readyz"); err != nil {
			t.Errorf("worker-%d /readyz: %v", i+1, err)
		}
	}
	for m, n := range sent {
		if ran[m] != n {
			t.Errorf("workers counted %v ok runs of %s, the load sent %v", ran[m], m, n)
		}
	}

	// toolbus status, from inside the network.
	code, out, err := c.Ingress[0].Exec(ctx, []string{"/toolbus", "status", "--json", "--wait", "2s",
		"--nats", "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"}, tcexec.Multiplexed())
	if err != nil {
		t.Fatalf("exec toolbus status: %v", err)
	}
	raw, _ := io.ReadAll(out)
	if code != 0 {
		t.Fatalf("toolbus status exited %d: %s", code, raw)
	}
	// Standard error comes mixed in (log lines, if any); the JSON
	// document is what lies between the first { and the last }.
	text := string(raw)
	if i, j := strings.Index(text, "{"), strings.LastIndex(text, "}"); i >= 0 && j > i {
		text = text[i : j+1]
	}
	var report struct {
		Instances []struct {
			Kind, ID string
			Methods  []struct {
				Method string
				Total  int64
			}
		} `json:"instances"`
	}
	if err := json.Unmarshal([]byte(text), &report); err != nil {
		t.Fatalf("toolbus status --json: %v\n%s", err, raw)
	}
	kinds := map[string]int{}
	var total int64
	for _, in := range report.Instances {
		kinds[in.Kind]++
		if in.Kind == "worker" {
			for _, m := range in.Methods {
				total += m.Total
			}
		}
	}
	t.Logf("toolbus status: %v, %d calls run by the workers", kinds, total)
	if kinds["ingress"] != Ingresses || kinds["worker"] != Workers {
		t.Errorf("toolbus status found %v, want %d ingresses and %d workers", kinds, Ingresses, Workers)
	}
	if total != int64(len(results)) {
		t.Errorf("toolbus status: workers report %d calls, the load sent %d", total, len(results))
	}
}

// scrape reads the Prometheus metrics ctr serves on port.
func scrape(ctx context.Context, t *testing.T, ctr testcontainers.Container, port string) map[string]*dto.MetricFamily {
	t.Helper()
	p, err := ctr.MappedPort(ctx, port)
	if err != nil {
		t.Fatalf("metrics port: %v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", p.Num()), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return mf
}

// sumBy sums a counter or gauge family's values by one label, over the
// series whose other labels match where.
func sumBy(f *dto.MetricFamily, label string, where map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		key, ok := "", true
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
			}
			if want, has := where[lp.GetName()]; has && lp.GetValue() != want {
				ok = false
			}
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			out[key] += m.GetCounter().GetValue()
		case m.Gauge != nil:
			out[key] += m.GetGauge().GetValue()
		}
	}
	return out
}
