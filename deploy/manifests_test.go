package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// doc is one parsed YAML document; paths into it are dotted keys.
type doc map[string]any

// get follows a dotted path of map keys and list indexes ("spec.ports.0").
func (d doc) get(path string) any {
	var cur any = map[string]any(d)
	for _, key := range strings.Split(path, ".") {
		switch v := cur.(type) {
		case map[string]any:
			cur = v[key]
		case []any:
			i := 0
			for _, c := range key {
				if c < '0' || c > '9' {
					return nil
				}
				i = i*10 + int(c-'0')
			}
			if i >= len(v) {
				return nil
			}
			cur = v[i]
		default:
			return nil
		}
	}
	return cur
}

// readDocs parses every document of a YAML file.
func readDocs(t *testing.T, name string) []doc {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return parseDocs(t, name, b)
}

// generatedSecrets returns the Secrets `toolbus nats-credentials --format
// k8s` writes for creds, by "Kind/name".
func generatedSecrets(t *testing.T, creds Credentials) map[string]doc {
	t.Helper()
	var b bytes.Buffer
	if err := creds.WriteSecrets(&b); err != nil {
		t.Fatal(err)
	}
	return byKind(t, parseDocs(t, "the generated Secrets", b.Bytes()))
}

// parseDocs parses every document of the YAML b, read from name.
func parseDocs(t *testing.T, name string, b []byte) []doc {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []doc
	for {
		// A plain map, not a doc: the decoder gives nested maps the
		// type of the target.
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if d != nil {
			docs = append(docs, doc(d))
		}
	}
}

// byKind indexes Kubernetes objects by "Kind/name".
func byKind(t *testing.T, docs []doc) map[string]doc {
	t.Helper()
	m := make(map[string]doc)
	for _, d := range docs {
		kind, _ := d["kind"].(string)
		name, _ := d.get("metadata.name").(string)
		if kind == "" || name == "" || d["apiVersion"] == nil {
			t.Fatalf("object without apiVersion, kind or metadata.name: %v", d)
		}
		m[kind+"/"+name] = d
	}
	return m
}

func TestEveryManifestParses(t *testing.T) {
	names, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, "compose.yaml")
	if len(names) < 4 {
		t.Fatalf("manifests = %v, want compose.yaml and k8s/*.yaml", names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if docs := readDocs(t, name); len(docs) == 0 {
				t.Errorf("%s holds no document", name)
			}
		})
	}
}

func TestIngressManifest(t *testing.T) {
	objs := byKind(t, readDocs(t, "k8s/ingress.yaml"))
	for _, want := range []string{
		"Deployment/toolbus-ingress", "Service/toolbus-ingress",
		"PodDisruptionBudget/toolbus-ingress", "HorizontalPodAutoscaler/toolbus-ingress",
	} {
		if objs[want] == nil {
			t.Errorf("k8s/ingress.yaml has no %s", want)
		}
	}
	dep := objs["Deployment/toolbus-ingress"]
	if dep == nil {
		t.FailNow()
	}
	c := doc(dep.get("spec.template.spec.containers.0").(map[string]any))
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"replicas", dep.get("spec.replicas"), 2},
		{"args", strings.Join(asStrings(c.get("args")), " "), "ingress --job-replicas 3 --auth-file /etc/toolbus/auth/keys.json"},
		{"liveness path", c.get("livenessProbe.httpGet.path"), "/healthz"},
		{"readiness path", c.get("readinessProbe.httpGet.path"), "/readyz"},
		{"cpu request set", c.get("resources.requests.cpu") != nil, true},
		{"memory request set", c.get("resources.requests.memory") != nil, true},
		{"hpa target", objs["HorizontalPodAutoscaler/toolbus-ingress"].get("spec.scaleTargetRef.name"), "toolbus-ingress"},
		{"hpa api", objs["HorizontalPodAutoscaler/toolbus-ingress"]["apiVersion"], "autoscaling/v2"},
		{"pdb api", objs["PodDisruptionBudget/toolbus-ingress"]["apiVersion"], "policy/v1"},
	}
	for _, tc := range checks {
		if tc.got != tc.want {
			t.Errorf("ingress %s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	sel, _ := objs["Service/toolbus-ingress"].get("spec.selector").(map[string]any)
	labels, _ := dep.get("spec.template.metadata.labels").(map[string]any)
	if len(sel) == 0 {
		t.Errorf("the Service has no selector")
	}
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("Service selector %s=%v, pod label %v", k, v, labels[k])
		}
	}
	if grace := intOf(dep.get("spec.template.spec.terminationGracePeriodSeconds")); time.Duration(grace)*time.Second <= envDuration(t, c, "TOOLBUS_SHUTDOWN_TIMEOUT") {
		t.Errorf("ingress terminationGracePeriodSeconds = %d, want more than its shutdown timeout", grace)
	}
}

