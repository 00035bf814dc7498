//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schema"
)

// The structure of a NUID (github.com/nats-io/nuid), which the reply
// tokens of job calls once were: a random prefix fixed per process, then a
// base62 sequence that grows by an increment drawn once per process in
// [nuidMinInc, nuidMaxInc).
const (
	nuidSeqLen = 10
	nuidLen    = 22
	nuidMinInc = 33
	nuidMaxInc = 333
	nuidMaxSeq = int64(839299365868340224) // 62^10
	base62     = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// forgeBudget bounds the guesses one attack publishes: a few
// milliseconds of publishing, and what the original attack needed.
const forgeBudget = 5000

// forgedResult is the result every forged answer carries.
const forgedResult = `{"forged":true}`

// victimSleep is how long each of the victim's jobs runs on a real
// worker: long enough that the guesses are published while it runs.
const victimSleep = 8 * time.Second

// victimJobs is how many jobs the victim submits; fewer than the jobs
// the runners send to workers at once, so that all run together.
const victimJobs = 3

// familyUser is the per-family worker user deploy/README.md documents,
// which reaches only the math.* methods.
const familyUser = "worker-math"

// TestJobReplyForgery attacks the answers of jobs. A job reaches a worker
// as a call whose answers go to "toolbus.jobs.reply.<runner>.<token>",
// where any worker credential may publish: only an unguessable token keeps
// a worker from answering the jobs it was never given. A rogue process
// with a worker's credential joins the workers' queue group for a method,
// receives some of that method's jobs, answers them honestly, and reads
// in their reply subjects whatever structure the tokens have. While
// another tenant's long sleep jobs run on the real workers, it publishes
// a bounded number of forged answers on the subjects it infers. None may
// be taken: each victim job must end with its real worker's result.
//
// It runs once with the shared worker credential of the shipped
// configuration, and once with the per-family credential deploy/README.md
// documents, added to that configuration: a family's worker must not
// answer another family's jobs either.
func TestJobReplyForgery(t *testing.T) {
	c := Start(t, WithNATSUsers(familyConf(t), familyUser))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	natsURL := c.NATSURL(ctx, 0)

	for _, tc := range []struct {
		name string
		// user, inbox: the rogue's credential and the inbox prefix its
		// permissions give it.
		user, inbox string
		// method is the method whose jobs the rogue takes: echo, which
		// the real workers serve too, or a method of its family that
		// only it serves.
		method string
		// calls: attack synchronous calls, whose answers go to
		// "toolbus.reply.<ingress>.<token>", instead of jobs.
		calls bool
	}{
		{name: "worker credential", user: "worker", inbox: bus.WorkerInboxPrefix, method: "echo"},
		{name: "family credential", user: familyUser, inbox: "_INBOX_worker_math", method: "math.echo"},
		{name: "worker credential, synchronous calls", user: "worker", inbox: bus.WorkerInboxPrefix, method: "echo", calls: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRogue(t, natsURL, tc.user, c.Credentials.Password(tc.user), tc.inbox)
			what, attack := "job", forgeJobReplies
			if tc.calls {
				what, attack = "synchronous", forgeCallReplies
			}
			res := attack(t, c, r, tc.method)
			t.Logf("forgery of %s answers with the %s credential: %d calls observed, %d guesses published in %v (%d refused by the server), %d forged answers accepted of %d victim calls\n%s",
				what, tc.user, res.observed, res.published, res.publishing.Round(time.Millisecond), r.refusals(), res.accepted, victimJobs, res.inference)
			if res.accepted > 0 {
				t.Errorf("%d forged answers were taken as %s calls' results, want none: the reply tokens can be inferred from those a worker is given", res.accepted, what)
			}
		})
	}
}

// forgery is what one attack did.
type forgery struct {
	observed   int           // job calls the rogue received
	published  int           // forged answers it published
	publishing time.Duration // how long publishing them took
	accepted   int           // jobs whose result is the forged one
	inference  string        // what the rogue inferred, group by group
}

