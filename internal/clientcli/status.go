package clientcli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
)

// statusJetStreamWait bounds the JetStream account request of the status
// command: a cluster without JetStream may not answer at all.
const statusJetStreamWait = 2 * time.Second

// StatusConfig is what [Status] gathers and how it prints it: the flags
// of `toolbus status`.
type StatusConfig struct {
	// NATS are the server URLs, comma-separated.
	NATS string
	// Options authenticate and secure the connection.
	Options []bus.Option
	// Prefix is the NATS subject prefix of the cluster.
	Prefix string
	// Wait is how long to listen for ingresses and workers.
	Wait time.Duration
	// ConnectTimeout bounds the connection to each server, and its round
	// trip.
	ConnectTimeout time.Duration
	// JSON prints the gathered data as JSON instead of tables.
	JSON bool
}

// Status connects to NATS, gathers the status of the cluster cfg names
// and prints it on out.
func Status(ctx context.Context, out io.Writer, cfg StatusConfig) error {
	r, err := gatherReport(ctx, cfg)
	if err != nil {
		return err
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	printStatus(out, r, cfg, time.Now())
	return nil
}

// StatusReport is what [Status] gathers; with JSON it prints it as it is.
type StatusReport struct {
	NATS natsReport `json:"nats"`
	// Instances are the ingresses and workers, sorted by kind then id.
	Instances []bus.Status `json:"instances"`
	// Methods merges each method over the workers that answered; Workers
	// counts them.
	Methods []bus.MethodStatus `json:"methods"`
}

// natsReport describes the NATS server the command reached.
type natsReport struct {
	URL        string          `json:"url"`
	ServerID   string          `json:"server_id"`
	ServerName string          `json:"server_name"`
	Version    string          `json:"version"`
	Cluster    string          `json:"cluster,omitempty"`
	Servers    []string        `json:"servers"`
	Discovered []string        `json:"discovered"`
	RTTMs      float64         `json:"rtt_ms"`
	RTTError   string          `json:"rtt_error,omitempty"`
	JetStream  jetStreamReport `json:"jetstream"`
}

// jetStreamReport says whether JetStream answers for the account, and
// what it holds.
type jetStreamReport struct {
	Enabled   bool   `json:"enabled"`
	Error     string `json:"error,omitempty"`
	Domain    string `json:"domain,omitempty"`
	Streams   int    `json:"streams"`
	Consumers int    `json:"consumers"`
	Memory    uint64 `json:"memory_bytes"`
	Store     uint64 `json:"store_bytes"`
}

// gatherReport connects to NATS, describes the server and gathers the
// statuses of the cluster under cfg.Prefix.
func gatherReport(ctx context.Context, cfg StatusConfig) (StatusReport, error) {
	var r StatusReport
	if cfg.Wait <= 0 {
		return r, fmt.Errorf("status: --wait %v: want a positive duration", cfg.Wait)
	}
	if cfg.ConnectTimeout <= 0 {
		return r, fmt.Errorf("status: --connect-timeout %v: want a positive duration", cfg.ConnectTimeout)
	}
	subjects, err := bus.NewSubjects(cfg.Prefix)
	if err != nil {
		return r, fmt.Errorf("status: --prefix: %w", err)
	}
	// A failed first connection is an answer: no retrying in the
	// background, and each server of the list gets connectTimeout.
	opts := slices.Concat([]bus.Option{bus.WithName("toolbus-status"), bus.WithLogger(slog.New(slog.DiscardHandler))},
		cfg.Options, []bus.Option{bus.WithNATSOptions(nats.Timeout(cfg.ConnectTimeout))})
	nc, err := bus.Connect(cfg.NATS, opts...)
	if err != nil {
		return r, fmt.Errorf("status: NATS not reachable: %w", err)
	}
	defer nc.Close()
	r.NATS = describeNATS(ctx, nc, cfg.ConnectTimeout)
	if r.Instances, err = bus.GatherStatus(ctx, nc, subjects, cfg.Wait); err != nil {
		return r, fmt.Errorf("status: %w", err)
	}
	if r.Instances == nil {
		r.Instances = []bus.Status{}
	}
	r.Methods = mergeWorkerMethods(r.Instances)
	return r, nil
}

// describeNATS reports the server nc is connected to.
func describeNATS(ctx context.Context, nc *nats.Conn, rttWait time.Duration) natsReport {
	r := natsReport{
		URL:        nc.ConnectedUrlRedacted(),
		ServerID:   nc.ConnectedServerId(),
		ServerName: nc.ConnectedServerName(),
		Version:    nc.ConnectedServerVersion(),
		Cluster:    nc.ConnectedClusterName(),
		Servers:    redactAll(nc.Servers()),
		Discovered: redactAll(nc.DiscoveredServers()),
	}
	rctx, cancel := context.WithTimeout(ctx, rttWait)
	start := time.Now()
	if err := nc.FlushWithContext(rctx); err != nil {
		r.RTTError = err.Error()
	} else {
		r.RTTMs = float64(time.Since(start)) / float64(time.Millisecond)
	}
	cancel()
	r.JetStream = describeJetStream(ctx, nc)
	return r
}

func describeJetStream(ctx context.Context, nc *nats.Conn) jetStreamReport {
	var r jetStreamReport
	js, err := jetstream.New(nc)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, statusJetStreamWait)
	defer cancel()
	info, err := js.AccountInfo(ctx)
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		r.Error = "not enabled on the server"
	case errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		r.Error = "not enabled for this account"
	case errors.Is(err, context.DeadlineExceeded):
		r.Error = fmt.Sprintf("no answer within %v", statusJetStreamWait)
	case err != nil:
		r.Error = err.Error()
	default:
		r.Enabled = true
		r.Domain = info.Domain
		r.Streams, r.Consumers = info.Streams, info.Consumers
		r.Memory, r.Store = info.Memory, info.Store
	}
	return r
}

