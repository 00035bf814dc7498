package msglog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/schema"
)

// DefaultMaxBytes is the longest body a message log line holds when
// [Config.MaxBytes] is zero.
const DefaultMaxBytes = 4096

// Redacted replaces the value of every redacted field.
const Redacted = "[REDACTED]"

// Config says which bodies the message log writes, and what it hides of
// them: each matching call's params as it is dispatched and its result or
// error as it is answered, one line each. Bodies may hold secrets and
// personal data: log only the methods you need, and list the fields to
// hide.
type Config struct {
	// Methods lists the methods to log: names, or patterns with * for one
	// token and > for the rest (e.g. "math.*", ">" for every method). None
	// means none.
	Methods []string
	// MaxBytes caps the logged form of one body (message_log_max_bytes);
	// a longer one is cut there and marked truncated, with its full size.
	// Zero means [DefaultMaxBytes].
	MaxBytes int
	// Redact names object members whose values are replaced by
	// [Redacted] at any depth, compared without regard to case (e.g.
	// "password", "token", "authorization").
	Redact []string
}

// Validate reports what is wrong with c: a pattern outside the method
// grammar, a negative MaxBytes, or an empty field name to redact.
func (c Config) Validate() error {
	for _, p := range c.Methods {
		if err := schema.ValidatePattern(p); err != nil {
			return fmt.Errorf("msglog: message log method %q: %w", p, err)
		}
	}
	if c.MaxBytes < 0 {
		return fmt.Errorf("msglog: message log max bytes must not be negative, got %d", c.MaxBytes)
	}
	for _, f := range c.Redact {
		if f == "" {
			return errors.New("msglog: empty field name in message log redact list")
		}
	}
	return nil
}

// Log is a message log's [Config], ready to use. It is safe for
// concurrent use; it only reads its configuration.
type Log struct {
	methods []string
	max     int
	redact  map[string]bool // lower case
}

// New returns the log c describes; it fails when [Config.Validate] does.
func New(c Config) (*Log, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	red := make(map[string]bool, len(c.Redact))
	for _, f := range c.Redact {
		red[strings.ToLower(f)] = true
	}
	return &Log{methods: c.Methods, max: c.MaxBytes, redact: red}, nil
}

// Logs reports whether the bodies of method's calls are logged; a nil Log
// logs none.
func (l *Log) Logs(method string) bool {
	if l == nil {
		return false
	}
	for _, p := range l.methods {
		if schema.MatchMethod(p, method) {
			return true
		}
	}
	return false
}

// Body returns the attributes of a logged body: the body as JSON, with
// the redacted fields hidden, or, when that is longer than the cap, its
// first bytes as a string, the flag truncated and the full size.
func (l *Log) Body(raw json.RawMessage) []slog.Attr {
	if len(raw) == 0 {
		return []slog.Attr{slog.Any("body", nil)}
	}
	out, err := redactJSON(raw, l.redact)
	if err != nil {
		// The ingress parsed the body before, so this does not happen
		// there; never log what could not be redacted.
		return []slog.Attr{slog.String("body_error", "not logged: "+err.Error())}
	}
	if len(out) <= l.max {
		return []slog.Attr{slog.Any("body", json.RawMessage(out))}
	}
	cut := l.max
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return []slog.Attr{
		slog.String("body", string(out[:cut])),
		slog.Bool("truncated", true),
		slog.Int("body_bytes", len(out)),
	}
}

// HideFailedValue returns e, or, when e is an invalid-params answer about
// a member the log hides, e with its message and reason (which may quote
// the value that failed, e.g. a pattern mismatch) replaced. The client
// still gets e as it was; only what toolbus keeps is changed. A nil Log
// hides nothing.
func (l *Log) HideFailedValue(e *schema.Error) *schema.Error {
	if l == nil || len(l.redact) == 0 || e.Code != schema.CodeInvalidParams || len(e.Data) == 0 {
		return e
	}
	var data map[string]any
	if json.Unmarshal(e.Data, &data) != nil {
		return e
	}
	field, _ := data["field"].(string)
	hit := false
	for _, seg := range strings.Split(field, "/") {
		if l.redact[strings.ToLower(seg)] {
			hit = true
			break
		}
	}
	if !hit {
		return e
	}
	data["reason"] = Redacted
	out := *e
	out.Message = "invalid params: " + field + ": " + Redacted
	out.Data, _ = json.Marshal(data)
	return &out
}

// redactJSON returns raw with the value of every member named in fields
// (lower case) replaced, at any depth. Numbers keep their spelling.
func redactJSON(raw json.RawMessage, fields map[string]bool) ([]byte, error) {
	if len(fields) == 0 {
		return raw, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if !redactValue(v, fields) {
		return raw, nil // nothing to hide: log the body as it came
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// redactValue hides the named members inside v and reports whether it
// hid any.
func redactValue(v any, fields map[string]bool) bool {
	hid := false
	switch t := v.(type) {
	case map[string]any:
		for k, inner := range t {
			if fields[strings.ToLower(k)] {
				t[k] = Redacted
				hid = true
				continue
			}
			if redactValue(inner, fields) {
				hid = true
			}
		}
	case []any:
		for _, inner := range t {
			if redactValue(inner, fields) {
				hid = true
			}
		}
	}
	return hid
}