// forgeJobReplies runs the attack with rogue r taking jobs of method, and
// checks the victim's jobs. It fails the test if the attack could not be
// set up: no job call reached the rogue, or the victim's jobs did not run.
func forgeJobReplies(t *testing.T, c *Cluster, r *rogue, method string) forgery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	replies := subjects.JobReplies() + "."

	// Observe: submit rounds of the method's jobs until the rogue has
	// seen at least two job calls of each runner (each ingress runs
	// jobs), or the rounds run out. The rogue announces the method, as a
	// worker does: an ingress takes no job of a method nobody announced.
	sub := r.serve(t, subjects, method, replies)
	var probes []string
	const rounds, perRound = 8, 8
	for round := 0; round < rounds && !r.enough(replies, Ingresses, 2); round++ {
		var ids []string
		for i := range perRound {
			ids = append(ids, submitAnnounced(t, ctx, c.URL(round%Ingresses), method, map[string]any{"probe": round*perRound + i}))
		}
		c.WaitJobs(ids, time.Minute)
		probes = append(probes, ids...)
	}
	// The rogue takes no more calls: the victim's jobs reach only the
	// real workers.
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	seen := r.seen()
	if len(seen) == 0 {
		t.Fatalf("the rogue received none of %d %s jobs, want some: the attack could not start", len(probes), method)
	}

	// The victim's long jobs, on the real workers, each waited for until
	// its worker has reported progress: its reply subject is then open.
	victims := make([]string, victimJobs)
	for i := range victims {
		if victims[i], err = SubmitJob(ctx, c.URL(i%Ingresses), "sleep", map[string]any{"ms": victimSleep.Milliseconds()}); err != nil {
			t.Fatalf("submit the victim's sleep job: %v", err)
		}
	}
	waitProgress(t, ctx, c, victims)

	published, publishing, inference := r.publishGuesses(t, replies, seen)

	// Every job of the test, once ended: the victim's must carry their
	// real worker's result; none may carry the forged one.
	all := append(slices.Clone(victims), probes...)
	recs := c.WaitJobs(all, victimSleep+time.Minute)
	accepted := 0
	for _, id := range all {
		rec := recs[id]
		if rec != nil && isForged(rec.Result) {
			accepted++
			t.Errorf("job %s (%s) = %s %s, want its real worker's result", id, rec.Method, rec.State, rec.Result)
		}
	}
	want := fmt.Sprintf(`{"slept_ms":%d}`, victimSleep.Milliseconds())
	for _, id := range victims {
		switch rec := recs[id]; {
		case rec == nil || !rec.Final():
			t.Errorf("victim job %s = %+v, want it ended within %v", id, rec, victimSleep+time.Minute)
		case rec.State != "succeeded" || string(rec.Result) != want:
			t.Errorf("victim job %s = %s %s, want succeeded %s", id, rec.State, rec.Result, want)
		}
	}
	return forgery{observed: len(seen), published: published, publishing: publishing, accepted: accepted, inference: inference}
}

