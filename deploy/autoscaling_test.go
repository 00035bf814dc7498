package deploy

import (
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/demo"
)

// The Prometheus that the autoscaling manifests read and that the
// NetworkPolicies admit, as deploy/README.md documents it: the
// kube-prometheus-stack's in the namespace "monitoring".
const (
	prometheusAddress   = "http://prometheus-operated.monitoring.svc:9090"
	prometheusNamespace = "monitoring"
)

var prometheusPodLabels = map[string]any{"app.kubernetes.io/name": "prometheus"}

// exported is what toolbus's processes export, found by running them.
type exported struct {
	// metrics maps each metric name to its label names.
	metrics map[string][]string
	// toolsets maps each toolset `toolbus worker --tools` serves in the
	// manifests to its methods.
	toolsets map[string][]string
}

// exportedMetrics gathers the metrics of an ingress that runs jobs (with
// one job of echo queued, which no worker serves, so that the backlog has
// a series) and of a worker serving the demo toolset, each in its own
// registry as in its own process.
func exportedMetrics(t *testing.T) exported {
	t.Helper()
	ingressReg := prometheus.NewRegistry()
	c := toolbustest.Start(t, toolbustest.WithMetrics(ingressReg), toolbustest.WithJobs(), toolbustest.WithoutWorker())
	if r := c.Call(t, schema.MethodJobsSubmit, `{"method":"echo"}`); r.Error != nil {
		t.Fatalf("submit a job of echo: %v", r.Error)
	}
	workerReg := prometheus.NewRegistry()
	nc, err := c.NATS.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	rt, err := worker.New(nc, worker.WithMetrics(workerReg))
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(rt); err != nil {
		t.Fatal(err)
	}
	out := exported{metrics: map[string][]string{}, toolsets: map[string][]string{"demo": rt.Methods()}}
	for _, g := range []prometheus.Gatherer{ingressReg, workerReg} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			var labels []string
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if !slices.Contains(labels, l.GetName()) {
						labels = append(labels, l.GetName())
					}
				}
			}
			out.metrics[mf.GetName()] = labels
		}
	}
	for _, name := range []string{"toolbus_ingress_in_flight", "toolbus_jobs_open", "toolbus_worker_in_flight"} {
		if out.metrics[name] == nil {
			t.Fatalf("the processes export no %s: %v", name, out.metrics)
		}
	}
	return out
}

