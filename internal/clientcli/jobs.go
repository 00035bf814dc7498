package clientcli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
)

func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Submit, follow, list and cancel durable jobs on an ingress",
		Long: `jobs talks to the rpc.jobs.* methods of an ingress, over HTTP or, with a
ws:// or wss:// --url, over WebSocket. A job runs a tool call durably on
JetStream: submit returns its id at once, and get, watch, list and cancel
work from any ingress replica of the cluster. A job whose tool asks a question
is input_required until answer answers it.`,
		Example: `  toolbus jobs submit sleep '{"ms":3000}'
  toolbus jobs watch 06f3k0w6v0c8f8q2h1b0v4x5ja
  toolbus jobs answer 06f3k0w6v0c8f8q2h1b0v4x5ja '{"confirmed":true}'
  toolbus jobs list --state running`,
	}
	cmd.AddCommand(newJobsSubmitCmd(), newJobsGetCmd(), newJobsCancelCmd(), newJobsListCmd(), newJobsWatchCmd(), newJobsAnswerCmd())
	return cmd
}

// urlFlag adds the --url flag every jobs command has.
func urlFlag(cmd *cobra.Command, url *string) {
	cmd.Flags().StringVar(url, "url", defaultURL, "URL of the ingress's JSON-RPC endpoint: http(s):// or ws(s)://")
}

// jobsClient returns a client of rawURL for the jobs commands. Reading a
// job is safe to repeat, so errors the server marks retryable (and
// connections lost before a message left) are retried a few times.
func jobsClient(ctx context.Context, rawURL string) (*client.Client, error) {
	return dial(ctx, rawURL, client.WithRetry(client.RetryPolicy{MaxAttempts: 4}))
}

// printJSON prints raw JSON indented.
func printJSON(out io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

func newJobsSubmitCmd() *cobra.Command {
	var (
		url, key, notifyURL string
		wait                bool
		interval            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "submit METHOD [PARAMS_JSON]",
		Short: "Submit a call as a job and print its id and state",
		Long: `submit hands a call to the cluster as a durable job (rpc.jobs.submit) and prints
{"id", "state"} at once. PARAMS_JSON is an object or an array. The same
--idempotency-key from the same caller gives back the same job rather than a
second one. With --notify-url the final record is POSTed there, signed, when
the job ends. With --wait, submit then follows the job as watch does.`,
		Example: `  toolbus jobs submit sha256 '{"data":"hello","rounds":1000000}'
  toolbus jobs submit --idempotency-key report-2026-11 --wait sleep '{"ms":2000}'`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait && interval <= 0 {
				return fmt.Errorf("--interval %s: must be positive", interval)
			}
			params, err := parseParams(args[1:])
			if err != nil {
				return err
			}
			req := submitRequest{Method: args[0], Params: params}
			if cmd.Flags().Changed("idempotency-key") {
				req.IdempotencyKey = &key
			}
			if notifyURL != "" {
				req.NotifyURL = &notifyURL
			}
			ctx := CommandContext(cmd)
			c, err := dial(ctx, url)
			if err != nil {
				return err
			}
			defer c.Close()
			var sub schema.JobSubmitResult
			if err := c.Call(ctx, schema.MethodJobsSubmit, req, &sub); err != nil {
				return fmt.Errorf("submit %s: %w", args[0], err)
			}
			if err := printJSON(cmd.OutOrStdout(), sub); err != nil || !wait {
				return err
			}
			return watchJob(ctx, c, cmd.OutOrStdout(), sub.ID, interval)
		},
	}
	urlFlag(cmd, &url)
	cmd.Flags().StringVar(&key, "idempotency-key", "", "key that makes a repeated submit return the first job")
	cmd.Flags().StringVar(&notifyURL, "notify-url", "", "http(s) URL that receives the final record when the job ends")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the job until it ends, as watch does")
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "with --wait, how often the job is polled")
	return cmd
}

// submitRequest is the params of rpc.jobs.submit.
type submitRequest struct {
	Method         string          `json:"method"`
	Params         json.RawMessage `json:"params,omitempty"`
	IdempotencyKey *string         `json:"idempotency_key,omitempty"`
	NotifyURL      *string         `json:"notify_url,omitempty"`
}

// idParams is the params of rpc.jobs.get and rpc.jobs.cancel.
type idParams struct {
	ID string `json:"id"`
}

func newJobsGetCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Print a job's record",
		Long: `get prints the record of a job (rpc.jobs.get): its state, progress, attempts,
times, and its result or error once it has ended.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return printJobCall(cmd, url, schema.MethodJobsGet, args[0], true)
		},
	}
	urlFlag(cmd, &url)
	return cmd
}

func newJobsCancelCmd() *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a queued or running job and print its record",
		Long: `cancel cancels a job (rpc.jobs.cancel): a queued job never runs, a running
job's tool sees its context canceled. It prints the job's record, now canceled.
Canceling a job that has already succeeded or failed is an error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return printJobCall(cmd, url, schema.MethodJobsCancel, args[0], false)
		},
	}
	urlFlag(cmd, &url)
	return cmd
}