// forgeCallReplies runs the attack on synchronous calls: rogue r takes
// calls of method through every ingress until it has seen the reply
// subjects of each, leaves the queue group, and while another caller's
// long sleep calls run on the real workers publishes the answers it
// infers. Each victim call must answer its real worker's result.
func forgeCallReplies(t *testing.T, c *Cluster, r *rogue, method string) forgery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	subjects, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	replies := subjects.Replies() + "."

	sub := r.serve(t, subjects, method, replies)
	observed := 0
	const rounds, perRound = 8, 8
	for round := 0; round < rounds && !r.enough(replies, Ingresses, 2); round++ {
		for i := range perRound {
			n := round*perRound + i
			if _, err := callRPC(ctx, c.URL(n%Ingresses), method, map[string]any{"probe": n}); err != nil {
				t.Fatalf("probe call of %s: %v", method, err)
			}
			observed++
		}
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	seen := r.seen()
	if len(seen) == 0 {
		t.Fatalf("the rogue received none of %d %s calls, want some: the attack could not start", observed, method)
	}

	// The victim's long calls, on the real workers, each waited for
	// until the workers say they run it: its reply subject is then open.
	type answer struct {
		result json.RawMessage
		err    error
	}
	answers := make(chan answer, victimJobs)
	for i := range victimJobs {
		go func() {
			res, err := callRPC(ctx, c.URL(i%Ingresses), "sleep", map[string]any{"ms": victimSleep.Milliseconds()})
			answers <- answer{res, err}
		}()
	}
	c.waitRunning(t, ctx, "sleep", victimJobs)

	published, publishing, inference := r.publishGuesses(t, replies, seen)

	want := fmt.Sprintf(`{"slept_ms":%d}`, victimSleep.Milliseconds())
	accepted := 0
	for range victimJobs {
		a := <-answers
		switch {
		case a.err != nil:
			t.Errorf("victim call of sleep = %v, want its real worker's result %s", a.err, want)
		case isForged(a.result):
			accepted++
			t.Errorf("victim call of sleep = %s, want its real worker's result %s", a.result, want)
		case string(a.result) != want:
			t.Errorf("victim call of sleep = %s, want %s", a.result, want)
		}
	}
	return forgery{observed: len(seen), published: published, publishing: publishing, accepted: accepted, inference: inference}
}

// publishGuesses infers, from the reply subjects under replies that the
// rogue saw, at most forgeBudget subjects of calls made after them, and
// publishes the forged answer on each. It returns how many it published,
// how long that took, and what it inferred.
func (r *rogue) publishGuesses(t *testing.T, replies string, seen []string) (int, time.Duration, string) {
	t.Helper()
	guesses, inference := inferReplySubjects(replies, seen, forgeBudget)
	if len(guesses) == 0 {
		t.Fatalf("the rogue inferred no reply subject from %d it saw, want some guesses", len(seen))
	}
	forged, err := schema.MarshalReply(schema.ReplyResult([]byte(forgedResult)))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for _, g := range guesses {
		if err := r.nc.Publish(g, forged); err != nil {
			t.Fatalf("publish a guess: %v", err)
		}
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatalf("flush the guesses: %v", err)
	}
	return len(guesses), time.Since(began), inference
}

// callRPC makes one synchronous call through the ingress at base and
// returns its result, or its error as an [rpcError].
func callRPC(ctx context.Context, base, method string, params any) (json.RawMessage, error) {
	var out json.RawMessage
	err := rpc(ctx, base, method, params, &out)
	return out, err
}