func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = bus.RedactURL(u)
	}
	return out
}

// mergeWorkerMethods merges each method over the workers that answered,
// sorted by name. Counts and rates add up; a merged P50 is the mean of the
// workers' medians weighted by their calls (their plain mean when none had
// calls), a merged P99 the largest P99: percentiles do not merge exactly,
// and the largest tail is the one an operator must see.
func mergeWorkerMethods(statuses []bus.Status) []bus.MethodStatus {
	rows := map[string]*bus.MethodStatus{}
	// p50Weight is the denominator of each row's weighted P50.
	p50Weight := map[string]float64{}
	for _, st := range statuses {
		if st.Kind != bus.KindWorker || st.Extra["error"] != nil {
			continue
		}
		for _, m := range st.Methods {
			row, ok := rows[m.Method]
			if !ok {
				row = &bus.MethodStatus{Method: m.Method, Workers: new(0)}
				rows[m.Method] = row
			}
			*row.Workers++
			row.Rate += m.Rate
			row.Calls += m.Calls
			row.Errors += m.Errors
			row.InFlight += m.InFlight
			row.Total += m.Total
			row.P99Ms = max(row.P99Ms, m.P99Ms)
			w := float64(m.Calls)
			row.P50Ms += m.P50Ms * w
			p50Weight[m.Method] += w
		}
	}
	out := make([]bus.MethodStatus, 0, len(rows))
	for _, row := range rows {
		if w := p50Weight[row.Method]; w > 0 {
			row.P50Ms /= w
		}
		if row.Calls > 0 {
			row.ErrorRate = float64(row.Errors) / float64(row.Calls)
		}
		out = append(out, *row)
	}
	slices.SortFunc(out, func(a, b bus.MethodStatus) int { return cmp.Compare(a.Method, b.Method) })
	return out
}

// printStatus writes r as tables; now is the reference of the uptimes.
func printStatus(w io.Writer, r StatusReport, cfg StatusConfig, now time.Time) {
	// tabwriter pads every cell but a line's last, even when the last is
	// empty (an instance without a note); no line should end in spaces.
	var b bytes.Buffer
	writeStatus(&b, r, cfg, now)
	for line := range strings.Lines(b.String()) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}
}

