//go:build browser

package toolbustest_test

// The dashboard tests drive the page at /ui/ in headless Chromium, as an
// operator's browser would:
//
//	go test -tags browser -count=1 -run Dashboard ./toolbustest/
//
// They need Debian's chromium on PATH and fail without it rather than
// skip: CI installs it, and a browser test that skips quietly tests
// nothing. With TOOLBUS_ARTIFACTS set they save screenshots there.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/ingress/dashboard"
	"github.com/toolbus/toolbus/node"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// dashboardTimeout bounds the browser work of one test; dashboardWait
// bounds one wait for the page to show something. The page polls every
// two seconds, so either is generous.
const (
	dashboardTimeout = 60 * time.Second
	dashboardWait    = 20 * time.Second
)

// dashboardPage is what the page shows, read from its DOM: the rows of
// each table as maps from a cell's data-col to its text.
type dashboardPage struct {
	Updated   string `json:"updated"`
	Banner    string `json:"banner"` // empty while hidden
	IngressID string `json:"ingress_id"`
	// IngressFull is the header's ingress id in full, its title.
	IngressFull string `json:"ingress_full"`
	AskingKey   bool   `json:"asking_key"`
	KeyNote     string `json:"key_note"`
	Viewer      string `json:"viewer"`
	// Methods, Workers, Errors and Jobs are the rows of each table; a
	// cell's title is under its data-col with "title" after it
	// ("idtitle").
	Methods   []map[string]string `json:"methods"`
	Workers   []map[string]string `json:"workers"`
	Replicas  []map[string]string `json:"replicas"`
	Errors    []map[string]string `json:"errors"`
	Jobs      []map[string]string `json:"jobs"`
	JobCounts map[string]string   `json:"job_counts"`
	JobsOff   bool                `json:"jobs_off"`
	// JobsNow is what the jobs-queued chart says of now.
	JobsNow string `json:"jobs_now"`
	// Callers are the rows of the Callers panel; FairWindow its line of
	// the window, by the id of each figure ("used", "seats", ...), nil
	// while hidden; FairOff whether it says fairness is off.
	Callers    []map[string]string `json:"callers"`
	FairWindow map[string]string   `json:"fair_window"`
	FairOff    bool                `json:"fair_off"`
	ShareShown bool                `json:"share_shown"`
	// Cut lists what is cut off: text wider than its cell, a panel
	// wider or taller than its box, each as "where: text".
	Cut []string `json:"cut"`
	// Charts counts, by the data-col of their cell (or the id of their
	// box), the chart lines with at least two points.
	Charts map[string]int `json:"charts"`
	// EmptyTexts are what the empty sections say, by section id.
	EmptyTexts map[string]string `json:"empty_texts"`
	// Overflow is how far the page reaches past the window, in pixels
	// (down, across): 0, 0 when it fits without scrolling.
	Overflow [2]int `json:"overflow"`
	NATS     string `json:"nats"`
	// Marked reports that window.dashboardTestMark is still set, that is
	// the page has not been reloaded since the test set it.
	Marked bool `json:"marked"`
	// ConflictMarks holds the title of each conflict mark of the methods
	// table, by the title of its row's method cell.
	ConflictMarks map[string]string `json:"conflict_marks"`
}

const readDashboard = `(() => {
	const rows = (sel) => Array.from(document.querySelectorAll(sel + ' tbody tr'), (tr) =>
		Object.fromEntries(Array.from(tr.cells, (td) => [[td.dataset.col, td.textContent], [td.dataset.col + 'title', td.title]]).flat()));
	const shown = (id) => { const el = document.getElementById(id); return el !== null && !el.hidden; };
	const text = (id) => { const el = document.getElementById(id); return el === null ? '' : el.textContent; };
	return {
		updated: document.body.dataset.updated || '',
		banner: shown('banner') ? text('banner') : '',
		ingress_id: text('ingress-id'),
		ingress_full: document.getElementById('ingress-id').title,
		asking_key: shown('auth'),
		key_note: text('auth-note'),
		viewer: shown('viewer-item') ? text('viewer') : '',
		methods: rows('#methods'),
		workers: rows('#workers'),
		replicas: rows('#replicas'),
		errors: rows('#errors'),
		jobs: rows('#jobs'),
		jobs_now: shown('jobs-chart-box') ? text('jobs-now') : '',
		callers: rows('#callers'),
		fair_window: shown('fair-window') ? Object.fromEntries(['used', 'seats', 'waiting', 'queued', 'hold'].map((k) => [k, text('fair-' + k)])) : null,
		fair_off: shown('fair-off'),
		share_shown: (() => { const th = document.querySelector('#callers th.share'); return th !== null && th.getClientRects().length > 0; })(),
		cut: (() => {
			const out = [];
			const visible = (el) => el.getClientRects().length > 0;
			for (const el of document.querySelectorAll('td, th, dd, dt, .chart-label, h2')) {
				if (visible(el) && el.scrollWidth > el.clientWidth + 1) {
					const where = (el.closest('section, header') || {}).id + '/' + (el.dataset.col || el.id || el.tagName);
					out.push(where + ': ' + el.textContent.trim().slice(0, 60));
				}
			}
			for (const el of document.querySelectorAll('main > section')) {
				if (!visible(el)) continue;
				if (el.scrollWidth > el.clientWidth + 1) out.push(el.id + ': ' + (el.scrollWidth - el.clientWidth) + ' px too wide');
				if (el.scrollHeight > el.clientHeight + 1) out.push(el.id + ': ' + (el.scrollHeight - el.clientHeight) + ' px too tall');
			}
			return out;
		})(),
		job_counts: Object.fromEntries(Array.from(document.querySelectorAll('#job-counts li'),
			(li) => [li.dataset.state, li.querySelector('strong').textContent])),
		jobs_off: shown('jobs-off'),
		marked: window.dashboardTestMark === true,
		conflict_marks: Object.fromEntries(Array.from(document.querySelectorAll('#methods td[data-col=method] .badge.conflict'),
			(b) => [b.closest('td').title, b.title])),
		charts: (() => {
			const out = {};
			for (const line of document.querySelectorAll('svg.chart polyline')) {
				if ((line.getAttribute('points') || '').trim().split(/\s+/).length < 2) continue;
				const box = line.closest('td[data-col], .chart-box');
				const key = box.dataset.col || box.id;
				out[key] = (out[key] || 0) + 1;
			}
			return out;
		})(),
		empty_texts: Object.fromEntries(Array.from(document.querySelectorAll('section.is-empty .empty'),
			(p) => [p.closest('section').id, p.textContent])),
		overflow: [document.documentElement.scrollHeight - window.innerHeight,
			document.documentElement.scrollWidth - window.innerWidth],
		nats: shown('nats-info') ? text('nats-server') + ' ' + text('js-memory') : '',
	};
})()`

