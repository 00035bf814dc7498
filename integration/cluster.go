//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/toolbus/toolbus/deploy"
)

// ImageTagVar is the environment variable that names the tag of the
// images the cluster runs, as deploy/build-images.sh, deploy/compose.yaml
// and .ci/run read it.
const ImageTagVar = "TOOLBUS_IMAGE_TAG"

// ImageTag returns the tag of the images the cluster runs, which
// deploy/build-images.sh builds: the one [ImageTagVar] names, or when it
// is unset, the one the script gives this checkout (its --tag prints it:
// dev- and a hash of the checkout's path), so that two checkouts on one
// machine never run each other's images.
func ImageTag(ctx context.Context) (string, error) {
	if tag := os.Getenv(ImageTagVar); tag != "" {
		return tag, nil
	}
	out, err := exec.CommandContext(ctx, buildScript(), "--tag").Output()
	if err != nil {
		return "", fmt.Errorf("the image tag of this checkout: deploy/build-images.sh --tag: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Images returns the toolbus and NATS images of tag.
func Images(tag string) (toolbus, nats string) {
	return "toolbus:" + tag, "toolbus-nats:" + tag
}

// buildScript returns the path of deploy/build-images.sh in the checkout
// that holds this file.
func buildScript() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "deploy", "build-images.sh")
}

// Node counts of a cluster.
const (
	NATSNodes = 3
	Ingresses = 2
	Workers   = 3
)

// JobLease is the ingresses' job lease: short, so that a job of a killed
// ingress is taken over within seconds.
const JobLease = 5 * time.Second

// JobConcurrency is the jobs one ingress's runner sends to workers at
// once: low, so that a queue of them waits while the workers hold some,
// and high enough that a worker killed while both runners have all their
// jobs out holds some of them, unless the queue group gave every one to
// the other workers ((2/3)^16 with three workers).
const JobConcurrency = 8

// DrainTimeout is how long a worker drains on SIGTERM.
const DrainTimeout = 20 * time.Second

// Cluster is a running toolbus cluster: its containers and the network
// they share. Its methods are safe for concurrent use; its containers are
// removed when the test that started it ends.
//
// NATS runs the shipped secured configuration, deploy/nats/cluster-secure.conf:
// the ingress replicas connect as its user "ingress" and the workers as
// "worker", with passwords generated for the cluster as `toolbus
// nats-credentials` makes them; no client joins without a user.
type Cluster struct {
	t       *testing.T
	docker  *testcontainers.DockerClient
	network *testcontainers.DockerNetwork
	NATS    []testcontainers.Container
	Ingress []testcontainers.Container
	Worker  []testcontainers.Container
	// Credentials are the NATS users' passwords of this cluster.
	Credentials deploy.Credentials

	mu    sync.Mutex
	urls  []string // ingress base URLs on 127.0.0.1, "" while one is down
	names map[testcontainers.Container]string
}

// StartOption changes the cluster [Start] brings up.
type StartOption func(*startConfig)

type startConfig struct {
	// secureConf replaces deploy/nats/cluster-secure.conf when not nil.
	secureConf []byte
	// users are the NATS users given passwords beside [deploy.Users].
	users []string
}

// WithNATSUsers runs the NATS nodes with conf in place of the shipped
// deploy/nats/cluster-secure.conf (it may include cluster.conf, which sits
// beside it) and gives users passwords beside the ingress's and the
// workers': conf reads each from the environment variable
// [deploy.PasswordVar] names, and [Cluster.Credentials] holds it. By
// default the shipped file runs, with its two users.
func WithNATSUsers(conf []byte, users ...string) StartOption {
	return func(c *startConfig) {
		c.secureConf = conf
		c.users = append(c.users, users...)
	}
}

// Start brings up a cluster: the NATS nodes, then the ingress replicas
// (the first creates the job stream with three replicas), then the
// workers, each waited for until it is ready. It fails the test if any
// part does not come up within a few minutes.
func Start(t *testing.T, opts ...StartOption) *Cluster {
	t.Helper()
	began := time.Now()
	var cfg startConfig
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tag, err := ImageTag(ctx)
	if err != nil {
		t.Fatalf("images: %v", err)
	}
	toolbusImage, natsImage := Images(tag)

	docker, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	t.Cleanup(func() { docker.Close() })
	nw, err := tcnetwork.New(ctx)
	testcontainers.CleanupNetwork(t, nw)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	creds, err := deploy.NewCredentials(slices.Concat(deploy.Users, cfg.users)...)
	if err != nil {
		t.Fatalf("NATS credentials: %v", err)
	}
	c := &Cluster{t: t, docker: docker, network: nw, urls: make([]string, Ingresses),
		names: make(map[testcontainers.Container]string), Credentials: creds}

	natsURLs := make([]string, NATSNodes)
	for i := range NATSNodes {
		natsURLs[i] = fmt.Sprintf("nats://nats-%d:4222", i+1)
	}
	// clientEnv is the environment of a process that connects as user.
	clientEnv := func(user string) map[string]string {
		return map[string]string{
			"TOOLBUS_NATS_URL":      strings.Join(natsURLs, ","),
			"TOOLBUS_NATS_USER":     user,
			"TOOLBUS_NATS_PASSWORD": creds.Password(user),
		}
	}

	// The NATS nodes start together: a JetStream cluster is healthy only
	// once a majority of it is up.
	var files []testcontainers.ContainerFile
	for _, f := range natsConfig(t, cfg.secureConf) {
		files = append(files, testcontainers.ContainerFile{HostFilePath: f, ContainerFilePath: "/etc/nats/" + filepath.Base(f), FileMode: 0o644})
	}
	c.NATS = c.startAll(ctx, NATSNodes, true, func(i int) testcontainers.ContainerRequest {
		name := fmt.Sprintf("nats-%d", i+1)
		env := map[string]string{"NATS_SERVER_NAME": name}
		for _, u := range creds.Users() {
			env[deploy.PasswordVar(u)] = creds.Password(u)
		}
		return testcontainers.ContainerRequest{
			Image:          natsImage,
			Cmd:            []string{"-c", "/etc/nats/cluster-secure.conf"},
			Env:            env,
			ExposedPorts:   []string{"4222/tcp", "8222/tcp"},
			Networks:       []string{nw.Name},
			NetworkAliases: map[string][]string{nw.Name: {name}},
			Files:          files,
		}
	})
	for i := range NATSNodes {
		c.WaitNATS(ctx, i)
	}

	ingressReq := func(i int) testcontainers.ContainerRequest {
		return testcontainers.ContainerRequest{
			Image: toolbusImage,
			Cmd: []string{"ingress", "--job-replicas", "3", "--auth=off",
				"--job-lease", JobLease.String(), "--job-concurrency", fmt.Sprint(JobConcurrency)},
			Env:            clientEnv("ingress"),
			ExposedPorts:   []string{"8080/tcp"},
			Networks:       []string{nw.Name},
			NetworkAliases: map[string][]string{nw.Name: {fmt.Sprintf("ingress-%d", i+1)}},
		}
	}
	// The first ingress creates the job stream and bucket; the second
	// finds them.
	c.Ingress = c.startAll(ctx, 1, false, ingressReq)
	c.WaitIngress(ctx, 0)
	c.Ingress = append(c.Ingress, c.startAll(ctx, Ingresses-1, false, func(i int) testcontainers.ContainerRequest {
		return ingressReq(i + 1)
	})...)
	for i := 1; i < Ingresses; i++ {
		c.WaitIngress(ctx, i)
	}

	// One after the other: the first creates the job consumers, the
	// others find them.
	c.Worker = c.startAll(ctx, Workers, false, func(i int) testcontainers.ContainerRequest {
		return testcontainers.ContainerRequest{
			Image: toolbusImage,
			Cmd: []string{"worker", "--tools", "demo", "--log-level", "debug",
				"--drain-timeout", DrainTimeout.String()},
			Env:            clientEnv("worker"),
			ExposedPorts:   []string{"9464/tcp"}, // /metrics, /healthz, /readyz
			Networks:       []string{nw.Name},
			NetworkAliases: map[string][]string{nw.Name: {fmt.Sprintf("worker-%d", i+1)}},
			WaitingFor:     wait.ForLog(`"msg":"worker ready"`).WithStartupTimeout(time.Minute),
		}
	})
	t.Logf("cluster up in %v: %d NATS nodes, %d ingress, %d workers on network %s",
		time.Since(began).Round(time.Millisecond), NATSNodes, Ingresses, Workers, nw.Name)
	return c
}

// startAll starts n containers, at once or one after the other, and fails
// the test if any of them does not come up in startAttempts tries. Each is
// removed when the test ends.
func (c *Cluster) startAll(ctx context.Context, n int, together bool, req func(i int) testcontainers.ContainerRequest) []testcontainers.Container {
	c.t.Helper()
	out := make([]testcontainers.Container, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		if together {
			wg.Go(func() { out[i], errs[i] = c.start(ctx, req(i)) })
		} else {
			out[i], errs[i] = c.start(ctx, req(i))
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Fatalf("start %s: %v", req(i).NetworkAliases[c.network.Name][0], err)
		}
	}
	return out
}

// startAttempts bounds the tries at starting one container. A process
// that exits while it starts (a worker whose JetStream consumers could not
// be set up in time on a cluster that is still settling) is started anew,
// as a restart policy would.
const startAttempts = 3

// start starts one container, trying again if it exits while it starts.
// It is safe to call from several goroutines at once.
func (c *Cluster) start(ctx context.Context, req testcontainers.ContainerRequest) (testcontainers.Container, error) {
	name := req.NetworkAliases[c.network.Name][0]
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var ctr testcontainers.Container
		ctr, err = testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
			ContainerRequest: req, Started: true,
		})
		if ctr != nil {
			c.mu.Lock()
			c.names[ctr] = name
			c.mu.Unlock()
		}
		if err == nil {
			// Cleanups run last first: the logs are read before the
			// container is removed.
			c.t.Cleanup(func() {
				if err := testcontainers.TerminateContainer(ctr); err != nil {
					c.t.Errorf("remove %s: %v", name, err)
				}
			})
			c.t.Cleanup(func() { c.dumpLogsOnFailure(ctr) })
			return ctr, nil
		}
		if ctr != nil {
			lines, _ := logLines(ctr)
			c.t.Logf("%s did not start (attempt %d of %d): %v\n%s", name, attempt, startAttempts, err, strings.Join(lines, "\n"))
			if err := testcontainers.TerminateContainer(ctr); err != nil {
				c.t.Errorf("remove %s: %v", name, err)
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, err
}

// natsConfig returns the paths of deploy/nats/cluster-secure.conf and of
// cluster.conf, which it includes: the configuration the compose file and
// the Kubernetes values run too. When secure is not nil, the first path is
// that of a file of the test's holding secure instead.
func natsConfig(t *testing.T, secure []byte) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "deploy", "nats")
	var out []string
	for _, name := range []string{"cluster-secure.conf", "cluster.conf"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("NATS configuration: %v", err)
		}
		out = append(out, p)
	}
	if secure != nil {
		out[0] = filepath.Join(t.TempDir(), "cluster-secure.conf")
		if err := os.WriteFile(out[0], secure, 0o644); err != nil {
			t.Fatalf("NATS configuration: %v", err)
		}
	}
	return out
}