func newJobsAnswerCmd() *cobra.Command {
	var (
		url     string
		decline bool
	)
	cmd := &cobra.Command{
		Use:   "answer ID [ANSWER]",
		Short: "Answer the question a job's tool asked, or decline it, and print the job's record",
		Long: `answer answers the question of a job that is input_required (rpc.jobs.answer):
ANSWER is a JSON object that fits the question's schema, which get and watch
show; --decline says no to the question instead. Only the caller that submitted
the job may answer it. The job is running again once the answer is taken; an
answer that does not fit the schema is refused and the job keeps waiting.`,
		Example: `  toolbus jobs answer 06f3k0w6v0c8f8q2h1b0v4x5ja '{"confirmed":true}'
  toolbus jobs answer 06f3k0w6v0c8f8q2h1b0v4x5ja --decline`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p := schema.JobAnswerParams{ID: args[0], Decline: decline}
			switch {
			case decline && len(args) == 2:
				return errors.New("give either an ANSWER or --decline, not both")
			case !decline && len(args) == 1:
				return errors.New("give the ANSWER, a JSON object that fits the question's schema, or --decline")
			case !decline:
				if !json.Valid([]byte(args[1])) {
					return fmt.Errorf("ANSWER %q is not JSON: give a JSON object such as '{\"confirmed\":true}'", truncateRunes(args[1], 40))
				}
				p.Answer = json.RawMessage(args[1])
			}
			ctx := CommandContext(cmd)
			c, err := dial(ctx, url)
			if err != nil {
				return err
			}
			defer c.Close()
			var rec json.RawMessage
			if err := c.Call(ctx, schema.MethodJobsAnswer, p, &rec); err != nil {
				return fmt.Errorf("job %s: %w", p.ID, err)
			}
			return printJSON(cmd.OutOrStdout(), rec)
		},
	}
	urlFlag(cmd, &url)
	cmd.Flags().BoolVar(&decline, "decline", false, "say no to the question rather than answer it")
	return cmd
}

// printJobCall calls method with the job id and prints the record it
// answers; retry says whether the call is safe to repeat.
func printJobCall(cmd *cobra.Command, url, method, id string, retry bool) error {
	ctx := CommandContext(cmd)
	var c *client.Client
	var err error
	if retry {
		c, err = jobsClient(ctx, url)
	} else {
		c, err = dial(ctx, url)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	var rec json.RawMessage
	if err := c.Call(ctx, method, idParams{ID: id}, &rec); err != nil {
		return fmt.Errorf("job %s: %w", id, err)
	}
	return printJSON(cmd.OutOrStdout(), rec)
}

func newJobsListCmd() *cobra.Command {
	var (
		url    string
		params struct {
			State  string `json:"state,omitempty"`
			Method string `json:"method,omitempty"`
			Limit  int    `json:"limit,omitempty"`
			Cursor string `json:"cursor,omitempty"`
		}
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first, a page at a time",
		Long: `list prints a page of jobs (rpc.jobs.list), newest first, as a table, then the
cursor of the next page when there may be more: pass it to --cursor.`,
		Example: `  toolbus jobs list --state failed --limit 50
  toolbus jobs list --cursor 'MDZmM2sw...'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if params.Limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative", params.Limit)
			}
			ctx := CommandContext(cmd)
			c, err := jobsClient(ctx, url)
			if err != nil {
				return err
			}
			defer c.Close()
			var page schema.JobList
			if err := c.Call(ctx, schema.MethodJobsList, params, &page); err != nil {
				return fmt.Errorf("list jobs: %w", err)
			}
			return printJobList(cmd.OutOrStdout(), page)
		},
	}
	urlFlag(cmd, &url)
	cmd.Flags().StringVar(&params.State, "state", "", "only jobs in this state: queued, running, input_required, succeeded, failed or canceled")
	cmd.Flags().StringVar(&params.Method, "method", "", "only jobs of this method")
	cmd.Flags().IntVar(&params.Limit, "limit", 0, "most jobs on the page (default: the server's, 20)")
	cmd.Flags().StringVar(&params.Cursor, "cursor", "", "cursor of the page to print, from the previous page")
	return cmd
}

// printJobList prints a page of jobs as a table, or "no jobs", and the
// cursor of the next page when there may be more.
func printJobList(out io.Writer, page schema.JobList) error {
	if len(page.Jobs) == 0 {
		fmt.Fprintln(out, "no jobs")
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tMETHOD\tPROGRESS\tATTEMPTS\tCREATED\tFINISHED")
		for _, r := range page.Jobs {
			progress := "-"
			if r.Progress != nil {
				progress = fmt.Sprintf("%.0f%%", r.Progress.Percent)
			}
			finished := "-"
			if r.FinishedAt != nil {
				finished = r.FinishedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.State, r.Method, progress, r.Attempts,
				r.CreatedAt.UTC().Format(time.RFC3339), finished)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if page.NextCursor == "" {
		return nil
	}
	_, err := fmt.Fprintf(out, "more jobs: toolbus jobs list --cursor %s\n", page.NextCursor)
	return err
}

func newJobsWatchCmd() *cobra.Command {
	var (
		url      string
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a job's progress until it ends, then print its result",
		Long: `watch polls a job (rpc.jobs.get) every --interval and shows its state and
progress: on a terminal one line with a progress bar, redrawn in place; otherwise
a line each time the state or progress changes. When the job ends it prints the
result, or the error; the exit status is 1 when the job failed or was canceled.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return fmt.Errorf("--interval %s: must be positive", interval)
			}
			ctx := CommandContext(cmd)
			c, err := jobsClient(ctx, url)
			if err != nil {
				return err
			}
			defer c.Close()
			return watchJob(ctx, c, cmd.OutOrStdout(), args[0], interval)
		},
	}
	urlFlag(cmd, &url)
	cmd.Flags().DurationVar(&interval, "interval", 500*time.Millisecond, "how often the job is polled")
	return cmd
}