// dashboardTab is a headless Chromium tab for one test.
type dashboardTab struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // uncaught exceptions and console errors of the page
}

// openDashboard starts Chromium, stopped when the test ends, runs the
// actions before, then opens url in it and waits for the page to load.
func openDashboard(t *testing.T, url string, before ...chromedp.Action[chromedp.Void]) *dashboardTab {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("the dashboard test needs Chromium and found none on PATH (%v): install it with apt-get install chromium", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox, // tests may run as root in a container
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 900),
	)
	ctx, cancelTimeout := context.WithTimeout(t.Context(), dashboardTimeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		cancelTimeout()
	})
	d := &dashboardTab{t: t, ctx: tabCtx}
	// Listen starts the browser, so that the page's first messages are
	// heard too.
	err = chromedp.Listen(tabCtx, func(ev any) {
		var problem string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			problem = "uncaught exception: " + e.ExceptionDetails.Text
			if ex := e.ExceptionDetails.Exception; ex != nil {
				problem += " " + ex.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			problem = "console error:"
			for _, a := range e.Args {
				problem += " " + string(a.Value) + a.Description
			}
		default:
			return
		}
		d.mu.Lock()
		d.problems = append(d.problems, problem)
		d.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("start chromium %s: %v", chromium, err)
	}
	if err := chromedp.Do(tabCtx, append(before, chromedp.Navigate(url))...); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return d
}

// read reads what the page shows now.
func (d *dashboardTab) read() (dashboardPage, error) {
	return chromedp.Run(d.ctx, chromedp.Evaluate[dashboardPage](readDashboard))
}

// waitFor reads the page until missing finds nothing missing, and returns
// what it showed then. When that does not happen within [dashboardWait],
// it saves a screenshot and fails the test with what was missing and what
// the page showed.
func (d *dashboardTab) waitFor(what string, missing func(p dashboardPage) string) dashboardPage {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, dashboardWait)
	defer cancel()
	var (
		p    dashboardPage
		last string
	)
	for {
		var err error
		if p, err = d.read(); err != nil {
			last = fmt.Sprintf("read the page: %v", err)
		} else if last = missing(p); last == "" {
			d.checkProblems()
			return p
		}
		select {
		case <-ctx.Done():
			d.checkProblems()
			d.screenshot("dashboard-failed.png")
			shown, _ := json.MarshalIndent(p, "", "  ")
			d.t.Fatalf("dashboard: waiting for %s: %s\nthe page showed %s", what, last, shown)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkProblems fails the test on an exception or console error the page
// reported.
func (d *dashboardTab) checkProblems() {
	d.t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.problems) == 0 {
		return
	}
	// A broken render repeats at every poll: list each problem once.
	seen := map[string]bool{}
	var list []string
	for _, p := range d.problems {
		if !seen[p] {
			seen[p] = true
			list = append(list, p)
		}
	}
	d.t.Errorf("the page reported %d problems, %d distinct:\n%s", len(d.problems), len(list), strings.Join(list, "\n"))
	d.problems = nil
}

// do runs browser actions, at most for [dashboardWait], failing the test
// on an error.
func (d *dashboardTab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(d.ctx, dashboardWait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		d.checkProblems()
		d.screenshot("dashboard-failed.png")
		d.t.Fatalf("dashboard: %s: %v", what, err)
	}
}

// screenshot saves a full-page screenshot as name in $TOOLBUS_ARTIFACTS,
// or in a temporary directory whose path it logs.
func (d *dashboardTab) screenshot(name string) {
	d.t.Helper()
	png, err := chromedp.Run(d.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		d.t.Errorf("dashboard screenshot: %v", err)
		return
	}
	dir := os.Getenv("TOOLBUS_ARTIFACTS")
	if dir == "" {
		dir = d.t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		d.t.Errorf("dashboard screenshot: %v", err)
		return
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err == nil {
		err = os.WriteFile(path, png, 0o644)
	}
	if err != nil {
		d.t.Errorf("dashboard screenshot: %v", err)
		return
	}
	d.t.Logf("dashboard screenshot: %s", path)
}

// blockState makes the browser fail the page's requests of its data at
// /ui/api/state while block holds, so that what the page shows comes
// from the page the server drew.
func blockState(block bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		var p network.SetBlockedURLsParams
		if block {
			p.URLPatterns = []*network.BlockPattern{
				{URLPattern: "*://*:*/ui/api/state", Block: true},
				{URLPattern: "*://*:*/ui/api/state?*", Block: true},
			}
		}
		_, err := cdp.Call(ctx, t, network.SetBlockedURLs, p)
		return err
	})
}