// Metric selectors of a PromQL query (a toolbus metric and its label
// matchers), and the matchers within one.
var (
	selectorRe = regexp.MustCompile(`\b(toolbus_[A-Za-z0-9_]*)\s*(?:\{([^}]*)\})?`)
	matcherRe  = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$`)
)

// selector is one metric selector of a query.
type selector struct {
	metric   string
	matchers map[string][2]string // label: operator, value
}

// selectors returns the toolbus metric selectors of query, failing the
// test on a matcher it cannot read.
func selectors(t *testing.T, where, query string) []selector {
	t.Helper()
	var out []selector
	for _, m := range selectorRe.FindAllStringSubmatch(query, -1) {
		s := selector{metric: m[1], matchers: map[string][2]string{}}
		if strings.TrimSpace(m[2]) != "" {
			for _, part := range strings.Split(m[2], ",") {
				mm := matcherRe.FindStringSubmatch(part)
				if mm == nil {
					t.Fatalf("%s: cannot read the matcher %q of %q", where, part, query)
				}
				s.matchers[mm[1]] = [2]string{mm[2], mm[3]}
			}
		}
		out = append(out, s)
	}
	return out
}

// deployments returns the Deployments of the manifests of k8s/, by name.
func deployments(t *testing.T) map[string]doc {
	t.Helper()
	names, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]doc{}
	for _, name := range names {
		if b := filepath.Base(name); b == "nats-values.yaml" || b == "kustomization.yaml" {
			continue
		}
		for key, obj := range byKind(t, readDocs(t, name)) {
			if n, ok := strings.CutPrefix(key, "Deployment/"); ok {
				out[n] = obj
			}
		}
	}
	return out
}

// flagValue returns the value of --name in args, or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// autoscalingObjects returns the objects of k8s-autoscaling/, by
// "Kind/name", checking that its kustomization applies the toolbus
// manifests and every file of the directory.
func autoscalingObjects(t *testing.T) map[string]doc {
	t.Helper()
	kust := readDocs(t, "k8s-autoscaling/kustomization.yaml")[0]
	resources := asStrings(kust["resources"])
	if !slices.Contains(resources, "../k8s") {
		t.Errorf("k8s-autoscaling/kustomization.yaml resources = %v, want ../k8s among them", resources)
	}
	names, err := filepath.Glob("k8s-autoscaling/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]doc{}
	for _, name := range names {
		if filepath.Base(name) == "kustomization.yaml" {
			continue
		}
		if !slices.Contains(resources, filepath.Base(name)) {
			t.Errorf("k8s-autoscaling/kustomization.yaml does not apply %s", filepath.Base(name))
		}
		for k, v := range byKind(t, readDocs(t, name)) {
			objs[k] = v
		}
	}
	return objs
}

// TestScaledObjects checks the KEDA ScaledObjects against the manifests
// they scale and against the metrics toolbus exports: each targets a
// Deployment of k8s/ that runs workers, reads the documented Prometheus,
// queries metrics (and labels) that the ingress and the workers really
// export, for the methods the Deployment really serves, scales on both the
// family's in-flight calls and its job backlog with positive thresholds
// no higher than a worker's concurrency, and goes to zero only when the
// backlog can wake it.
func TestScaledObjects(t *testing.T) {
	objs := autoscalingObjects(t)
	deps := deployments(t)
	exp := exportedMetrics(t)
	scaled := 0
	for key, so := range objs {
		if !strings.HasPrefix(key, "ScaledObject/") {
			continue
		}
		scaled++
		t.Run(key, func(t *testing.T) {
			if so["apiVersion"] != "keda.sh/v1alpha1" {
				t.Errorf("apiVersion = %v, want keda.sh/v1alpha1", so["apiVersion"])
			}
			ref := doc(asMap(so.get("spec.scaleTargetRef")))
			if k, ok := ref["kind"]; ok && k != "Deployment" {
				t.Errorf("scaleTargetRef.kind = %v, want Deployment", k)
			}
			if v, ok := ref["apiVersion"]; ok && v != "apps/v1" {
				t.Errorf("scaleTargetRef.apiVersion = %v, want apps/v1", v)
			}
			name, _ := ref["name"].(string)
			dep := deps[name]
			if dep == nil {
				t.Fatalf("scaleTargetRef.name = %q, no Deployment of k8s/ has that name", name)
			}
			c := doc(asMap(dep.get("spec.template.spec.containers.0")))
			args := asStrings(c["args"])
			if len(args) == 0 || args[0] != "worker" {
				t.Fatalf("Deployment %s runs %v, want a worker", name, args)
			}
			toolset := flagValue(args, "tools")
			methods := exp.toolsets[toolset]
			if len(methods) == 0 {
				t.Fatalf("Deployment %s serves --tools %q, a toolset this test does not know", name, toolset)
			}
			concurrency, err := strconv.Atoi(flagValue(args, "concurrency"))
			if err != nil {
				t.Fatalf("Deployment %s: --concurrency of %v: %v; want it set, the thresholds depend on it", name, args, err)
			}

			minR, maxR := intOf(so.get("spec.minReplicaCount")), intOf(so.get("spec.maxReplicaCount"))
			if _, ok := asMap(so["spec"])["minReplicaCount"]; !ok {
				t.Error("minReplicaCount unset (KEDA's default is 0): say whether the family may go to zero")
			}
			if minR < 0 || maxR < 1 || minR > maxR {
				t.Errorf("replicas from %d to %d, want 0 <= min <= max, max >= 1", minR, maxR)
			}
			if fb := so.get("spec.fallback.replicas"); fb != nil && (intOf(fb) < max(minR, 1) || intOf(fb) > maxR) {
				t.Errorf("fallback replicas = %v, want within %d..%d", fb, max(minR, 1), maxR)
			}

			triggers, _ := so.get("spec.triggers").([]any)
			reads := map[string]bool{}
			family := ""
			for i, tr := range triggers {
				tr := doc(asMap(tr))
				where := key + " trigger " + strconv.Itoa(i)
				if tr["type"] != "prometheus" {
					t.Errorf("%s: type %v, want prometheus", where, tr["type"])
					continue
				}
				if mt, ok := tr["metricType"]; ok && mt != "AverageValue" {
					t.Errorf("%s: metricType %v, want AverageValue: a threshold is per worker", where, mt)
				}
				if got := tr.get("metadata.serverAddress"); got != prometheusAddress {
					t.Errorf("%s: serverAddress %v, want the documented %s", where, got, prometheusAddress)
				}
				threshold, err := strconv.ParseFloat(fmtString(tr.get("metadata.threshold")), 64)
				if err != nil || threshold <= 0 {
					t.Errorf("%s: threshold %v, want a positive number", where, tr.get("metadata.threshold"))
				}
				if threshold > float64(concurrency) {
					t.Errorf("%s: threshold %v above a worker's --concurrency %d: workers would be full before one is added", where, threshold, concurrency)
				}
				if a, ok := asMap(tr["metadata"])["activationThreshold"]; ok {
					if v, err := strconv.ParseFloat(fmtString(a), 64); err != nil || v < 0 {
						t.Errorf("%s: activationThreshold %v, want a number >= 0", where, a)
					}
				}
				query := fmtString(tr.get("metadata.query"))
				sels := selectors(t, where, query)
				if len(sels) == 0 {
					t.Errorf("%s: query %q reads no toolbus metric", where, query)
				}
				for _, s := range sels {
					labels, ok := exp.metrics[s.metric]
					if !ok {
						t.Errorf("%s: query reads %s, which toolbus does not export", where, s.metric)
						continue
					}
					reads[s.metric] = true
					for label, m := range s.matchers {
						if !slices.Contains(labels, label) {
							t.Errorf("%s: %s has no label %s (it has %v)", where, s.metric, label, labels)
						}
						if label != "method" {
							continue
						}
						if m[0] != "=~" {
							t.Errorf("%s: method%s%q, want method=~ the family's methods", where, m[0], m[1])
							continue
						}
						if family == "" {
							family = m[1]
						} else if family != m[1] {
							t.Errorf("%s: method=~%q, another trigger reads %q: both must read the same family", where, m[1], family)
						}
					}
					if _, ok := s.matchers["method"]; !ok {
						t.Errorf("%s: %s without a method matcher: the triggers must read the Deployment's tools alone", where, s.metric)
					}
				}
				// The ingress counts its own calls in flight; every ingress
				// reports the cluster's jobs.
				switch {
				case strings.Contains(query, "toolbus_ingress_in_flight") && !strings.HasPrefix(query, "sum("):
					t.Errorf("%s: query %q, want the sum over the ingress replicas", where, query)
				case strings.Contains(query, "toolbus_jobs_open") && !strings.HasPrefix(query, "max("):
					t.Errorf("%s: query %q, want the largest of the ingress replicas' counts, not their sum", where, query)
				}
			}
			for _, want := range []string{"toolbus_ingress_in_flight", "toolbus_jobs_open"} {
				if !reads[want] {
					t.Errorf("no trigger reads %s: want one on the in-flight calls and one on the job backlog", want)
				}
			}
			// The family's selector matches exactly the Deployment's
			// methods, as Prometheus anchors it.
			if family != "" {
				re, err := regexp.Compile("^(?:" + family + ")$")
				if err != nil {
					t.Fatalf("method=~%q: %v", family, err)
				}
				for _, m := range methods {
					if !re.MatchString(m) {
						t.Errorf("method=~%q misses %s, which --tools %s serves", family, m, toolset)
					}
				}
				for _, alt := range strings.Split(family, "|") {
					if !slices.ContainsFunc(methods, regexp.MustCompile("^(?:"+alt+")$").MatchString) {
						t.Errorf("method=~%q names %q, which --tools %s does not serve", family, alt, toolset)
					}
				}
			}
			// While a family has no worker, its calls are answered -32003
			// at once and are never in flight; only its queued jobs can
			// wake it.
			if minR == 0 && !reads["toolbus_jobs_open"] {
				t.Error("minReplicaCount 0 without a trigger on toolbus_jobs_open: nothing could start a worker again")
			}
		})
	}
	if scaled == 0 {
		t.Error("k8s-autoscaling/ has no ScaledObject")
	}
	// Every worker Deployment scales.
	for name, dep := range deps {
		if args := asStrings(dep.get("spec.template.spec.containers.0.args")); len(args) == 0 || args[0] != "worker" {
			continue
		}
		found := false
		for key, so := range objs {
			found = found || strings.HasPrefix(key, "ScaledObject/") && so.get("spec.scaleTargetRef.name") == name
		}
		if !found {
			t.Errorf("the worker Deployment %s has no ScaledObject", name)
		}
	}
}

// TestPrometheusReachesMetrics checks that the Prometheus the
// ScaledObjects read is the one the NetworkPolicies admit, that the
// PodMonitors scrape the ports the pods serve /metrics on, and that the
// policies let that Prometheus, and nothing else, reach them: the
// ingress's and the workers' metrics ports and NATS's monitoring port.
// KEDA talks to Prometheus alone, so no policy admits it.
func TestPrometheusReachesMetrics(t *testing.T) {
	u, err := url.Parse(prometheusAddress)
	if err != nil {
		t.Fatal(err)
	}
	if host := strings.Split(u.Hostname(), "."); len(host) < 2 || host[1] != prometheusNamespace {
		t.Errorf("%s is not a Service of the namespace %s", prometheusAddress, prometheusNamespace)
	}
	policies := byKind(t, readDocs(t, "k8s/networkpolicy.yaml"))
	promNS := map[string]any{"kubernetes.io/metadata.name": prometheusNamespace}
	keda := map[string]any{"app": "keda-operator", "app.kubernetes.io/name": "keda-operator"}
	kedaNS := map[string]any{"kubernetes.io/metadata.name": "keda"}
	// reaches reports whether a pod reaches port of the pods labelled
	// target (in the policies' namespace): yes when no policy selects
	// them, else when one of those admits it.
	reaches := func(target map[string]any, port int, labels, namespace map[string]any) bool {
		selected := false
		for _, p := range policies {
			if p["kind"] != "NetworkPolicy" || !selects(asMap(p.get("spec.podSelector")), target) {
				continue
			}
			selected = true
			if admits(t, p, port, labels, namespace) {
				return true
			}
		}
		return !selected
	}

	monitors := map[string]doc{}
	for k, o := range autoscalingObjects(t) {
		if n, ok := strings.CutPrefix(k, "PodMonitor/"); ok {
			monitors[n] = o
			if o["apiVersion"] != "monitoring.coreos.com/v1" {
				t.Errorf("%s apiVersion = %v, want monitoring.coreos.com/v1", k, o["apiVersion"])
			}
		}
	}
	for name, dep := range deployments(t) {
		labels := asMap(dep.get("spec.template.metadata.labels"))
		ann := asMap(dep.get("spec.template.metadata.annotations"))
		port, err := strconv.Atoi(fmtString(ann["prometheus.io/port"]))
		if err != nil {
			t.Errorf("Deployment %s: prometheus.io/port = %v, want the port of /metrics", name, ann["prometheus.io/port"])
			continue
		}
		// A PodMonitor selects the pods and names the same port.
		var monitor doc
		for _, m := range monitors {
			if selects(asMap(m.get("spec.selector")), labels) {
				monitor = m
			}
		}
		if monitor == nil {
			t.Errorf("Deployment %s: no PodMonitor of k8s-autoscaling/ selects its pods", name)
		} else {
			portName := monitor.get("spec.podMetricsEndpoints.0.port")
			ports, _ := dep.get("spec.template.spec.containers.0.ports").([]any)
			found := false
			for _, p := range ports {
				p := doc(asMap(p))
				if p["name"] == portName && intOf(p["containerPort"]) == port {
					found = true
				}
			}
			if !found || monitor.get("spec.podMetricsEndpoints.0.path") != ann["prometheus.io/path"] {
				t.Errorf("Deployment %s: its PodMonitor scrapes port %v path %v, want the container port %d and path %v of its annotations",
					name, portName, monitor.get("spec.podMetricsEndpoints.0.path"), port, ann["prometheus.io/path"])
			}
		}
		if !reaches(labels, port, prometheusPodLabels, promNS) {
			t.Errorf("Deployment %s: the NetworkPolicies refuse Prometheus (namespace %s) its metrics port %d", name, prometheusNamespace, port)
		}
		if labels["app.kubernetes.io/component"] == "worker" {
			// Nothing but Prometheus reaches a worker.
			for _, other := range []struct {
				name      string
				labels    map[string]any
				namespace map[string]any
			}{
				{"KEDA", keda, kedaNS},
				{"a NATS pod", natsPodLabels, nil},
				{"the ingress", map[string]any{"app.kubernetes.io/name": "toolbus", "app.kubernetes.io/component": "ingress"}, nil},
				{"a pod without labels", map[string]any{}, nil},
				{"Prometheus outside " + prometheusNamespace, prometheusPodLabels, nil},
			} {
				if reaches(labels, port, other.labels, other.namespace) {
					t.Errorf("Deployment %s: the NetworkPolicies admit %s to port %d, want only Prometheus", name, other.name, port)
				}
			}
			if reaches(labels, 8080, prometheusPodLabels, promNS) {
				t.Errorf("Deployment %s: Prometheus reaches port 8080, want only its metrics port", name)
			}
		}
	}
	for _, port := range []int{4222, 6222, 8222} {
		if reaches(natsPodLabels, port, keda, kedaNS) {
			t.Errorf("KEDA reaches NATS's port %d, want it to ask Prometheus alone", port)
		}
	}
	if !reaches(natsPodLabels, 8222, prometheusPodLabels, promNS) {
		t.Error("Prometheus cannot reach NATS's monitoring port 8222")
	}
}

// fmtString returns v as a string: YAML may read a threshold as a number.
func fmtString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return ""
}