// watchJob polls job id every interval until it ends, showing its progress
// on out, then prints its outcome. It returns ErrReported when the job
// failed or was canceled.
func watchJob(ctx context.Context, c *client.Client, out io.Writer, id string, interval time.Duration) error {
	d := newProgressDisplay(out)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	lastQuestion := "" // the id of the question shown last
	for {
		var rec schema.JobRecord
		if err := c.Call(ctx, schema.MethodJobsGet, idParams{ID: id}, &rec); err != nil {
			d.end()
			return fmt.Errorf("job %s: %w", id, err)
		}
		d.show(progressLine(&rec))
		if q := rec.Question; q != nil && q.ID != lastQuestion {
			lastQuestion = q.ID
			d.end()
			fmt.Fprintf(out, "the job asks: %s\n  answer schema: %s\n  answer with: toolbus jobs answer %s '<answer>'  (or --decline)\n",
				singleLine(q.Message), q.Schema, id)
			d.last = ""
		}
		if rec.State.Final() {
			d.end()
			return printOutcome(out, &rec)
		}
		select {
		case <-ctx.Done():
			d.end()
			return fmt.Errorf("job %s: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// progressDisplay shows the progress of something that runs on out: on a
// terminal one line redrawn in place; otherwise a line each time it
// changes. jobs watch and a2a send draw with it.
type progressDisplay struct {
	out   io.Writer
	tty   bool
	drawn bool
	last  string
}

func newProgressDisplay(out io.Writer) *progressDisplay {
	return &progressDisplay{out: out, tty: isTerminal(out)}
}

// show draws line, from [statusLine].
func (d *progressDisplay) show(line string) {
	switch {
	case d.tty:
		// \x1b[K clears what a longer line drawn before left behind.
		fmt.Fprintf(d.out, "\r%s\x1b[K", line)
		d.drawn = true
	case line != d.last:
		fmt.Fprintln(d.out, line)
	}
	d.last = line
}

// end ends a line redrawn in place, so that what follows starts on a line
// of its own.
func (d *progressDisplay) end() {
	if d.tty && d.drawn {
		fmt.Fprintln(d.out)
		d.drawn = false
	}
}

// barWidth is the number of cells of the progress bar; with the state,
// percent and a message cut to maxMessageRunes, a line fits 80 columns.
const (
	barWidth        = 30
	maxMessageRunes = 28
)

// progressLine is one line of watch: the job's state, a bar, the percent
// and the last progress message.
func progressLine(rec *schema.JobRecord) string {
	var percent float64
	var msg string
	if rec.Progress != nil {
		percent, msg = rec.Progress.Percent, rec.Progress.Message
	}
	if rec.State == schema.JobSucceeded {
		percent = 100
	}
	return statusLine(string(rec.State), percent, msg)
}

// statusLine is one line of a [progressDisplay]: a state, a bar, the
// percent and a message.
func statusLine(state string, percent float64, msg string) string {
	percent = min(max(percent, 0), 100)
	filled := int(percent / 100 * barWidth)
	bar := strings.Repeat("#", filled) + strings.Repeat("-", barWidth-filled)
	line := fmt.Sprintf("%-9s [%s] %3.0f%%", state, bar, percent)
	if msg != "" {
		line += "  " + truncateRunes(singleLine(msg), maxMessageRunes)
	}
	return line
}

// singleLine replaces line breaks and tabs, which would break a line
// redrawn in place, with spaces.
func singleLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// printOutcome prints how a job ended: its result, or its error and
// ErrReported.
func printOutcome(out io.Writer, rec *schema.JobRecord) error {
	if rec.State == schema.JobSucceeded {
		fmt.Fprintln(out, "result:")
		result := rec.Result
		if result == nil {
			result = json.RawMessage("null")
		}
		return printJSON(out, result)
	}
	fmt.Fprintf(out, "job %s %s:\n", rec.ID, rec.State)
	if rec.Error != nil {
		if err := printJSON(out, rec.Error); err != nil {
			return err
		}
	}
	return ErrReported
}

// isTerminal reports whether w is a terminal, where a line can be redrawn
// in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
