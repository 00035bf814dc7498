package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"github.com/toolbus/toolbus/schema"
)

// DefaultMessageLogMaxBytes is the longest body a message log line holds
// when [MessageLog.MaxBytes] is zero.
const DefaultMessageLogMaxBytes = 4096

// redacted replaces the value of every redacted field.
const redacted = "[REDACTED]"

// MessageLog turns on logging of the bodies that pass through the ingress:
// each matching call's params as it is dispatched and its result or error
// as it is answered, one line each at level INFO, carrying the call's id,
// method and trace id. Bodies may hold secrets and personal data: log only
// the methods you need, and list the fields to hide.
type MessageLog struct {
	// Methods lists the methods to log: names, or patterns with * for one
	// token and > for the rest (e.g. "math.*", ">" for every method). None
	// means none.
	Methods []string
	// MaxBytes caps the logged form of one body (message_log_max_bytes);
	// a longer one is cut there and marked truncated, with its full size.
	// Zero means [DefaultMessageLogMaxBytes].
	MaxBytes int
	// Redact names object members whose values are replaced by
	// "[REDACTED]" at any depth, compared without regard to case (e.g.
	// "password", "token", "authorization").
	Redact []string
}

// Validate reports what is wrong with m: a pattern outside the method
// grammar, a negative MaxBytes, or an empty field name to redact.
func (m MessageLog) Validate() error {
	for _, p := range m.Methods {
		if err := schema.ValidatePattern(p); err != nil {
			return fmt.Errorf("ingress: message log method %q: %w", p, err)
		}
	}
	if m.MaxBytes < 0 {
		return fmt.Errorf("ingress: message log max bytes must not be negative, got %d", m.MaxBytes)
	}
	for _, f := range m.Redact {
		if f == "" {
			return fmt.Errorf("ingress: empty field name in message log redact list")
		}
	}
	return nil
}

// WithMessageLog turns the message log on (see [MessageLog]); it fails
// when [MessageLog.Validate] does.
func WithMessageLog(m MessageLog) Option {
	return func(c *config) error {
		if err := m.Validate(); err != nil {
			return err
		}
		if m.MaxBytes == 0 {
			m.MaxBytes = DefaultMessageLogMaxBytes
		}
		red := make(map[string]bool, len(m.Redact))
		for _, f := range m.Redact {
			red[strings.ToLower(f)] = true
		}
		c.msglog = &msgLog{methods: m.Methods, max: m.MaxBytes, redact: red}
		return nil
	}
}

type msgLog struct {
	methods []string
	max     int
	redact  map[string]bool
}

func (m *msgLog) logs(method string) bool {
	for _, p := range m.methods {
		if schema.MatchMethod(p, method) {
			return true
		}
	}
	return false
}

// logMessage writes one message log line when the log is on for method.
func (s *Server) logMessage(ctx context.Context, direction string, id json.RawMessage, method string, body json.RawMessage) {
	m := s.cfg.msglog
	if m == nil || !m.logs(method) || !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := logCallAttrs(ctx, id, method)
	attrs = append(attrs, slog.String("direction", direction))
	attrs = append(attrs, m.body(body)...)
	s.log.LogAttrs(ctx, slog.LevelInfo, "message", attrs...)
}

// body returns the attributes of a logged body: the body as JSON, with
// the redacted fields hidden, or, when that is longer than the cap, its
// first bytes as a string, the flag truncated and the full size.
func (m *msgLog) body(raw json.RawMessage) []slog.Attr {
	if len(raw) == 0 {
		return []slog.Attr{slog.Any("body", nil)}
	}
	out, err := redactJSON(raw, m.redact)
	if err != nil {
		// The ingress parsed the body before, so this does not happen;
		// never log what could not be redacted.
		return []slog.Attr{slog.String("body_error", "not logged: "+err.Error())}
	}
	if len(out) <= m.max {
		return []slog.Attr{slog.Any("body", json.RawMessage(out))}
	}
	cut := m.max
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return []slog.Attr{
		slog.String("body", string(out[:cut])),
		slog.Bool("truncated", true),
		slog.Int("body_bytes", len(out)),
	}
}

// errorBody is the logged form of an error answer.
func errorBody(e *schema.Error) json.RawMessage {
	b, err := json.Marshal(e)
	if err != nil {
		return nil
	}
	return b
}

// hideFailedValue returns e, or, when e is an invalid-params answer about
// a member the log hides, e with its message and reason (which may quote
// the value that failed, e.g. a pattern mismatch) replaced. The client
// still gets e as it was; only what toolbus keeps is changed.
func (m *msgLog) hideFailedValue(e *schema.Error) *schema.Error {
	if m == nil || len(m.redact) == 0 || e.Code != schema.CodeInvalidParams || len(e.Data) == 0 {
		return e
	}
	var data map[string]any
	if json.Unmarshal(e.Data, &data) != nil {
		return e
	}
	field, _ := data["field"].(string)
	hit := false
	for _, seg := range strings.Split(field, "/") {
		if m.redact[strings.ToLower(seg)] {
			hit = true
			break
		}
	}
	if !hit {
		return e
	}
	data["reason"] = redacted
	out := *e
	out.Message = "invalid params: " + field + ": " + redacted
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
				t[k] = redacted
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