func writeStatus(out io.Writer, r StatusReport, cfg StatusConfig, now time.Time) {
	n := r.NATS
	fmt.Fprintln(out, "NATS")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  connected\t%s\n", n.URL)
	server := orDash(n.ServerName)
	if n.ServerID != "" {
		server += " (" + n.ServerID + ")"
	}
	if n.Version != "" {
		server += ", version " + n.Version
	}
	fmt.Fprintf(tw, "  server\t%s\n", server)
	fmt.Fprintf(tw, "  cluster\t%s\n", orDash(n.Cluster))
	fmt.Fprintf(tw, "  servers known\t%s\n", listOrDash(n.Servers))
	fmt.Fprintf(tw, "  discovered\t%s\n", listOrDash(n.Discovered))
	if n.RTTError != "" {
		fmt.Fprintf(tw, "  rtt\tunknown: %s\n", n.RTTError)
	} else {
		fmt.Fprintf(tw, "  rtt\t%s\n", formatMs(n.RTTMs))
	}
	js := n.JetStream
	if js.Enabled {
		domain := ""
		if js.Domain != "" {
			domain = ", domain " + js.Domain
		}
		fmt.Fprintf(tw, "  jetstream\ton: %d streams, %d consumers, %s in memory, %s on disk%s\n",
			js.Streams, js.Consumers, formatBytes(js.Memory), formatBytes(js.Store), domain)
	} else {
		fmt.Fprintf(tw, "  jetstream\tunavailable: %s\n", js.Error)
	}
	tw.Flush()

	fmt.Fprintln(out)
	if len(r.Instances) == 0 {
		fmt.Fprintf(out, "No ingress or worker under prefix %q answered within %v.\n", cfg.Prefix, cfg.Wait)
		return
	}
	fmt.Fprintln(out, "INSTANCES")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	// The NOTE column appears only when there is something to note, so
	// that no line ends in padding.
	notes := slices.ContainsFunc(r.Instances, func(st bus.Status) bool { return st.Extra["error"] != nil })
	header := "KIND\tID\tHOST\tVERSION\tUPTIME\tIN-FLIGHT"
	if notes {
		header += "\tNOTE"
	}
	fmt.Fprintln(tw, header)
	for _, st := range r.Instances {
		uptime, inFlight, note := "-", "-", ""
		if e := st.Extra["error"]; e != nil {
			note = fmt.Sprintf("no status: %v", e)
		} else {
			inFlight = fmt.Sprint(st.InFlight)
			if !st.Started.IsZero() {
				uptime = now.Sub(st.Started).Round(time.Second).String()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", st.Kind, st.ID, orDash(st.Host), orDash(st.Version), uptime, inFlight)
		if notes {
			fmt.Fprintf(tw, "\t%s", note)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	fmt.Fprintln(out)
	fmt.Fprintln(out, "METHODS ON WORKERS (last minute)")
	if len(r.Methods) == 0 {
		fmt.Fprintln(out, "  none reported")
	} else {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "METHOD\tWORKERS\tRATE/S\tP50\tP99\tERRORS\tIN-FLIGHT\tTOTAL")
		for _, m := range r.Methods {
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%s\t%s\t%d\t%d\n", m.Method, *m.Workers, m.Rate,
				formatMs(m.P50Ms), formatMs(m.P99Ms), formatErrorRate(m.Errors, m.Calls), m.InFlight, m.Total)
		}
		tw.Flush()
	}

	fmt.Fprintln(out)
	fmt.Fprintln(out, "METHODS AT INGRESSES (last minute)")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	rows := 0
	for _, st := range r.Instances {
		if st.Kind != bus.KindIngress || st.Extra["error"] != nil {
			continue
		}
		for _, m := range st.Methods {
			if rows == 0 {
				fmt.Fprintln(tw, "INGRESS\tMETHOD\tWORKERS\tRATE/S\tP50\tP99\tERRORS\tIN-FLIGHT\tTOTAL")
			}
			rows++
			workers := "-"
			if m.Workers != nil {
				workers = fmt.Sprint(*m.Workers)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%d\t%d\n", st.ID, m.Method, workers, m.Rate,
				formatMs(m.P50Ms), formatMs(m.P99Ms), formatErrorRate(m.Errors, m.Calls), m.InFlight, m.Total)
		}
	}
	if rows == 0 {
		fmt.Fprintln(tw, "  none reported")
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func listOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

// formatMs prints a duration in milliseconds in the unit that suits it;
// zero, which a window without calls reports, is "-".
func formatMs(ms float64) string {
	switch {
	case ms <= 0:
		return "-"
	case ms < 1:
		return fmt.Sprintf("%.0fµs", ms*1000)
	case ms < 1000:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.2fs", ms/1000)
}

func formatErrorRate(errs, calls int64) string {
	if calls == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(errs)/float64(calls))
}

func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
