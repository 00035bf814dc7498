package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// DefaultPrefix is the subject prefix the kit speaks under unless
// [Config.Prefix] says otherwise.
const DefaultPrefix = "toolbus"

// DefaultStartTimeout is how long the kit waits for a worker to answer its
// first call unless [Config.StartTimeout] says otherwise: long enough for
// an interpreter to start and import its libraries.
const DefaultStartTimeout = 30 * time.Second

// DefaultDrainTimeout is how long the kit waits for a worker to exit after
// SIGTERM unless [Config.DrainTimeout] says otherwise.
const DefaultDrainTimeout = 15 * time.Second

// Config is what [Run] checks, and how.
type Config struct {
	// Conn is the kit's connection to the NATS server the worker joins.
	// The caller owns it; Run neither drains nor closes it.
	Conn *nats.Conn
	// Prefix is the cluster's subject prefix (default [DefaultPrefix]).
	Prefix string
	// Command starts the worker: the program and its arguments.
	Command []string
	// Env is added to the environment the worker starts with (after the
	// kit's own and the TOOLBUS_ variables of the package documentation),
	// as "NAME=value" strings.
	Env []string
	// Out receives the result lines and the summary; nil discards them.
	Out io.Writer
	// WorkerOutput receives the worker's standard output and standard
	// error; nil discards them.
	WorkerOutput io.Writer
	// Only, when not empty, names the rules to run (by their keys, see the
	// package documentation); the others are left out of the report. The
	// worker is started and stopped all the same.
	Only []string
	// StartTimeout bounds the wait for the worker's first answer (default
	// [DefaultStartTimeout]); DrainTimeout bounds its exit after SIGTERM
	// (default [DefaultDrainTimeout]).
	StartTimeout, DrainTimeout time.Duration
}

// Status is the outcome of one rule.
type Status int

// Outcomes of a rule.
const (
	// Pass: the worker follows the rule.
	Pass Status = iota
	// Fail: the worker breaks the rule; the result says how.
	Fail
	// Skip: the rule was not checked, for the reason the result gives (an
	// optional part of the protocol the worker does not speak, or a rule
	// that depends on one that failed).
	Skip
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "PASS"
	case Fail:
		return "FAIL"
	case Skip:
		return "SKIP"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Result is the outcome of one rule.
type Result struct {
	// Rule is the rule's key, such as "cancel"; Ref its place in
	// PROTOCOL.md, such as "rule 7"; Title what it asks.
	Rule, Ref, Title string
	Status           Status
	// Note says more: on a pass, what was seen when it is worth knowing;
	// on a skip, why.
	Note string
	// Sent, Want and Got describe a failure: what the kit sent, what it
	// expected and what came back.
	Sent, Want, Got string
}

// Report is the outcome of a run, one result per rule in the order they
// ran.
type Report struct {
	Results []Result
}

// Count returns how many results have status st.
func (r *Report) Count(st Status) int {
	n := 0
	for _, res := range r.Results {
		if res.Status == st {
			n++
		}
	}
	return n
}

// Failed reports whether any rule failed.
func (r *Report) Failed() bool { return r.Count(Fail) > 0 }

// Result returns the result of the rule named key, and false when it did
// not run.
func (r *Report) Result(key string) (Result, bool) {
	for _, res := range r.Results {
		if res.Rule == key {
			return res, true
		}
	}
	return Result{}, false
}

// Errors of [Run]: the kit could not check the worker at all.
var (
	// ErrConfig means the configuration cannot work; the error says which
	// part and how to fix it.
	ErrConfig = errors.New("conform: bad configuration")
	// ErrStart means the worker's command could not be started.
	ErrStart = errors.New("conform: cannot start the worker")
)

// Run starts the worker, checks it against every rule (or those of
// cfg.Only), stops it, and returns the report, which it has also written
// to cfg.Out line by line. It returns an error only when it could check
// nothing: a bad configuration, a command that does not start. A worker
// that breaks rules is a report with failures, not an error. When ctx ends,
// Run stops the worker and returns what it has checked so far with
// ctx.Err().
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s, err := newSession(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer s.close()
	rep := &Report{}
	add := func(res Result) {
		rep.Results = append(rep.Results, res)
		writeResult(s.out, res)
	}
	started := s.ruleStart(ctx)
	if cfg.wants("start") || started.Status != Pass {
		add(started)
	}
	for _, r := range rules {
		if !cfg.wants(r.key) || ctx.Err() != nil {
			continue
		}
		if started.Status != Pass {
			add(r.result(Skip, "the worker never answered conform.echo (see the start rule)"))
			continue
		}
		add(r.run(ctx, s))
	}
	if started.Status == Pass && cfg.wants("drain") && ctx.Err() == nil {
		add(s.ruleDrain(ctx))
	}
	s.stop()
	writeSummary(s.out, rep)
	return rep, ctx.Err()
}

func (cfg *Config) check() error {
	if cfg.Conn == nil {
		return fmt.Errorf("%w: no NATS connection: give Config.Conn", ErrConfig)
	}
	if len(cfg.Command) == 0 || cfg.Command[0] == "" {
		return fmt.Errorf("%w: no worker command: give the command that starts the worker (after -- on the command line)", ErrConfig)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := schema.ValidateMethod(cfg.Prefix); err != nil {
		return fmt.Errorf("%w: prefix %q is not a subject prefix (tokens of A-Z a-z 0-9 _ - / : joined by dots): %w", ErrConfig, cfg.Prefix, err)
	}
	for _, k := range cfg.Only {
		if k != "start" && k != "drain" && !slices.ContainsFunc(rules, func(r rule) bool { return r.key == k }) {
			return fmt.Errorf("%w: no rule %q: give keys among %s", ErrConfig, k, strings.Join(RuleKeys(), ", "))
		}
	}
	if cfg.StartTimeout < 0 || cfg.DrainTimeout < 0 {
		return fmt.Errorf("%w: a negative timeout: give a positive duration, or zero for the default", ErrConfig)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	return nil
}

func (cfg *Config) wants(key string) bool {
	return len(cfg.Only) == 0 || slices.Contains(cfg.Only, key)
}

// RuleKeys returns the keys of the rules in the order they run.
func RuleKeys() []string {
	keys := []string{"start"}
	for _, r := range rules {
		keys = append(keys, r.key)
	}
	return append(keys, "drain")
}

func writeResult(w io.Writer, res Result) {
	fmt.Fprintf(w, "%s  %-12s  %s: %s\n", res.Status, res.Rule, res.Ref, res.Title)
	switch {
	case res.Status == Skip:
		fmt.Fprintf(w, "      skipped: %s\n", res.Note)
	case res.Status == Fail:
		for _, l := range [][2]string{{"sent", res.Sent}, {"expected", res.Want}, {"got", res.Got}, {"note", res.Note}} {
			if l[1] != "" {
				fmt.Fprintf(w, "      %-9s %s\n", l[0]+":", indent(l[1]))
			}
		}
	case res.Note != "":
		fmt.Fprintf(w, "      %s\n", indent(res.Note))
	}
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n                ") }

func writeSummary(w io.Writer, rep *Report) {
	verdict := "the worker conforms"
	if rep.Failed() {
		verdict = "the worker does not conform"
	}
	rules := "rules"
	if len(rep.Results) == 1 {
		rules = "rule"
	}
	fmt.Fprintf(w, "%d %s: %d passed, %d failed, %d skipped: %s\n",
		len(rep.Results), rules, rep.Count(Pass), rep.Count(Fail), rep.Count(Skip), verdict)
}
