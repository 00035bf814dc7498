package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	autoscaling, err := filepath.Glob("k8s-autoscaling/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names = append(append(names, autoscaling...), "compose.yaml")
	if len(names) < 7 {
		t.Fatalf("manifests = %v, want compose.yaml, k8s/*.yaml and k8s-autoscaling/*.yaml", names)
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
		// Tags belong to the whole Docker daemon: the images are this
		// checkout's, named by the variable build-images.sh reads.
		if _, tag, _ := strings.Cut(image, ":"); !strings.HasPrefix(tag, "${TOOLBUS_IMAGE_TAG:?") {
			t.Errorf("service %s: image %q, want the tag ${TOOLBUS_IMAGE_TAG:?...}, required", name, image)
		}
		switch {
		case strings.HasPrefix(image, "toolbus-nats:"):
			count["nats"]++
			if svc.get("healthcheck.test") == nil {
				t.Errorf("%s has no health check", name)
			}
			if got := strings.Join(cmd, " "); got != "-c /etc/nats/cluster-secure.conf" {
				t.Errorf("%s command = %q, want the secured configuration (-c /etc/nats/cluster-secure.conf)", name, got)
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

// The NATS pods of the chart installed as in deploy/README.md (release
// "nats", nats-values.yaml): the chart's selector labels.
var natsPodLabels = map[string]any{
	"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "nats", "app.kubernetes.io/component": "nats",
}

// k8sContainer is a container of a pod template in the manifests.
type k8sContainer struct {
	where  string // file, object and container
	labels map[string]any
	c      doc
}

// toolbusContainers returns every container of the toolbus image in the
// manifests of k8s/, with the labels of its pod.
func toolbusContainers(t *testing.T) []k8sContainer {
	t.Helper()
	names, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []k8sContainer
	for _, name := range names {
		if filepath.Base(name) == "nats-values.yaml" || filepath.Base(name) == "kustomization.yaml" {
			continue
		}
		for key, obj := range byKind(t, readDocs(t, name)) {
			labels, _ := obj.get("spec.template.metadata.labels").(map[string]any)
			containers, _ := obj.get("spec.template.spec.containers").([]any)
			for _, c := range containers {
				c := doc(c.(map[string]any))
				if image, _ := c["image"].(string); strings.HasPrefix(image, "toolbus:") {
					out = append(out, k8sContainer{where: name + " " + key + " " + fmt.Sprint(c["name"]), labels: labels, c: c})
				}
			}
		}
	}
	return out
}

// envVar returns the env entry name of a container, or nil.
func envVar(c doc, name string) doc {
	env, _ := c.get("env").([]any)
	for _, e := range env {
		if m, _ := e.(map[string]any); m["name"] == name {
			return doc(m)
		}
	}
	return nil
}

// TestEveryNATSClientHasCredentials checks that every process of the
// manifests and of the compose file that connects to NATS does so as its
// role's user of the secured configuration, with the password generated
// for it: a Secret `toolbus nats-credentials --format k8s` makes, or a
// variable of the environment file it writes.
func TestEveryNATSClientHasCredentials(t *testing.T) {
	creds, err := NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	secrets := generatedSecrets(t, creds)
	var env bytes.Buffer
	if err := creds.WriteEnv(&env); err != nil {
		t.Fatal(err)
	}
	roles := map[string]int{}
	for _, k := range toolbusContainers(t) {
		role := ""
		if args := asStrings(k.c.get("args")); len(args) > 0 {
			role = args[0]
		}
		if role != "ingress" && role != "worker" {
			t.Errorf("%s runs %q, want ingress or worker", k.where, role)
			continue
		}
		roles[role]++
		if user := envVar(k.c, "TOOLBUS_NATS_USER"); user.get("value") != role {
			t.Errorf("%s: TOOLBUS_NATS_USER = %v, want %s", k.where, user.get("value"), role)
		}
		ref := envVar(k.c, "TOOLBUS_NATS_PASSWORD").get("valueFrom.secretKeyRef")
		name, key := doc(asMap(ref)).get("name"), doc(asMap(ref)).get("key")
		if name != SecretName(role) || key != SecretKey {
			t.Errorf("%s: TOOLBUS_NATS_PASSWORD from Secret %v key %v, want %s key %s", k.where, name, key, SecretName(role), SecretKey)
		}
		if secrets["Secret/"+SecretName(role)] == nil {
			t.Errorf("%s: toolbus nats-credentials makes no Secret %s", k.where, SecretName(role))
		}
		if role == "ingress" {
			ref := doc(asMap(envVar(k.c, MCPStateKeyVar).get("valueFrom.secretKeyRef")))
			if ref.get("name") != MCPStateSecretName || ref.get("key") != MCPStateSecretKey || secrets["Secret/"+MCPStateSecretName] == nil {
				t.Errorf("%s: %s from Secret %v key %v, want %s key %s, which toolbus nats-credentials makes", k.where, MCPStateKeyVar,
					ref.get("name"), ref.get("key"), MCPStateSecretName, MCPStateSecretKey)
			}
		}
		if v := envVar(k.c, "TOOLBUS_NATS_URL").get("value"); v == nil || strings.Contains(fmt.Sprint(v), "@") {
			t.Errorf("%s: TOOLBUS_NATS_URL = %v, want a URL without credentials", k.where, v)
		}
	}
	if roles["ingress"] == 0 || roles["worker"] == 0 {
		t.Errorf("the manifests run %v, want ingress and worker containers", roles)
	}

	// The NATS chart's values read both passwords from those Secrets.
	values := readDocs(t, "k8s/nats-values.yaml")[0]
	for _, u := range Users {
		ref := doc(asMap(values.get("container.env." + PasswordVar(u) + ".valueFrom.secretKeyRef")))
		if ref.get("name") != SecretName(u) || ref.get("key") != SecretKey {
			t.Errorf("nats-values container.env %s = %v, want Secret %s key %s", PasswordVar(u), ref, SecretName(u), SecretKey)
		}
	}

	// The compose file: its NATS nodes get both passwords, and every
	// ingress and worker its role's user and password, from variables the
	// generated environment file sets.
	services, _ := readDocs(t, "compose.yaml")[0]["services"].(map[string]any)
	for name, s := range services {
		svc := doc(s.(map[string]any))
		image, _ := svc["image"].(string)
		vars := asMap(svc.get("environment"))
		switch cmd := asStrings(svc["command"]); {
		case strings.HasPrefix(image, "toolbus-nats:"):
			for _, u := range Users {
				checkComposeVar(t, name, vars, PasswordVar(u), PasswordVar(u), env.String())
			}
		case len(cmd) > 0 && (cmd[0] == "ingress" || cmd[0] == "worker"):
			if vars["TOOLBUS_NATS_USER"] != cmd[0] {
				t.Errorf("compose %s: TOOLBUS_NATS_USER = %v, want %s", name, vars["TOOLBUS_NATS_USER"], cmd[0])
			}
			checkComposeVar(t, name, vars, "TOOLBUS_NATS_PASSWORD", PasswordVar(cmd[0]), env.String())
			if cmd[0] == "ingress" {
				checkComposeVar(t, name, vars, MCPStateKeyVar, MCPStateKeyVar, env.String())
			}
		default:
			t.Errorf("compose %s: %s %v connects to NATS how?", name, image, cmd)
		}
	}
}

// checkComposeVar checks that a compose service sets name to the variable
// from, required (${from:?...}), and that the environment file env sets
// from.
func checkComposeVar(t *testing.T, service string, vars map[string]any, name, from, env string) {
	t.Helper()
	v, _ := vars[name].(string)
	if !strings.HasPrefix(v, "${"+from+":?") {
		t.Errorf("compose %s: %s = %q, want ${%s:?...}: required, from the environment file", service, name, v, from)
	}
	if !strings.Contains(env, "\n"+from+"=") {
		t.Errorf("compose %s: the generated environment file does not set %s", service, from)
	}
}

// TestNATSValuesMatchSecureConfig checks that the users of nats-values.yaml
// are those of nats/cluster-secure.conf: the server reads both, the values
// rendered as the chart renders config.merge (JSON, "<< x >>" unquoted).
func TestNATSValuesMatchSecureConfig(t *testing.T) {
	t.Setenv("NATS_SERVER_NAME", "nats-1")
	t.Setenv("TOOLBUS_INGRESS_NATS_PASSWORD", ingressPassword)
	t.Setenv("TOOLBUS_WORKER_NATS_PASSWORD", workerPassword)
	conf, err := server.ProcessConfigFile("nats/cluster-secure.conf")
	if err != nil {
		t.Fatal(err)
	}
	values := readDocs(t, "k8s/nats-values.yaml")[0]
	// The chart writes JSON without escaping <, > and & (toRawJson).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"accounts": values.get("config.merge.accounts")}); err != nil {
		t.Fatal(err)
	}
	rendered := regexp.MustCompile(`"<<\s+(.*?)\s+>>"`).ReplaceAll(b.Bytes(), []byte("$1"))
	path := filepath.Join(t.TempDir(), "values.conf")
	if err := os.WriteFile(path, rendered, 0o600); err != nil {
		t.Fatal(err)
	}
	chart, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-values config.merge.accounts, as the chart renders it: %v\n%s", err, rendered)
	}
	users := func(o *server.Options) map[string]*server.User {
		m := map[string]*server.User{}
		for _, u := range o.Users {
			m[u.Username] = u
		}
		return m
	}
	want, got := users(conf), users(chart)
	if len(got) != len(want) {
		t.Fatalf("nats-values has users %v, cluster-secure.conf %v", got, want)
	}
	for name, w := range want {
		g := got[name]
		switch {
		case g == nil:
			t.Errorf("nats-values has no user %s", name)
		case g.Password != w.Password:
			t.Errorf("user %s: nats-values' password reads %q, cluster-secure.conf's %q", name, g.Password, w.Password)
		case g.Account == nil || g.Account.Name != w.Account.Name:
			t.Errorf("user %s: nats-values puts it in account %v, want %s", name, g.Account, w.Account.Name)
		case !reflect.DeepEqual(g.Permissions, w.Permissions):
			t.Errorf("user %s: nats-values' permissions\n%+v\nwant cluster-secure.conf's\n%+v", name, g.Permissions, w.Permissions)
		}
	}
}

// TestNetworkPolicy checks that the policy in front of the NATS pods
// admits only toolbus's ingress and worker pods to the client port, the
// NATS pods to the cluster port, and Prometheus to the monitoring port.
func TestNetworkPolicy(t *testing.T) {
	b, err := os.ReadFile("k8s/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("- networkpolicy.yaml")) {
		t.Error("k8s/kustomization.yaml does not apply networkpolicy.yaml")
	}
	policy := byKind(t, readDocs(t, "k8s/networkpolicy.yaml"))["NetworkPolicy/toolbus-nats"]
	if policy == nil {
		t.Fatal("k8s/networkpolicy.yaml has no NetworkPolicy/toolbus-nats")
	}
	if policy["apiVersion"] != "networking.k8s.io/v1" {
		t.Errorf("NetworkPolicy apiVersion = %v, want networking.k8s.io/v1", policy["apiVersion"])
	}
	if !selects(asMap(policy.get("spec.podSelector")), natsPodLabels) || selects(asMap(policy.get("spec.podSelector")), map[string]any{"app": "other"}) {
		t.Errorf("the policy applies to %v, want the NATS pods %v alone", policy.get("spec.podSelector"), natsPodLabels)
	}
	if types := asStrings(policy.get("spec.policyTypes")); !slices.Contains(types, "Ingress") {
		t.Errorf("policyTypes = %v, want Ingress", types)
	}

	// Pods that try each port: the toolbus pods of the manifests, and
	// others.
	type pod struct {
		name      string
		labels    map[string]any
		namespace map[string]any // nil: the namespace of the NATS pods
	}
	var toolbus []pod
	for _, k := range toolbusContainers(t) {
		toolbus = append(toolbus, pod{k.where, k.labels, nil})
	}
	if len(toolbus) < 2 {
		t.Fatalf("toolbus pods of the manifests: %v, want the ingress and the workers", toolbus)
	}
	nats := pod{"a NATS pod", natsPodLabels, nil}
	prometheus := pod{"Prometheus", map[string]any{"app.kubernetes.io/name": "prometheus"}, map[string]any{"kubernetes.io/metadata.name": "monitoring"}}
	others := []pod{
		{"a pod without labels", map[string]any{}, nil},
		{"another toolbus component", map[string]any{"app.kubernetes.io/name": "toolbus", "app.kubernetes.io/component": "debug"}, nil},
		{"a pod like the ingress in another namespace", toolbus[0].labels, map[string]any{"kubernetes.io/metadata.name": "elsewhere"}},
		{"a pod named prometheus outside monitoring", prometheus.labels, nil},
	}
	for _, tc := range []struct {
		port    int
		admit   []pod
		refuses []pod
	}{
		{4222, toolbus, append([]pod{nats, prometheus}, others...)},
		{6222, []pod{nats}, append(append([]pod{prometheus}, toolbus...), others...)},
		{8222, []pod{prometheus}, append(append([]pod{nats}, toolbus...), others...)},
		{9999, nil, append(append([]pod{nats, prometheus}, toolbus...), others...)},
	} {
		for _, p := range tc.admit {
			if !admits(t, policy, tc.port, p.labels, p.namespace) {
				t.Errorf("port %d: the policy refuses %s, want it admitted", tc.port, p.name)
			}
		}
		for _, p := range tc.refuses {
			if admits(t, policy, tc.port, p.labels, p.namespace) {
				t.Errorf("port %d: the policy admits %s, want it refused", tc.port, p.name)
			}
		}
	}
}

// admits reports whether the ingress rules of policy let a pod with labels,
// in the namespace whose labels are namespace (nil: the policy's own),
// reach the selected pods on TCP port. It follows the NetworkPolicy rules:
// a rule without ports admits every port, one without from every source; a
// peer with a podSelector alone means the policy's namespace; an ipBlock
// admits anyone, so this test counts it as admitting.
func admits(t *testing.T, policy doc, port int, labels, namespace map[string]any) bool {
	t.Helper()
	rules, _ := policy.get("spec.ingress").([]any)
	for _, r := range rules {
		rule := doc(asMap(r))
		if !rulePort(rule, port) {
			continue
		}
		from, ok := rule["from"].([]any)
		if !ok || len(from) == 0 {
			return true
		}
		for _, f := range from {
			peer := doc(asMap(f))
			if peer["ipBlock"] != nil {
				return true
			}
			nsSel, hasNS := peer["namespaceSelector"]
			podSel, hasPod := peer["podSelector"]
			nsOK := (!hasNS && namespace == nil) || (hasNS && namespace != nil && selects(asMap(nsSel), namespace))
			podOK := !hasPod || selects(asMap(podSel), labels)
			if nsOK && podOK {
				return true
			}
		}
	}
	return false
}

func rulePort(rule doc, port int) bool {
	ports, ok := rule["ports"].([]any)
	if !ok || len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := doc(asMap(p))
		if proto, _ := pp["protocol"].(string); proto != "" && proto != "TCP" {
			continue
		}
		if intOf(pp["port"]) == port {
			return true
		}
	}
	return false
}

// selects evaluates a Kubernetes label selector (matchLabels and
// matchExpressions) on labels; an empty selector selects everything.
func selects(sel map[string]any, labels map[string]any) bool {
	for k, v := range asMap(sel["matchLabels"]) {
		if labels[k] != v {
			return false
		}
	}
	exprs, _ := sel["matchExpressions"].([]any)
	for _, e := range exprs {
		expr := doc(asMap(e))
		key, _ := expr["key"].(string)
		v, has := labels[key]
		values := asStrings(expr["values"])
		switch expr["operator"] {
		case "In":
			if !has || !slices.Contains(values, fmt.Sprint(v)) {
				return false
			}
		case "NotIn":
			if has && slices.Contains(values, fmt.Sprint(v)) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