// NATSURL returns the URL of NATS node i's client port on 127.0.0.1, for
// clients the test itself runs.
func (c *Cluster) NATSURL(ctx context.Context, i int) string {
	c.t.Helper()
	p, err := c.NATS[i].MappedPort(ctx, "4222/tcp")
	if err != nil {
		c.t.Fatalf("nats-%d client port: %v", i+1, err)
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", p.Num())
}

// WaitNATS waits until NATS node i answers its health check, JetStream
// included.
func (c *Cluster) WaitNATS(ctx context.Context, i int) {
	c.t.Helper()
	c.waitHealthy(ctx, c.NATS[i], "8222/tcp", "/healthz")
}

// WaitIngress waits until ingress i is ready, and records its URL (a
// restarted container gets a new host port).
func (c *Cluster) WaitIngress(ctx context.Context, i int) {
	c.t.Helper()
	c.waitHealthy(ctx, c.Ingress[i], "8080/tcp", "/readyz")
	c.refreshURL(ctx, i)
}

// waitHealthy polls path on ctr's port, mapped to 127.0.0.1, until it
// answers 200, for up to 90 seconds.
func (c *Cluster) waitHealthy(ctx context.Context, ctr testcontainers.Container, port, path string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		last = healthy(ctx, ctr, port, path)
		if last == nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	c.t.Fatalf("%s is not healthy: %v", c.name(ctr), last)
}

func healthy(ctx context.Context, ctr testcontainers.Container, port, path string) error {
	p, err := ctr.MappedPort(ctx, port)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", p.Num(), path), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	return nil
}

// Clients returns how many client connections NATS node i holds now,
// from its monitoring endpoint.
func (c *Cluster) Clients(ctx context.Context, i int) int {
	c.t.Helper()
	return c.connz(ctx, i).NumConnections
}

// connz is what NATS node i's monitoring endpoint says of its client
// connections now.
func (c *Cluster) connz(ctx context.Context, i int) connz {
	c.t.Helper()
	p, err := c.NATS[i].MappedPort(ctx, "8222/tcp")
	if err != nil {
		c.t.Fatalf("nats-%d port: %v", i+1, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// Far more connections than the cluster makes: the endpoint lists
	// 1024 by default.
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/connz?limit=4096", p.Num()), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("nats-%d connz: %v", i+1, err)
	}
	defer resp.Body.Close()
	var z connz
	if err := json.NewDecoder(resp.Body).Decode(&z); err != nil {
		c.t.Fatalf("nats-%d connz: %v", i+1, err)
	}
	return z
}

// connz is the part of a NATS node's /connz the cluster reads.
type connz struct {
	NumConnections int `json:"num_connections"`
	Connections    []struct {
		IP string `json:"ip"`
	} `json:"connections"`
}

// ClientsOf returns the ingress and worker containers that hold a
// connection to NATS node i now, in the order of [Cluster.Ingress] then
// [Cluster.Worker], found by their addresses on the cluster's network.
func (c *Cluster) ClientsOf(ctx context.Context, i int) []testcontainers.Container {
	c.t.Helper()
	on := make(map[string]bool)
	for _, conn := range c.connz(ctx, i).Connections {
		on[conn.IP] = true
	}
	var out []testcontainers.Container
	for _, ctr := range slices.Concat(c.Ingress, c.Worker) {
		ips, err := ctr.ContainerIPs(ctx)
		if err != nil {
			c.t.Fatalf("addresses of %s: %v", c.name(ctr), err)
		}
		if slices.ContainsFunc(ips, func(ip string) bool { return on[ip] }) {
			out = append(out, ctr)
		}
	}
	return out
}

// LoggedAt returns the times, within [from, to], of ctr's log lines whose
// msg is msg.
func (c *Cluster) LoggedAt(ctr testcontainers.Container, msg string, from, to time.Time) []time.Time {
	c.t.Helper()
	var out []time.Time
	for _, line := range c.Lines(ctr) {
		var l struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != msg || l.Time.Before(from) || l.Time.After(to) {
			continue
		}
		out = append(out, l.Time)
	}
	return out
}

// Name returns the name of ctr on the cluster's network, as nats-1 or
// worker-2.
func (c *Cluster) Name(ctr testcontainers.Container) string { return c.name(ctr) }

// Reconnects counts the "nats reconnected" lines of every ingress and
// worker log.
func (c *Cluster) Reconnects() int {
	c.t.Helper()
	n := 0
	for _, ctr := range append(append([]testcontainers.Container{}, c.Ingress...), c.Worker...) {
		for _, l := range c.Lines(ctr) {
			if strings.Contains(l, `"msg":"nats reconnected"`) {
				n++
			}
		}
	}
	return n
}

// ExitCode returns the exit code of a stopped container.
func (c *Cluster) ExitCode(ctr testcontainers.Container) int {
	c.t.Helper()
	st, err := ctr.State(context.Background())
	if err != nil {
		c.t.Fatalf("state of %s: %v", c.name(ctr), err)
	}
	if st.Running {
		c.t.Fatalf("%s is still running", c.name(ctr))
	}
	return st.ExitCode
}

// refreshURL records ingress i's URL after it (re)started: a restarted
// container gets a new host port.
func (c *Cluster) refreshURL(ctx context.Context, i int) {
	c.t.Helper()
	port, err := c.Ingress[i].MappedPort(ctx, "8080/tcp")
	if err != nil {
		c.t.Fatalf("ingress-%d port: %v", i+1, err)
	}
	c.mu.Lock()
	c.urls[i] = fmt.Sprintf("http://127.0.0.1:%d", port.Num())
	c.mu.Unlock()
}

// URL returns ingress i's base URL on 127.0.0.1, or "" while it is down.
func (c *Cluster) URL(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.urls[i]
}

// URLs returns the base URLs of the ingress replicas that are up.
func (c *Cluster) URLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, u := range c.urls {
		if u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Kill sends SIGKILL to ctr: the process dies at once, holding what it
// held.
func (c *Cluster) Kill(ctr testcontainers.Container) {
	c.t.Helper()
	if _, err := c.docker.ContainerKill(context.Background(), ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		c.t.Fatalf("kill %s: %v", c.name(ctr), err)
	}
}

// Pause freezes every process of ctr, as a hung host would be.
func (c *Cluster) Pause(ctr testcontainers.Container) {
	c.t.Helper()
	if _, err := c.docker.ContainerPause(context.Background(), ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		c.t.Fatalf("pause %s: %v", c.name(ctr), err)
	}
}

// Unpause lets a paused container run again.
func (c *Cluster) Unpause(ctr testcontainers.Container) {
	c.t.Helper()
	if _, err := c.docker.ContainerUnpause(context.Background(), ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil {
		c.t.Fatalf("unpause %s: %v", c.name(ctr), err)
	}
}

// Disconnect cuts ctr off the cluster's network.
func (c *Cluster) Disconnect(ctr testcontainers.Container) {
	c.t.Helper()
	if _, err := c.docker.NetworkDisconnect(context.Background(), c.network.ID,
		client.NetworkDisconnectOptions{Container: ctr.GetContainerID(), Force: true}); err != nil {
		c.t.Fatalf("disconnect %s: %v", c.name(ctr), err)
	}
}

// Connect joins ctr to the cluster's network again.
func (c *Cluster) Connect(ctr testcontainers.Container) {
	c.t.Helper()
	if _, err := c.docker.NetworkConnect(context.Background(), c.network.ID,
		client.NetworkConnectOptions{Container: ctr.GetContainerID()}); err != nil {
		c.t.Fatalf("connect %s: %v", c.name(ctr), err)
	}
}

// Stop sends SIGTERM to ctr and waits for it to exit, up to grace, after
// which Docker kills it.
func (c *Cluster) Stop(ctr testcontainers.Container, grace time.Duration) {
	c.t.Helper()
	if err := ctr.Stop(context.Background(), &grace); err != nil {
		c.t.Fatalf("stop %s: %v", c.name(ctr), err)
	}
}

// StartAgain starts a stopped container again; for an ingress it waits
// until it is ready and records its new port.
func (c *Cluster) StartAgain(ctr testcontainers.Container) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := ctr.Start(ctx); err != nil {
		c.t.Fatalf("start %s again: %v", c.name(ctr), err)
	}
	for i, in := range c.Ingress {
		if in == ctr {
			c.WaitIngress(ctx, i)
		}
	}
}

// StopIngress takes ingress i out of the load's rotation, as a load
// balancer does once its readiness fails, and stops it with SIGTERM.
func (c *Cluster) StopIngress(i int, grace time.Duration) {
	c.t.Helper()
	c.mu.Lock()
	c.urls[i] = ""
	c.mu.Unlock()
	c.Stop(c.Ingress[i], grace)
}

// WaitLog waits until ctr's log holds at least n lines containing s.
func (c *Cluster) WaitLog(ctr testcontainers.Container, s string, n int, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := 0
		for _, line := range c.Lines(ctr) {
			if strings.Contains(line, s) {
				got++
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s logged %q %d times in %v, want %d", c.name(ctr), s, got, timeout, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Lines returns ctr's log so far, one line per element.
func (c *Cluster) Lines(ctr testcontainers.Container) []string {
	c.t.Helper()
	lines, err := logLines(ctr)
	if err != nil {
		c.t.Fatalf("logs of %s: %v", c.name(ctr), err)
	}
	return lines
}

func logLines(ctr testcontainers.Container) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var lines []string
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}

// Served is what one worker's debug log says it ran: per request id (or
// job id) the codes of its runs, 0 for success.
type Served map[string][]int

// served reads the msg lines of a worker's log ("call": a job reaches a
// worker as a call whose JSON-RPC id is the job's id).
func (c *Cluster) served(ctr testcontainers.Container, msg string) Served {
	out := make(Served)
	for _, line := range c.Lines(ctr) {
		var l struct {
			Msg  string `json:"msg"`
			ID   string `json:"id"`
			Code int    `json:"code"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != msg {
			continue
		}
		var id string
		if json.Unmarshal([]byte(l.ID), &id) != nil {
			id = l.ID
		}
		out[id] = append(out[id], l.Code)
	}
	return out
}

// Calls returns what each worker's log says it served of the sync calls,
// by worker index.
func (c *Cluster) Calls() []Served {
	out := make([]Served, len(c.Worker))
	for i, w := range c.Worker {
		out[i] = c.served(w, "call")
	}
	return out
}

// CallsLogged is [Cluster.Calls] once every id of want appears in some
// worker's log, or after 30 seconds. Docker collects a container's output
// after the process wrote it, so a call answered a moment ago may not be
// in the log read at once.
func (c *Cluster) CallsLogged(want []string) []Served {
	return c.servedAll("call", want)
}

// JobRunsLogged is [Cluster.JobRuns] once every id of want appears in some
// worker's log, or after 30 seconds (see [Cluster.CallsLogged]).
func (c *Cluster) JobRunsLogged(want []string) []Served {
	return c.servedAll("call", want)
}

func (c *Cluster) servedAll(msg string, want []string) []Served {
	giveUp := time.Now().Add(30 * time.Second)
	for {
		out := make([]Served, len(c.Worker))
		for i, w := range c.Worker {
			out[i] = c.served(w, msg)
		}
		missing := 0
		for _, id := range want {
			found := false
			for _, s := range out {
				if len(s[id]) > 0 {
					found = true
					break
				}
			}
			if !found {
				missing++
			}
		}
		if missing == 0 || time.Now().After(giveUp) {
			return out
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// JobRuns returns what each worker's log says it ran of the jobs, by
// worker index.
func (c *Cluster) JobRuns() []Served {
	out := make([]Served, len(c.Worker))
	for i, w := range c.Worker {
		out[i] = c.served(w, "call")
	}
	return out
}

func (c *Cluster) name(ctr testcontainers.Container) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.names[ctr]; ok {
		return n
	}
	return ctr.GetContainerID()
}

// dumpLogsOnFailure logs the tail of a container's log when the test
// failed, so that a failure in CI can be read without the containers.
func (c *Cluster) dumpLogsOnFailure(ctr testcontainers.Container) {
	if !c.t.Failed() {
		return
	}
	lines, err := logLines(ctr)
	if err != nil {
		c.t.Logf("--- %s: no logs: %v", c.name(ctr), err)
		return
	}
	var keep []string
	for _, l := range lines {
		if !strings.Contains(l, `"level":"DEBUG"`) {
			keep = append(keep, l)
		}
	}
	if len(keep) > 40 {
		keep = keep[len(keep)-40:]
	}
	c.t.Logf("--- %s (last %d lines, debug left out)\n%s", c.name(ctr), len(keep), strings.Join(keep, "\n"))
}
