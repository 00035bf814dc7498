package ingress

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/toolbus/toolbus/ingress/msglog"
	"github.com/toolbus/toolbus/schema"
)

// WithMessageLog turns on logging of the bodies that pass through the
// ingress (see [msglog.Config]): each matching call's params as it is
// dispatched and its result or error as it is answered, one line each at
// level INFO, carrying the call's id, method and trace id. Its redaction
// list also hides a failed value in the recent errors of the dashboard. It
// fails when [msglog.Config.Validate] does.
func WithMessageLog(m msglog.Config) Option {
	return func(c *config) error {
		l, err := msglog.New(m)
		if err != nil {
			return err
		}
		c.msglog = l
		return nil
	}
}

// logMessage writes one message log line when the log is on for method.
func (s *Server) logMessage(ctx context.Context, direction string, id json.RawMessage, method string, body json.RawMessage) {
	m := s.cfg.msglog
	if !m.Logs(method) || !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := logCallAttrs(ctx, id, method)
	attrs = append(attrs, slog.String("direction", direction))
	attrs = append(attrs, m.Body(body)...)
	s.log.LogAttrs(ctx, slog.LevelInfo, "message", attrs...)
}

// errorBody is the logged form of an error answer.
func errorBody(e *schema.Error) json.RawMessage {
	b, err := json.Marshal(e)
	if err != nil {
		return nil
	}
	return b
}