// firstPaint reports when the page first painted content and when its
// script first showed a state, in milliseconds since navigation (-1 for
// what did not happen), and how many requests of the data the page has
// made.
const firstPaint = `(() => {
	const at = (name) => { const e = performance.getEntriesByName(name); return e.length ? e[0].startTime : -1; };
	return [at('first-contentful-paint'), at('toolbus-rendered'),
		performance.getEntriesByType('resource').filter((e) => e.name.includes('/ui/api/state')).length];
})()`

// row returns the first row whose col reads value, or nil.
func row(rows []map[string]string, col, value string) map[string]string {
	for _, r := range rows {
		if r[col] == value {
			return r
		}
	}
	return nil
}

// number reads a count as the page writes it, such as "1,234".
func number(s string) int {
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		return -1
	}
	return n
}

// waitForTool waits until the registry knows a worker of method, so that
// the first calls are not refused as unknown.
func waitForTool(t *testing.T, c *toolbustest.Cluster, method string) {
	t.Helper()
	toolbustest.Eventually(t, func() bool {
		tool, ok := c.Registry.Lookup(method)
		return ok && tool.Workers > 0
	}, "a worker of "+method+" is announced")
}

// rowBy returns the first row whose title of col reads value, or nil: a
// shortened id's row by the whole id.
func rowBy(rows []map[string]string, col, value string) map[string]string {
	return row(rows, col+"title", value)
}

// checkShortID reports what is wrong with a cell that shows a shortened
// id: it must end the id, be shorter than a long one, and hold the
// whole id in its title.
func checkShortID(what string, r map[string]string, col string) string {
	shown, full := strings.TrimPrefix(r[col], "…"), r[col+"title"]
	switch {
	case full == "":
		return fmt.Sprintf("%s: no title with the whole id in %v", what, r)
	case !strings.HasSuffix(full, shown):
		return fmt.Sprintf("%s shows %q, want the end of %q", what, r[col], full)
	case len(full) > 12 && len(shown) >= len(full):
		return fmt.Sprintf("%s shows %q whole, want its distinguishing part", what, full)
	}
	return ""
}

// jobsAgree reports whether the jobs-queued chart's figure of now is the
// jobs section's count of queued jobs.
func jobsAgree(p dashboardPage) string {
	if want := p.JobCounts["queued"] + " now"; p.JobsNow != want {
		return fmt.Sprintf("jobs queued chart says %q, the jobs section %q queued: want %q", p.JobsNow, p.JobCounts["queued"], want)
	}
	return ""
}