// waitRunning waits, for up to a minute, until the workers together say
// they run n calls of method (the gauge toolbus_worker_in_flight).
func (c *Cluster) waitRunning(t *testing.T, ctx context.Context, method string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		running := 0.0
		for _, w := range c.Worker {
			running += sumBy(scrape(ctx, t, w, "9464/tcp")["toolbus_worker_in_flight"], "method", nil)[method]
		}
		if int(running) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workers run %v calls of %s after a minute, want %d: the attack needs them running", running, method, n)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d calls of %s to run: %v", n, method, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// submitAnnounced submits a job of method through the ingress at base,
// asking again for up to 30 seconds while the ingress answers that no
// worker announced the method: an announcement takes a moment to reach
// every ingress.
func submitAnnounced(t *testing.T, ctx context.Context, base, method string, params any) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		id, err := SubmitJob(ctx, base, method, params)
		var rpcErr *rpcError
		switch {
		case err == nil:
			return id
		case !errors.As(err, &rpcErr) || rpcErr.Code != schema.CodeMethodNotFound || time.Now().After(deadline):
			t.Fatalf("submit a %s job: %v", method, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("submit a %s job: %v", method, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitProgress waits until every job of ids has reported progress, for up
// to a minute. It asks a quarter of a second apart: each question is an
// HTTP call across containers.
func waitProgress(t *testing.T, ctx context.Context, c *Cluster, ids []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for n := 0; ; n++ {
		running := 0
		var last *Job
		for _, id := range ids {
			rec, err := GetJob(ctx, c.URL(n%Ingresses), id)
			if err == nil && rec.State == "running" && len(rec.Progress) > 0 && string(rec.Progress) != "null" {
				running++
			}
			last = rec
		}
		if running == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the victim's %d jobs reported progress within a minute (the last read: %+v), want all: the attack needs them running", running, len(ids), last)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for the victim's jobs to run: %v", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// isForged reports whether a job's result is the forged one.
func isForged(result json.RawMessage) bool {
	var r struct {
		Forged bool `json:"forged"`
	}
	return json.Unmarshal(result, &r) == nil && r.Forged
}

// rogue is a process holding a worker's credential that takes calls in
// the workers' queue group, answers them, and keeps the reply subjects of
// the job calls among them.
type rogue struct {
	nc *nats.Conn

	mu      sync.Mutex
	replies []string // job calls' reply subjects, in the order received
	refused int      // permission violations the server reported
}

// newRogue connects as user; the connection is closed when the test ends.
func newRogue(t *testing.T, url, user, password, inbox string) *rogue {
	t.Helper()
	r := &rogue{}
	nc, err := bus.Connect(url, bus.WithName("rogue-"+user), bus.WithUserPassword(user, password), bus.WithInboxPrefix(inbox),
		bus.WithNATSOptions(nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				r.mu.Lock()
				r.refused++
				r.mu.Unlock()
			}
		})))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	r.nc = nc
	return r
}

// serve takes the calls of method in the workers' queue group, answers
// each honestly, as echo does, with its params, and announces the method
// as a worker does. It keeps the reply subjects under replies (those of
// job calls).
func (r *rogue) serve(t *testing.T, s bus.Subjects, method, replies string) *nats.Subscription {
	t.Helper()
	subject, err := s.Call(method)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := r.nc.QueueSubscribe(subject, "toolbus-workers", func(m *nats.Msg) {
		env, _, err := bus.ReadCall(m)
		if err != nil {
			return
		}
		if strings.HasPrefix(m.Reply, replies) {
			r.mu.Lock()
			r.replies = append(r.replies, m.Reply)
			r.mu.Unlock()
		}
		result := env.Params
		if len(result) == 0 {
			result = []byte("null")
		}
		_ = bus.Reply(m, schema.ReplyResult(result))
	})
	if err != nil {
		t.Fatalf("take %s calls: %v", subject, err)
	}
	ann := schema.Announcement{V: schema.AnnouncementVersion, Worker: r.nc.Opts.Name, IntervalMS: time.Minute.Milliseconds(),
		Tools: []schema.Descriptor{{Name: method, Description: "Answers its params."}}}
	if err := bus.PublishAnnouncement(r.nc, s, ann); err != nil {
		t.Fatalf("announce %s: %v", method, err)
	}
	if err := r.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// seen returns the job calls' reply subjects received so far.
func (r *rogue) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.replies)
}

// refusals returns how many of the rogue's actions the server refused.
func (r *rogue) refusals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// enough reports whether the rogue has seen at least per job calls of
// each of runners runners (a runner is the subject token after replies).
func (r *rogue) enough(replies string, runners, per int) bool {
	by := map[string]int{}
	for _, s := range r.seen() {
		runner, _, _ := strings.Cut(strings.TrimPrefix(s, replies), ".")
		by[runner]++
	}
	n := 0
	for _, k := range by {
		if k >= per {
			n++
		}
	}
	return n >= runners
}

// inferReplySubjects guesses the reply subjects of job calls made after
// those seen, at most budget of them, as the attack on NUID tokens does.
// A subject is replies, a runner token, a dot and a call token; the last
// ten characters of the call token are read as a base62 sequence (any
// other character as 0) and the rest of the subject as its stem. The
// sequences seen under one stem differ by multiples of the increment of
// the process that made them: their greatest common divisor holds it, and
// its divisors in [nuidMinInc, nuidMaxInc) are the increments to try. A stem seen once, or whose divisor fits no
// increment, is tried with every increment of that range. The budget is
// shared by the stems, and each stem's part by its increments, stepping
// forward from the highest sequence seen. It also returns what it inferred,
// one line per stem.
func inferReplySubjects(replies string, seen []string, budget int) ([]string, string) {
	type group struct {
		seqs  []int64
		nuids int // call tokens of 22 base62 characters, as a NUID is
	}
	groups := map[string]*group{}
	var stems []string
	for _, s := range seen {
		rest := strings.TrimPrefix(s, replies)
		_, token, ok := strings.Cut(rest, ".")
		if !ok || len(token) < nuidSeqLen {
			continue
		}
		stem := s[:len(s)-nuidSeqLen]
		seq, exact := decodeBase62(s[len(s)-nuidSeqLen:])
		g := groups[stem]
		if g == nil {
			g = &group{}
			groups[stem] = g
			stems = append(stems, stem)
		}
		g.seqs = append(g.seqs, seq)
		if exact && len(token) == nuidLen && strings.Trim(token, base62) == "" {
			g.nuids++
		}
	}
	if len(stems) == 0 {
		return nil, "no reply subject of the expected shape"
	}
	share := max(budget/len(stems), 1)
	var out []string
	var report strings.Builder
	for _, stem := range stems {
		g := groups[stem]
		slices.Sort(g.seqs)
		g.seqs = slices.Compact(g.seqs)
		var gcd int64
		for i := 1; i < len(g.seqs); i++ {
			gcd = greatestCommonDivisor(gcd, g.seqs[i]-g.seqs[i-1])
		}
		incs := increments(gcd)
		how := fmt.Sprintf("common divisor %d gives increments %v", gcd, incs)
		if len(incs) == 0 {
			incs = make([]int64, 0, nuidMaxInc-nuidMinInc)
			for d := int64(nuidMinInc); d < nuidMaxInc; d++ {
				incs = append(incs, d)
			}
			how = fmt.Sprintf("common divisor %d fits no increment: every increment of [%d,%d) tried", gcd, nuidMinInc, nuidMaxInc)
			if len(g.seqs) < 2 {
				how = fmt.Sprintf("one sequence only: every increment of [%d,%d) tried", nuidMinInc, nuidMaxInc)
			}
		}
		last := g.seqs[len(g.seqs)-1]
		made := 0
		tried := map[int64]bool{}
		for step := int64(1); made < share && step <= int64(share); step++ {
			for _, d := range incs {
				next := last + step*d
				if made == share || next >= nuidMaxSeq || tried[next] {
					continue
				}
				tried[next] = true
				out = append(out, stem+encodeBase62(next))
				made++
			}
		}
		fmt.Fprintf(&report, "  %s…: %d calls seen (%d of them 22 base62 characters, as a NUID is), %s; %d guesses\n",
			strings.TrimPrefix(stem, replies), len(g.seqs), g.nuids, how, made)
	}
	return out, report.String()
}

// increments returns the divisors of gcd in [nuidMinInc, nuidMaxInc),
// largest first: the more calls seen, the likelier gcd is the increment
// itself. Each is stepped by on its own, though a divisor's steps cover
// its multiples' too: a small divisor would need as many more steps.
func increments(gcd int64) []int64 {
	var out []int64
	for d := int64(nuidMaxInc - 1); d >= nuidMinInc && gcd > 0; d-- {
		if gcd%d == 0 {
			out = append(out, d)
		}
	}
	return out
}

func greatestCommonDivisor(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// decodeBase62 reads s in base62, any other character as 0; exact says
// whether every character was base62.
func decodeBase62(s string) (v int64, exact bool) {
	exact = true
	for i := 0; i < len(s); i++ {
		d := strings.IndexByte(base62, s[i])
		if d < 0 {
			d, exact = 0, false
		}
		v = v*62 + int64(d)
	}
	return v, exact
}

// encodeBase62 writes v as nuidSeqLen base62 digits.
func encodeBase62(v int64) string {
	var b [nuidSeqLen]byte
	for i := nuidSeqLen - 1; i >= 0; i-- {
		b[i] = base62[v%62]
		v /= 62
	}
	return string(b[:])
}

// familyConf returns deploy/nats/cluster-secure.conf with the per-family
// worker user of deploy/README.md added: its permission block before the
// accounts, and its user beside the user worker.
func familyConf(t *testing.T) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "deploy")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)\n(WORKER_MATH_PERMISSIONS = \\{.*?\n\\})\n# in accounts.TOOLBUS.users:\n(\\{ user: " + familyUser + "[^\n]*\\})\n").FindSubmatch(readme)
	if block == nil {
		t.Fatalf("deploy/README.md has no WORKER_MATH_PERMISSIONS block followed by the user %s", familyUser)
	}
	conf, err := os.ReadFile(filepath.Join(dir, "nats", "cluster-secure.conf"))
	if err != nil {
		t.Fatal(err)
	}
	workerUser := regexp.MustCompile(`(?m)^( *)(\{ user: worker, [^\n]*\})$`)
	if !workerUser.Match(conf) || !strings.Contains(string(conf), "\naccounts {") {
		t.Fatal("deploy/nats/cluster-secure.conf has no accounts block with a line for the user worker")
	}
	out := strings.Replace(string(conf), "\naccounts {", "\n"+string(block[1])+"\n\naccounts {", 1)
	out = workerUser.ReplaceAllString(out, "$1$2\n$1"+strings.ReplaceAll(string(block[2]), "$", "$$"))
	return []byte(out)
}

