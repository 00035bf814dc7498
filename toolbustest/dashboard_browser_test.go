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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/toolbus/toolbus/ingress"
	"github.com/toolbus/toolbus/ingress/auth"
	"github.com/toolbus/toolbus/schema"
	"github.com/toolbus/toolbus/toolbustest"
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
	Updated   string              `json:"updated"`
	Banner    string              `json:"banner"` // empty while hidden
	IngressID string              `json:"ingress_id"`
	AskingKey bool                `json:"asking_key"`
	KeyNote   string              `json:"key_note"`
	Methods   []map[string]string `json:"methods"`
	Workers   []map[string]string `json:"workers"`
	Errors    []map[string]string `json:"errors"`
	Jobs      []map[string]string `json:"jobs"`
	JobCounts map[string]string   `json:"job_counts"`
	JobsOff   bool                `json:"jobs_off"`
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
}

const readDashboard = `(() => {
	const rows = (id) => Array.from(document.querySelectorAll('#' + id + ' tbody tr'), (tr) =>
		Object.fromEntries(Array.from(tr.cells, (td) => [td.dataset.col, td.textContent])));
	const shown = (id) => { const el = document.getElementById(id); return el !== null && !el.hidden; };
	const text = (id) => { const el = document.getElementById(id); return el === null ? '' : el.textContent; };
	return {
		updated: document.body.dataset.updated || '',
		banner: shown('banner') ? text('banner') : '',
		ingress_id: text('ingress-id'),
		asking_key: shown('auth'),
		key_note: text('auth-note'),
		methods: rows('methods'),
		workers: rows('workers'),
		errors: rows('errors'),
		jobs: rows('jobs'),
		job_counts: Object.fromEntries(Array.from(document.querySelectorAll('#job-counts li'),
			(li) => [li.dataset.state, li.querySelector('strong').textContent])),
		jobs_off: shown('jobs-off'),
		marked: window.dashboardTestMark === true,
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
		nats: shown('nats-info') ? text('nats-server') + ' ' + text('js-storage') : '',
	};
})()`

// dashboardTab is a headless Chromium tab for one test.
type dashboardTab struct {
	t   *testing.T
	ctx context.Context

	mu       sync.Mutex
	problems []string // uncaught exceptions and console errors of the page
}

// openDashboard starts Chromium, stopped when the test ends, and opens url
// in it.
func openDashboard(t *testing.T, url string) *dashboardTab {
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
	if err := chromedp.Do(tabCtx, chromedp.Navigate(url)); err != nil {
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

func TestDashboard(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithDiscovery(), toolbustest.WithJobs(nil))
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

	d := openDashboard(t, c.BaseURL+"/ui/")
	d.do("wait for the first render", chromedp.WaitReady(chromedp.CSS(`body[data-updated]`)))
	p := d.waitFor("the calls, errors, worker and job", func(p dashboardPage) string {
		switch {
		case p.Banner != "":
			return fmt.Sprintf("banner %q is shown", p.Banner)
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
		if len(p.Workers) == 0 || !strings.Contains(p.Workers[0]["methods"], "echo") {
			return fmt.Sprintf("workers = %v, want one serving echo", p.Workers)
		}
		if p.JobsOff || row(p.Jobs, "id", job.ID) == nil {
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
	if p.Overflow[0] > 0 || p.Overflow[1] > 0 {
		d.screenshot("dashboard-overflow.png")
		t.Errorf("the page reaches %d px below and %d px right of a 1400×900 window, want it to fit", p.Overflow[0], p.Overflow[1])
	}
	if e := row(p.Errors, "id", `"dash-fail"`); e["class"] != "tool" || e["count"] != "×1" {
		t.Errorf(`errors row of "dash-fail" = %v, want class tool and count ×1`, e)
	}
	if e := row(p.Errors, "id", `"dash-unknown"`); e["class"] != "caller" {
		t.Errorf(`errors row of "dash-unknown" = %v, want class caller`, e)
	}
	if echo := row(p.Methods, "method", "echo"); echo["infra_errors"] != "0" || echo["tool_errors"] != "0" {
		t.Errorf("methods row of echo = %v, want no errors", echo)
	}
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
		return ""
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

func TestDashboardAsksForAPIKey(t *testing.T) {
	c := toolbustest.Start(t, toolbustest.WithIngressOptions(ingress.WithAuth(auth.Config{
		Keys: []auth.APIKey{{Name: "ops", SHA256: auth.HashAPIKey("ops-key"), Allow: []string{"echo"}}},
	})))
	if r := c.Call(t, "echo", `["hi"]`, "Authorization", "Bearer ops-key"); r.Error != nil {
		t.Fatalf("echo = %v", r.Error)
	}

	d := openDashboard(t, c.BaseURL+"/ui/")
	d.waitFor("the API key form", func(p dashboardPage) string {
		if !p.AskingKey || !strings.HasPrefix(p.Banner, "disconnected: ") {
			return fmt.Sprintf("form shown %v, banner %q, want the form and a disconnected banner", p.AskingKey, p.Banner)
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

	submit("ops-key")
	d.waitFor("a render with the key", func(p dashboardPage) string {
		switch {
		case p.AskingKey:
			return "the form is still shown"
		case p.Banner != "":
			return fmt.Sprintf("banner %q is shown", p.Banner)
		case p.Updated == "":
			return "no render yet"
		case row(p.Methods, "method", "echo") == nil:
			return "no methods row of echo"
		}
		return ""
	})
	kept, err := chromedp.Run(d.ctx, chromedp.Evaluate[string](`sessionStorage.getItem('toolbus.dashboard.apiKey') || ''`))
	if err != nil || kept != "ops-key" {
		t.Fatalf("sessionStorage holds key %q (%v), want the accepted key", kept, err)
	}
	d.checkProblems()
}
