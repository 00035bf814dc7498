package ingress

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/schema"
)

// writeEvents answers a message as server-sent events: every answer the
// ingress has already, then each dispatched call's answer the moment the
// dispatcher emits it, then a final "done" event. Comment lines keep the
// stream alive while calls run. Nothing to answer is 204, as for a JSON
// answer.
func (s *Server) writeEvents(ctx context.Context, w http.ResponseWriter, p *plan) outcome {
	o := outcome{status: http.StatusOK}
	if len(p.out) == 0 {
		s.stream(ctx, p.calls, p.charge, func(int, schema.Response) {})
		o.status = http.StatusNoContent
		w.WriteHeader(http.StatusNoContent)
		return o
	}
	h := w.Header()
	h.Set("Content-Type", EventStream)
	h.Set("Cache-Control", "no-store")
	// Proxies that buffer responses would hold the events back.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	ev := eventWriter{w: w, rc: http.NewResponseController(w)}
	ev.flush()

	pending := make([]bool, len(p.out))
	for _, slot := range p.slots {
		if slot >= 0 {
			pending[slot] = true
		}
	}
	for i, r := range p.out {
		if !pending[i] {
			s.event(ctx, &ev, &o, r)
		}
	}
	if len(p.calls) > 0 {
		// The channel holds every answer, so emit never blocks the
		// dispatcher on a slow client.
		answers := make(chan response, p.answers())
		go func() {
			defer close(answers)
			s.stream(ctx, p.calls, p.charge, func(i int, r schema.Response) {
				answers <- response{r, p.out[p.slots[i]].v1}
			})
		}()
		heartbeat := time.NewTicker(s.cfg.heartbeat)
		defer heartbeat.Stop()
	loop:
		for {
			select {
			case r, ok := <-answers:
				if !ok {
					break loop
				}
				s.event(ctx, &ev, &o, r)
			case <-heartbeat.C:
				ev.comment("ping")
			}
		}
	}
	ev.done(len(p.out))
	o.bytes = ev.n
	if ev.err != nil && o.reason == "" {
		o.reason = "write events: " + ev.err.Error()
	}
	return o
}

// event writes one answer as an event.
func (s *Server) event(ctx context.Context, ev *eventWriter, o *outcome, r response) {
	if r.Error != nil {
		o.failed++
	}
	b, err := appendResponse(nil, r)
	if err != nil {
		o.reason = "encode response: " + err.Error()
		b, _ = schema.Response{ID: r.ID, Error: internalError()}.AppendJSON(nil)
	}
	ev.data(b)
}

// eventWriter writes server-sent events and flushes after each. After the
// first failed write it writes nothing more: the client is gone, and the
// request's context ends the calls.
type eventWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	n   int
	err error
}

func (e *eventWriter) write(b []byte) {
	if e.err != nil {
		return
	}
	n, err := e.w.Write(b)
	e.n += n
	if err == nil {
		err = e.flush()
	}
	e.err = err
}

func (e *eventWriter) flush() error {
	err := e.rc.Flush()
	if err == http.ErrNotSupported {
		return nil // nothing to flush: the answer goes out at the end
	}
	return err
}

// data writes one unnamed event (type "message") whose data is a JSON text.
// JSON may hold line breaks between tokens, never inside strings, so each
// line becomes a data line and a client joining them with "\n" gets the
// same JSON value.
func (e *eventWriter) data(b []byte) {
	var buf bytes.Buffer
	buf.Grow(len(b) + 16)
	for {
		buf.WriteString("data: ")
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			buf.Write(b)
			break
		}
		buf.Write(b[:i])
		buf.WriteByte('\n')
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++
		}
		b = b[i+1:]
	}
	buf.WriteString("\n\n")
	e.write(buf.Bytes())
}

// comment writes a comment line, which clients ignore.
func (e *eventWriter) comment(text string) {
	e.write([]byte(": " + text + "\n\n"))
}

// done writes the final event, carrying how many answers came before it.
func (e *eventWriter) done(answers int) {
	e.write([]byte("event: done\ndata: {\"answers\":" + strconv.Itoa(answers) + "}\n\n"))
}