func TestWorkerManifest(t *testing.T) {
	objs := byKind(t, readDocs(t, "k8s/worker.yaml"))
	dep := objs["Deployment/toolbus-worker"]
	if dep == nil {
		t.Fatalf("k8s/worker.yaml has no Deployment/toolbus-worker")
	}
	if objs["PodDisruptionBudget/toolbus-worker"] == nil {
		t.Errorf("k8s/worker.yaml has no PodDisruptionBudget/toolbus-worker")
	}
	c := doc(dep.get("spec.template.spec.containers.0").(map[string]any))
	if got := asStrings(c.get("args")); len(got) == 0 || got[0] != "worker" {
		t.Errorf("worker args = %v, want worker ...", got)
	}
	if c.get("resources.requests.cpu") == nil || c.get("resources.requests.memory") == nil {
		t.Errorf("worker resource requests = %v, want cpu and memory", c.get("resources.requests"))
	}
	drain := envDuration(t, c, "TOOLBUS_DRAIN_TIMEOUT")
	grace := time.Duration(intOf(dep.get("spec.template.spec.terminationGracePeriodSeconds"))) * time.Second
	if grace <= drain {
		t.Errorf("worker terminationGracePeriodSeconds = %v, want more than its drain timeout %v", grace, drain)
	}
	// The probes and the scrape annotation name the port the worker
	// serves /metrics, /healthz and /readyz on (--metrics-listen).
	if got := c.get("readinessProbe.httpGet.path"); got != "/readyz" {
		t.Errorf("worker readiness probe path = %v, want /readyz", got)
	}
	if got := c.get("livenessProbe.httpGet.path"); got != "/healthz" {
		t.Errorf("worker liveness probe path = %v, want /healthz", got)
	}
	if got := c.get("ports.0.containerPort"); intOf(got) != 9464 {
		t.Errorf("worker port = %v, want 9464 (--metrics-listen)", got)
	}
	ann, _ := dep.get("spec.template.metadata.annotations").(map[string]any)
	if got := ann["prometheus.io/port"]; got != "9464" {
		t.Errorf("worker scrape annotation port = %v, want 9464", got)
	}
}

func TestNATSValues(t *testing.T) {
	docs := readDocs(t, "k8s/nats-values.yaml")
	if len(docs) != 1 {
		t.Fatalf("k8s/nats-values.yaml holds %d documents, want 1", len(docs))
	}
	v := docs[0]
	checks := []struct {
		path string
		want any
	}{
		{"config.cluster.enabled", true},
		{"config.cluster.replicas", 3},
		{"config.jetstream.enabled", true},
		{"config.jetstream.fileStore.enabled", true},
		{"fullnameOverride", "nats"},
	}
	for _, tc := range checks {
		if got := v.get(tc.path); got != tc.want {
			t.Errorf("nats-values %s = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestCompose(t *testing.T) {
	docs := readDocs(t, "compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("compose.yaml holds %d documents, want 1", len(docs))
	}
	services, _ := docs[0]["services"].(map[string]any)
	count := map[string]int{}
	for name, s := range services {
		svc := doc(s.(map[string]any))
		image, _ := svc["image"].(string)
		cmd := asStrings(svc["command"])
		switch {
		case strings.HasPrefix(image, "toolbus-nats:"):
			count["nats"]++
			if svc.get("healthcheck.test") == nil {
				t.Errorf("%s has no health check", name)
			}
		case strings.HasPrefix(image, "toolbus:") && len(cmd) > 0:
			count[cmd[0]]++
			if cmd[0] == "ingress" {
				if svc.get("healthcheck.test") == nil {
					t.Errorf("%s has no health check", name)
				}
				if !strings.Contains(strings.Join(cmd, " "), "--job-replicas 3") {
					t.Errorf("%s command = %v, want --job-replicas 3", name, cmd)
				}
			}
		default:
			t.Errorf("service %s: image %q command %v is neither NATS, ingress nor worker", name, image, cmd)
		}
	}
	want := map[string]int{"nats": 3, "ingress": 2, "worker": 3}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("compose.yaml runs %d %s, want %d", count[k], k, n)
		}
	}
}

func TestNATSConfigRoutesEveryNode(t *testing.T) {
	b, err := os.ReadFile("nats/cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jetstream", "nats-route://nats-1:6222", "nats-route://nats-2:6222", "nats-route://nats-3:6222", "server_name: $NATS_SERVER_NAME"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("nats/cluster.conf lacks %q", want)
		}
	}
}

func asStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func intOf(v any) int {
	n, _ := v.(int)
	return n
}

// envDuration returns the duration a container's environment variable
// sets, failing the test when it is absent or malformed.
func envDuration(t *testing.T, c doc, name string) time.Duration {
	t.Helper()
	env, _ := c.get("env").([]any)
	for _, e := range env {
		m, _ := e.(map[string]any)
		if m["name"] == name {
			s, _ := m["value"].(string)
			d, err := time.ParseDuration(s)
			if err != nil {
				t.Fatalf("%s=%q: %v", name, s, err)
			}
			return d
		}
	}
	t.Fatalf("the container sets no %s", name)
	return 0
}