// TestInferReplySubjects checks the attack's inference on its own: from a
// few NUIDs of a process, drawn with others between, it guesses the NUID
// a later call of that process gets; from random tokens it still makes no
// more guesses than its budget.
func TestInferReplySubjects(t *testing.T) {
	const replies = "toolbus.jobs.reply."
	// draws takes n NUIDs of gen and returns the last.
	draws := func(gen *nuid.NUID, n int) string {
		var last string
		for range n {
			last = gen.Next()
		}
		return last
	}
	random := func() string {
		var b [16]byte
		rand.Read(b[:])
		return base64.RawURLEncoding.EncodeToString(b[:])
	}
	for _, tc := range []struct {
		name string
		// seen and next: the reply subjects the rogue saw, and one it
		// must guess (none for random tokens).
		setup func() (seen []string, next []string)
	}{
		{name: "consecutive calls", setup: func() ([]string, []string) {
			gen := nuid.New()
			runner := gen.Next()
			var seen []string
			for range 3 {
				seen = append(seen, replies+runner+"."+draws(gen, 1))
			}
			return seen, []string{replies + runner + "." + draws(gen, 1)}
		}},
		{name: "other draws between", setup: func() ([]string, []string) {
			gen := nuid.New()
			runner := gen.Next()
			var seen []string
			for _, gap := range []int{2, 4, 6, 3} {
				seen = append(seen, replies+runner+"."+draws(gen, gap))
			}
			return seen, []string{replies + runner + "." + draws(gen, 700)}
		}},
		{name: "two runners", setup: func() ([]string, []string) {
			var seen, next []string
			for range 2 {
				gen := nuid.New()
				runner := gen.Next()
				for _, gap := range []int{5, 2, 9} {
					seen = append(seen, replies+runner+"."+draws(gen, gap))
				}
				next = append(next, replies+runner+"."+draws(gen, 300))
			}
			return seen, next
		}},
		{name: "random tokens", setup: func() ([]string, []string) {
			runner := random()
			var seen []string
			for range 6 {
				seen = append(seen, replies+runner+"."+random())
			}
			return seen, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen, next := tc.setup()
			guesses, inference := inferReplySubjects(replies, seen, forgeBudget)
			if len(guesses) == 0 || len(guesses) > forgeBudget {
				t.Fatalf("inferReplySubjects made %d guesses, want 1 to %d", len(guesses), forgeBudget)
			}
			for _, n := range next {
				if !slices.Contains(guesses, n) {
					t.Errorf("inferReplySubjects(%q) missed %s, want it among its %d guesses; it inferred\n%s", seen, n, len(guesses), inference)
				}
			}
		})
	}
}