// dashboardState reads the data route at base as the page does, with
// the request headers given in pairs.
func dashboardState(t *testing.T, base string, header ...string) (dashboard.State, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/ui/api/state", nil)
	if err != nil {
		return dashboard.State{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return dashboard.State{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return dashboard.State{}, fmt.Errorf("GET /ui/api/state: HTTP %d", resp.StatusCode)
	}
	var st dashboard.State
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// shows reports what is wrong with a figure the page shows as text,
// given as want by the data route: the page rounds milliseconds to two
// digits below 1, one below 100 and none above, and shares, in percent,
// to one.
func shows(what, text string, want float64) string {
	got, err := strconv.ParseFloat(strings.ReplaceAll(text, ",", ""), 64)
	tolerance := 0.51
	switch {
	case want < 1:
		tolerance = 0.0051
	case want < 100:
		tolerance = 0.051
	}
	if err != nil || got < want-tolerance || got > want+tolerance {
		return fmt.Sprintf("%s shows %q, want %.4g as the data route says", what, text, want)
	}
	return ""
}

// callersAgree reports what the page's Callers panel shows otherwise
// than st, the data route's state read about when the page was: the
// same callers in the same order, each with its queue, calls let in, its
// share for an operator, its wait and its refusals, and an operator's
// window. The calls per second, whose span moves on, are not compared.
func callersAgree(p dashboardPage, st dashboard.State) string {
	f := st.Fair
	if f == nil {
		return "the data route has no Callers panel"
	}
	if len(p.Callers) != len(f.Callers) {
		return fmt.Sprintf("the page shows callers %v, the data route %+v", p.Callers, f.Callers)
	}
	if (f.Window != nil) != (p.FairWindow != nil) || (f.Window != nil) != p.ShareShown {
		return fmt.Sprintf("the page shows the window %v and the share column %v; the data route's window is %+v", p.FairWindow, p.ShareShown, f.Window)
	}
	if w := f.Window; w != nil {
		for k, want := range map[string]int{"seats": w.Seats, "used": w.Used, "waiting": w.Waiting, "queued": w.Queued} {
			if number(p.FairWindow[k]) != want {
				return fmt.Sprintf("the window's %s shows %q, want %d as the data route says", k, p.FairWindow[k], want)
			}
		}
	}
	for i, c := range f.Callers {
		r := p.Callers[i]
		if r["caller"] != c.Caller || number(r["queued"]) != c.Queued {
			return fmt.Sprintf("row %d shows %v, want caller %s with %d queued", i, r, c.Caller, c.Queued)
		}
		n := c.Counts
		if n == nil {
			return fmt.Sprintf("the data route has no counts of %s, want them (the metrics are on)", c.Caller)
		}
		if want := fmt.Sprintf("%d calls let in", n.Admitted); !strings.HasPrefix(strings.ReplaceAll(r["ratetitle"], ",", ""), want) {
			return fmt.Sprintf("%s's calls/s says %q, want %q as the data route says", c.Caller, r["ratetitle"], want)
		}
		if number(r["refused"]) != int(n.Refused) || number(r["expired"]) != int(n.Expired) || number(r["canceled"]) != int(n.Canceled) {
			return fmt.Sprintf("%s shows %s full, %s expired, %s canceled; want %d, %d, %d", c.Caller, r["refused"], r["expired"], r["canceled"], n.Refused, n.Expired, n.Canceled)
		}
		if n.Share != nil {
			if msg := shows(c.Caller+"'s share", r["share"], *n.Share*100); msg != "" {
				return msg
			}
		}
		if n.Admitted > 0 {
			if msg := shows(c.Caller+"'s wait", r["wait"], n.WaitMeanMs); msg != "" {
				return msg
			}
			if msg := shows(c.Caller+"'s p99 wait", r["wait_p99"], n.WaitP99Ms); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// callersMatch waits until the page's Callers panel shows what the data
// route says, read with header, and check finds nothing wrong in it;
// it returns the page and the state.
func callersMatch(d *dashboardTab, base, what string, check func(p dashboardPage, st dashboard.State) string, header ...string) (dashboardPage, dashboard.State) {
	d.t.Helper()
	var st dashboard.State
	p := d.waitFor(what, func(p dashboardPage) string {
		var err error
		if st, err = dashboardState(d.t, base, header...); err != nil {
			return err.Error()
		}
		if msg := callersAgree(p, st); msg != "" {
			return msg
		}
		return check(p, st)
	})
	return p, st
}

func TestDashboard(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs(), toolbustest.WithMetrics(prometheus.NewRegistry()))
	waitForTool(t, c, "echo")

	rs := c.Batch(t, `[
		{"jsonrpc":"2.0","id":1,"method":"echo","params":["one"]},
		{"jsonrpc":"2.0","id":2,"method":"echo","params":["two"]},
		{"jsonrpc":"2.0","id":"dash-unknown","method":"no.such.tool"},
		{"jsonrpc":"2.0","id":"dash-fail","method":"fail","params":{"code":2001,"message":"insufficient funds"}}
	]`)
	if len(rs) != 4 {
		t.Fatalf("batch answered %d responses, want 4", len(rs))
	}
	for i, want := range []int{0, 0, schema.CodeMethodNotFound, 2001} {
		got := 0
		if rs[i].Error != nil {
			got = rs[i].Error.Code
		}
		if got != want {
			t.Fatalf("call %s answered code %d, want %d", rs[i].ID, got, want)
		}
	}
	r := c.Call(t, "rpc.jobs.submit", `{"method":"sleep","params":{"ms":400}}`)
	var job struct {
		ID string `json:"id"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &job) != nil || job.ID == "" {
		t.Fatalf("rpc.jobs.submit = %s %v, want a job id", r.Result, r.Error)
	}
	// The gateway samples the queue every few seconds: one sample said 5
	// a moment ago. The chart's figure of now must still be the count
	// the jobs section shows.
	c.Ingress.RecordJobsQueued(5)

	// The first paint: the page's requests of its data fail, so what it
	// shows at load is what the server drew into it.
	d := openDashboard(t, c.BaseURL+"/ui/", blockState(true))
	p, err := d.read()
	if err != nil {
		t.Fatalf("read the page at load: %v", err)
	}
	d.screenshot("dashboard-load.png")
	if p.Updated == "" || p.IngressID == "" || p.IngressID == "—" {
		t.Errorf("at load the page shows updated %q, ingress %q; want the state the server drew", p.Updated, p.IngressID)
	}
	if echo := row(p.Methods, "method", "echo"); echo == nil || number(echo["total"]) < 2 {
		t.Errorf("at load the methods row of echo = %v, want a total of at least 2", echo)
	}
	if e := row(p.Errors, "id", `"dash-fail"`); e == nil || e["code"] != "2001" {
		t.Errorf(`at load the errors row of "dash-fail" = %v, want code 2001`, e)
	}
	if len(p.Workers) == 0 || rowBy(p.Jobs, "id", job.ID) == nil || number(p.JobCounts["succeeded"])+number(p.JobCounts["running"])+number(p.JobCounts["queued"]) < 1 {
		t.Errorf("at load workers %v, jobs %v, counts %v; want the worker, job %s and its count", p.Workers, p.Jobs, p.JobCounts, job.ID)
	}
	if p.AskingKey {
		t.Errorf("at load the page asks for a key, want none without authentication")
	}
	if msg := jobsAgree(p); msg != "" {
		t.Errorf("at load: %s", msg)
	}
	// The Callers panel: the one anonymous caller of an ingress without
	// authentication, its calls let in, and the window.
	if anon := row(p.Callers, "caller", "_anonymous"); anon == nil || anon["rate"] == "—" || anon["wait"] == "—" || number(anon["queued"]) != 0 {
		t.Errorf("at load the callers = %v, want the row of _anonymous with its calls let in and none queued", p.Callers)
	}
	if p.FairWindow == nil || number(p.FairWindow["seats"]) != 128 {
		t.Errorf("at load the fairness window shows %v, want 128 seats", p.FairWindow)
	}
	if st, err := dashboardState(t, c.BaseURL); err != nil {
		t.Errorf("read the data route: %v", err)
	} else if msg := callersAgree(p, st); msg != "" {
		t.Errorf("at load: %s", msg)
	}
	paint, err := chromedp.Run(d.ctx, chromedp.Evaluate[[3]float64](firstPaint))
	if err != nil {
		t.Fatalf("read the paint timings: %v", err)
	}
	t.Logf("first contentful paint at %.1f ms, the drawn state shown at %.1f ms, %v requests of the data", paint[0], paint[1], paint[2])
	if paint[1] < 0 || paint[0] < paint[1] {
		t.Errorf("the page's first contentful paint came at %.1f ms and its state at %.1f ms: want the state in the first paint", paint[0], paint[1])
	}

	// From now on the page polls.
	d.do("let the page read its data", blockState(false))
	loaded := p.Updated
	p = d.waitFor("the calls, errors, worker and job", func(p dashboardPage) string {
		switch {
		case p.Banner != "":
			return fmt.Sprintf("banner %q is shown", p.Banner)
		case p.Updated == loaded:
			return "no poll since the page loaded"
		case p.IngressID == "" || p.IngressID == "—":
			return "no ingress id in the header"
		}
		echo := row(p.Methods, "method", "echo")
		if echo == nil || number(echo["total"]) < 2 {
			return fmt.Sprintf("methods row of echo = %v, want a total of at least 2", echo)
		}
		if e := row(p.Errors, "id", `"dash-fail"`); e == nil || e["code"] != "2001" || e["method"] != "fail" {
			return fmt.Sprintf(`errors row of id "dash-fail" = %v, want method fail and code 2001`, e)
		}
		if e := row(p.Errors, "id", `"dash-unknown"`); e == nil || e["code"] != strconv.Itoa(schema.CodeMethodNotFound) {
			return fmt.Sprintf(`errors row of id "dash-unknown" = %v, want code %d`, e, schema.CodeMethodNotFound)
		}
		if !slices.ContainsFunc(p.Workers, func(w map[string]string) bool { return strings.Contains(w["methods"], "echo") }) {
			return fmt.Sprintf("workers = %v, want one serving echo", p.Workers)
		}
		if p.JobsOff || rowBy(p.Jobs, "id", job.ID) == nil {
			return fmt.Sprintf("jobs = %v (off: %v), want job %s", p.Jobs, p.JobsOff, job.ID)
		}
		if len(p.JobCounts) == 0 {
			return "no job counts"
		}
		for _, col := range []string{"rate_trend", "p99_trend", "errors_trend", "inflight-chart"} {
			if p.Charts[col] == 0 {
				return fmt.Sprintf("no chart line with points in %s (charts %v)", col, p.Charts)
			}
		}
		if p.NATS == "" {
			return "no NATS section"
		}
		if w := p.Workers[0]; w["host"] == "" || w["host"] == "—" || w["pid"] == "—" || w["uptime"] == "—" {
			return fmt.Sprintf("worker %v, want its host, pid and uptime", w)
		}
		return ""
	})
	callersMatch(d, c.BaseURL, "the Callers panel as the data route says", func(p dashboardPage, st dashboard.State) string {
		if n := st.Fair.Callers[0].Counts; st.Fair.Callers[0].Caller != "_anonymous" || n.Admitted < 2 {
			return fmt.Sprintf("callers %+v, want _anonymous with its calls let in", st.Fair.Callers)
		}
		return ""
	})
	d.screenshot("dashboard-polled.png")
	if p.Overflow[0] > 0 || p.Overflow[1] > 0 {
		d.screenshot("dashboard-overflow.png")
		t.Errorf("the page reaches %d px below and %d px right of a 1400×900 window, want it to fit", p.Overflow[0], p.Overflow[1])
	}
	if len(p.Cut) > 0 {
		t.Errorf("at 1400×900 the page cuts off:\n%s", strings.Join(p.Cut, "\n"))
	}
	if msg := jobsAgree(p); msg != "" {
		t.Error(msg)
	}
	if e := row(p.Errors, "id", `"dash-fail"`); e["class"] != "tool" || e["count"] != "×1" {
		t.Errorf(`errors row of "dash-fail" = %v, want class tool and count ×1`, e)
	}
	// An unknown method has one name: the methods table's row and the
	// error's method are the same, the name sent in the error's title.
	unknown := row(p.Errors, "id", `"dash-unknown"`)
	if unknown["class"] != "caller" || row(p.Methods, "method", unknown["method"]) == nil || !strings.Contains(unknown["methodtitle"], "no.such.tool") {
		t.Errorf(`errors row of "dash-unknown" = %v, want class caller, a method named as a row of the methods table %v, and no.such.tool in its title`, unknown, p.Methods)
	}
	if echo := row(p.Methods, "method", "echo"); echo["infra_errors"] != "0" || echo["tool_errors"] != "0" {
		t.Errorf("methods row of echo = %v, want no errors", echo)
	}
	// The user's tools first; the ingress's rpc.* methods folded away
	// after them.
	fold := -1
	for i, m := range p.Methods {
		switch {
		case m["fold"] != "":
			fold = i
		case strings.HasPrefix(m["method"], "rpc."):
			t.Errorf("row %d of the methods table is %s, want the rpc.* methods folded away", i, m["method"])
		}
	}
	if fold != len(p.Methods)-1 || !strings.Contains(p.Methods[fold]["fold"], "rpc.") {
		t.Errorf("methods rows = %v, want a fold of the rpc.* methods last", p.Methods)
	}
	// Ids are shortened to what tells them apart, the whole in the title.
	if msg := checkShortID("the header's ingress id", map[string]string{"id": p.IngressID, "idtitle": p.IngressFull}, "id"); msg != "" {
		t.Error(msg)
	}
	if msg := checkShortID("the worker's id", p.Workers[0], "id"); msg != "" {
		t.Error(msg)
	}
	if msg := checkShortID("the job's id", rowBy(p.Jobs, "id", job.ID), "id"); msg != "" {
		t.Error(msg)
	}
	if p.IngressID == p.Workers[0]["id"] {
		t.Errorf("the ingress and the worker both show as %q", p.IngressID)
	}
	// A worker's methods have a row of their own under it, as wide as
	// the table.
	if len(p.Workers) != 2 || p.Workers[1]["methods"] == "" || p.Workers[0]["methods"] != "" {
		t.Errorf("workers rows = %v, want the worker's then its methods'", p.Workers)
	}

	d.do("unfold the rpc.* methods", chromedp.Click(chromedp.CSS(`#methods button.fold`)))
	d.waitFor("the rpc.* rows after the user's tools", func(p dashboardPage) string {
		last := p.Methods[len(p.Methods)-1]
		if !strings.HasPrefix(last["method"], "rpc.") || row(p.Methods, "method", "rpc.jobs.submit") == nil {
			return fmt.Sprintf("methods rows = %v, want rpc.jobs.submit shown last", p.Methods)
		}
		return ""
	})
	d.do("fold the rpc.* methods", chromedp.Click(chromedp.CSS(`#methods button.fold`)))
	before := number(row(p.Methods, "method", "echo")["total"])

	// The page must update itself: mark this load of it, make more calls
	// and wait for the count to grow under the same mark.
	d.do("mark the page", chromedp.Evaluate[chromedp.Void](`window.dashboardTestMark = true`))
	c.Batch(t, `[
		{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},
		{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]},
		{"jsonrpc":"2.0","id":3,"method":"echo","params":[3]}
	]`)
	d.waitFor("the new calls, without a reload", func(p dashboardPage) string {
		if !p.Marked {
			return "the page was reloaded"
		}
		if got := number(row(p.Methods, "method", "echo")["total"]); got < before+3 {
			return fmt.Sprintf("echo total = %d, want at least %d", got, before+3)
		}
		if row(p.Methods, "method", "rpc.jobs.submit") != nil {
			return "the rpc.* rows are shown after folding them"
		}
		return jobsAgree(p)
	})
	d.screenshot("dashboard.png")

	// Once the ingress is gone the page says so, keeps what it last
	// showed and keeps trying.
	shutdownCtx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	if err := c.Ingress.Shutdown(shutdownCtx); err != nil {
		t.Fatalf("shut the ingress down: %v", err)
	}
	d.waitFor("the disconnected banner", func(p dashboardPage) string {
		if !strings.HasPrefix(p.Banner, "disconnected: ") {
			return fmt.Sprintf("banner = %q, want it to start with %q", p.Banner, "disconnected: ")
		}
		if row(p.Methods, "method", "echo") == nil {
			return "the last methods table is gone"
		}
		return ""
	})
	d.screenshot("dashboard-disconnected.png")
	d.checkProblems()
}

// dashboardCookies returns the browser's cookies for the dashboard's page
// at base, those that scripts cannot read included.
func dashboardCookies(d *dashboardTab, base string) []*network.Cookie {
	d.t.Helper()
	got, err := chromedp.Run(d.ctx, chromedp.Action[network.GetCookiesResult](func(ctx context.Context, t *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/ui/"}})
	}))
	if err != nil {
		d.t.Fatalf("read the browser's cookies: %v", err)
	}
	return got.Cookies
}

// TestDashboardAsksForAPIKey: with authentication on, the page asks for
// a key and shows no data; the server checks the key and keeps it in a
// cookie scripts cannot read, sent to the dashboard alone and never
// with another site's requests, so that a reload shows the key's data at
// once; a caller's key shows its own data, an operator's everything.
func TestDashboardAsksForAPIKey(t *testing.T) {
	// One seat, and room for two calls in a caller's queue: a batch of
	// six calls that hold their seat has one let in at once, two queued
	// behind it and three refused.
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs(), toolbustest.WithMetrics(prometheus.NewRegistry()),
		toolbustest.WithAuth(auth.Config{
			Keys: []auth.APIKey{
				{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"echo", "sleep"}},
				{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Allow: []string{"echo", "fail"}, Operator: true},
			},
		}), toolbustest.WithGateway(func(c *node.GatewayConfig) {
			c.FairSeats, c.FairHoldMin, c.FairHoldMax, c.CallerMaxQueued = 1, time.Minute, time.Minute, 2
		}))
	waitForTool(t, c, "echo")
	waitForTool(t, c, "sleep")
	if r := c.Call(t, "echo", `["hi"]`, "Authorization", "Bearer alice-key"); r.Error != nil {
		t.Fatalf("echo = %v", r.Error)
	}
	var batch []string
	for i := range 6 {
		batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sleep","params":{"ms":100}}`, i))
	}
	refused := 0
	for _, r := range c.Batch(t, "["+strings.Join(batch, ",")+"]", "Authorization", "Bearer alice-key") {
		switch {
		case r.Error == nil:
		case r.Error.Code == schema.CodeOverloaded:
			refused++
		default:
			t.Fatalf("sleep %s = %v, want a result or -32002", r.ID, r.Error)
		}
	}
	if refused != 3 {
		t.Fatalf("%d calls of the batch were refused -32002, want 3: one seat and two calls' room in the queue", refused)
	}
	if r := c.Call(t, "fail", `{"code":2001,"message":"ops only"}`, "Authorization", "Bearer ops-key"); r.Error == nil || r.Error.Code != 2001 {
		t.Fatalf("fail = %v, want code 2001", r.Error)
	}

	// Without a key the page the server draws asks for one and holds no
	// data, and its one look for data is refused.
	d := openDashboard(t, c.BaseURL+"/ui/")
	d.waitFor("the API key form", func(p dashboardPage) string {
		if !p.AskingKey || !strings.HasPrefix(p.Banner, "disconnected: ") {
			return fmt.Sprintf("form shown %v, banner %q, want the form and a disconnected banner", p.AskingKey, p.Banner)
		}
		if p.Updated != "" || len(p.Methods) > 0 || len(p.Errors) > 0 {
			return fmt.Sprintf("updated %q, methods %v, errors %v: want no data without a key", p.Updated, p.Methods, p.Errors)
		}
		// Nothing may look like data before any could be loaded.
		for id, text := range p.EmptyTexts {
			if !strings.Contains(text, "API key") {
				return fmt.Sprintf("section %s says %q, want it to ask for an API key", id, text)
			}
		}
		return ""
	})

	submit := func(key string) {
		d.do("submit key "+key,
			chromedp.SendKeys(chromedp.ID("auth-key"), key),
			chromedp.Click(chromedp.CSS(`#auth button[type=submit]`)),
		)
	}
	submit("wrong-key")
	d.waitFor("the refusal of a wrong key", func(p dashboardPage) string {
		if !p.AskingKey || !strings.Contains(p.KeyNote, "refused") {
			return fmt.Sprintf("form shown %v with note %q, want it to say the key was refused", p.AskingKey, p.KeyNote)
		}
		return ""
	})
	if cookies := dashboardCookies(d, c.BaseURL); len(cookies) != 0 {
		t.Errorf("after a refused key the browser holds cookies %+v, want none", cookies)
	}

	// A caller's key: its own methods and errors.
	submit("alice-key")
	alice := d.waitFor("alice's data", func(p dashboardPage) string {
		switch {
		case p.AskingKey:
			return "the form is still shown"
		case p.Banner != "":
			return fmt.Sprintf("banner %q is shown", p.Banner)
		case p.Viewer != "alice":
			return fmt.Sprintf("shown to %q, want alice", p.Viewer)
		case row(p.Methods, "method", "echo") == nil:
			return "no methods row of echo"
		}
		return ""
	})
	if row(alice.Methods, "method", "fail") != nil || row(alice.Errors, "method", "fail") != nil {
		t.Errorf("alice sees methods %v and errors %v, want neither fail nor the operator's error", alice.Methods, alice.Errors)
	}
	// Alice's own row of the Callers panel: her calls let in, their wait
	// and her refusals; not the window, nor her share, which count every
	// caller's calls.
	callersMatch(d, c.BaseURL, "alice's row of the Callers panel", func(p dashboardPage, st dashboard.State) string {
		if len(st.Fair.Callers) != 1 || st.Fair.Callers[0].Caller != "alice" {
			return fmt.Sprintf("alice is shown callers %+v, want her own row alone", st.Fair.Callers)
		}
		if n := st.Fair.Callers[0].Counts; n.Admitted != 4 || n.Refused != 3 || n.WaitMeanMs <= 0 || n.Share != nil {
			return fmt.Sprintf("alice's counts %+v, want 4 calls let in after a wait, 3 refused, no share", n)
		}
		return ""
	}, "Authorization", "Bearer alice-key")

	cookies := dashboardCookies(d, c.BaseURL)
	if len(cookies) != 1 {
		t.Fatalf("the browser holds cookies %+v, want the dashboard's one", cookies)
	}
	k := cookies[0]
	if !k.HTTPOnly || k.SameSite != network.CookieSameSiteStrict || k.Path != "/ui/" || !k.Session || k.Secure {
		t.Errorf("cookie %s: HttpOnly %v, SameSite %q, path %q, session %v, secure %v; want HttpOnly, Strict, /ui/, a session cookie, not Secure over plain HTTP",
			k.Name, k.HTTPOnly, k.SameSite, k.Path, k.Session, k.Secure)
	}
	// The page's scripts never hold the key.
	held, err := chromedp.Run(d.ctx, chromedp.Evaluate[string](`[document.cookie, JSON.stringify(Object.entries(sessionStorage)), JSON.stringify(Object.entries(localStorage))].join(' ')`))
	if err != nil || strings.Contains(held, "alice") {
		t.Errorf("the page's scripts can read %q (%v), want no key", held, err)
	}

	// A reload shows alice's data at once, from the page the server drew
	// with the cookie, before any poll.
	d.do("reload without the data route", blockState(true), chromedp.Reload())
	p, err := d.read()
	if err != nil {
		t.Fatalf("read the reloaded page: %v", err)
	}
	d.screenshot("dashboard-key-reload.png")
	if p.AskingKey || p.Viewer != "alice" || row(p.Methods, "method", "echo") == nil {
		t.Errorf("after a reload the page shows form %v, viewer %q, methods %v; want alice's data at once", p.AskingKey, p.Viewer, p.Methods)
	}
	d.do("let the page read its data", blockState(false))

	// Forgetting the key drops the cookie and the data.
	d.do("forget the key", chromedp.Click(chromedp.ID("forget-key")))
	d.waitFor("the form after forgetting the key", func(p dashboardPage) string {
		if !p.AskingKey || p.Updated != "" || len(p.Methods) > 0 {
			return fmt.Sprintf("form shown %v, updated %q, methods %v; want the form and no data", p.AskingKey, p.Updated, p.Methods)
		}
		return ""
	})
	if cookies := dashboardCookies(d, c.BaseURL); len(cookies) != 0 {
		t.Errorf("after forgetting the key the browser holds cookies %+v, want none", cookies)
	}

	// An operator's key: every caller's methods and errors.
	submit("ops-key")
	d.waitFor("the operator's data", func(p dashboardPage) string {
		switch {
		case p.AskingKey:
			return "the form is still shown"
		case p.Viewer != "ops (operator)":
			return fmt.Sprintf("shown to %q, want ops (operator)", p.Viewer)
		case row(p.Methods, "method", "fail") == nil || row(p.Methods, "method", "echo") == nil:
			return fmt.Sprintf("methods %v, want echo and fail", p.Methods)
		case row(p.Errors, "method", "fail") == nil:
			return fmt.Sprintf("errors %v, want the error of fail", p.Errors)
		}
		return ""
	})
	// The operator sees every caller's row with its share, and the window.
	p, _ = callersMatch(d, c.BaseURL, "every caller's row of the Callers panel", func(p dashboardPage, st dashboard.State) string {
		var names []string
		for _, c := range st.Fair.Callers {
			names = append(names, c.Caller)
		}
		if !slices.Equal(names, []string{"alice", "ops"}) {
			return fmt.Sprintf("the operator is shown callers %q, want alice, then ops", names)
		}
		return ""
	}, "Authorization", "Bearer ops-key")
	if len(p.Cut) > 0 {
		t.Errorf("at 1400×900 the operator's page cuts off:\n%s", strings.Join(p.Cut, "\n"))
	}
	d.screenshot("dashboard-operator.png")
	d.checkProblems()
}

// addTool registers math.add, which adds a and b, with the description
// given: workers of different descriptions announce conflicting
// descriptors.
func addTool(description string) func(rt *worker.Runtime) error {
	type sum struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	return func(rt *worker.Runtime) error {
		return rt.Handle("math.add", worker.Typed(func(_ context.Context, p sum) (int, error) { return p.A + p.B, nil }),
			worker.Describe(schema.Descriptor{Description: description}))
	}
}

// echoTool registers echo, which answers its params. The conflict test
// serves it rather than the demo toolset, whose many methods, listed
// under a worker, fill the Workers panel at 1400×900 to its last pixel.
func echoTool(rt *worker.Runtime) error {
	return rt.Handle("echo", worker.HandlerFunc(func(_ context.Context, req *worker.Request) (any, error) { return req.Params, nil }))
}

// TestDashboardShowsConflicts: when two workers announce different
// descriptors of one tool, its row is marked, and a line under it says
// which descriptor is kept, who announces another and since when, to an
// operator and to a caller that may call the tool; a caller that may
// not is shown neither the row nor the conflict.
func TestDashboardShowsConflicts(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(),
		toolbustest.WithTools(echoTool), toolbustest.WithTools(addTool("Adds a and b.")),
		toolbustest.WithAuth(auth.Config{
			Keys: []auth.APIKey{
				{Name: "alice", SHA256: auth.HashAPIKey("alice-key"), Allow: []string{"echo", "math.add"}},
				{Name: "bob", SHA256: auth.HashAPIKey("bob-key"), Allow: []string{"echo"}},
				{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Operator: true},
			},
		}))
	waitForTool(t, c, "math.add")
	c.AddWorker(t, addTool("Adds a and b, as integers."))
	var others []string
	toolbustest.Eventually(t, func() bool {
		tool, _ := c.Registry.Lookup("math.add")
		cf, ok := tool.Conflicting()
		others = cf.Others
		return ok
	}, "the conflict of math.add")
	if len(others) != 1 {
		t.Fatalf("the workers of the other descriptor are %q, want the newcomer alone", others)
	}
	// The page shows the end of the worker's id that tells it apart.
	other := others[0][max(0, len(others[0])-6):]

	// bob may not call math.add: neither its row nor its conflict.
	if st, err := dashboardState(t, c.BaseURL, "Authorization", "Bearer bob-key"); err != nil {
		t.Fatalf("bob's state: %v", err)
	} else if len(st.Conflicts) != 0 || slices.ContainsFunc(st.Methods, func(m bus.MethodStatus) bool { return m.Method == "math.add" }) {
		t.Errorf("bob is shown conflicts %+v and methods %+v, want neither math.add nor its conflict", st.Conflicts, st.Methods)
	}

	marked := func(who string) func(p dashboardPage) string {
		return func(p dashboardPage) string {
			switch {
			case p.AskingKey:
				return "the form is still shown"
			case p.Viewer != who:
				return fmt.Sprintf("shown to %q, want %s", p.Viewer, who)
			}
			i := slices.IndexFunc(p.Methods, func(r map[string]string) bool { return r["methodtitle"] == "math.add" })
			if i < 0 || i+1 == len(p.Methods) {
				return fmt.Sprintf("methods %v, want math.add's row and a line under it", p.Methods)
			}
			mark := p.ConflictMarks["math.add"]
			note := p.Methods[i+1]["conflict"]
			for _, want := range []string{"descriptors conflict since ", "kept: the one it was first served with (1 worker), which validates params",
				" · 1 worker (", other + ") announces another, differing in description"} {
				if !strings.Contains(note, want) || mark != note {
					return fmt.Sprintf("math.add's mark says %q and the line under its row %q, want both to say %q", mark, note, want)
				}
			}
			if !strings.HasSuffix(p.Methods[i]["method"], "conflict") {
				return fmt.Sprintf("math.add's method cell reads %q, want the mark after the name", p.Methods[i]["method"])
			}
			if _, ok := p.ConflictMarks["echo"]; ok || len(p.ConflictMarks) != 1 {
				return fmt.Sprintf("conflict marks %v, want math.add's alone", p.ConflictMarks)
			}
			return ""
		}
	}
	submit := func(d *dashboardTab, key string) {
		d.do("submit key "+key,
			chromedp.SendKeys(chromedp.ID("auth-key"), key),
			chromedp.Click(chromedp.CSS(`#auth button[type=submit]`)),
		)
	}

	d := openDashboard(t, c.BaseURL+"/ui/")
	submit(d, "alice-key")
	p := d.waitFor("alice's mark of the conflict", marked("alice"))
	if len(p.Cut) > 0 {
		t.Errorf("at 1400×900 alice's page cuts off:\n%s", strings.Join(p.Cut, "\n"))
	}
	d.screenshot("dashboard-conflict-caller.png")

	d.do("forget alice's key", chromedp.Click(chromedp.ID("forget-key")))
	d.waitFor("the form after forgetting the key", func(p dashboardPage) string {
		if !p.AskingKey {
			return "no form"
		}
		return ""
	})
	submit(d, "ops-key")
	d.waitFor("the operator's mark of the conflict", marked("ops (operator)"))
	// The page the server draws has it at once, before any poll.
	d.do("reload without the data route", blockState(true), chromedp.Reload())
	p, err := d.read()
	if err != nil {
		t.Fatalf("read the reloaded page: %v", err)
	}
	if msg := marked("ops (operator)")(p); msg != "" {
		t.Errorf("at load: %s", msg)
	}
	if len(p.Cut) > 0 {
		t.Errorf("at 1400×900 the operator's page cuts off:\n%s", strings.Join(p.Cut, "\n"))
	}
	d.screenshot("dashboard-conflict.png")
	d.checkProblems()
}
