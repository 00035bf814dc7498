package bus

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/schema"
)

// CallMsg returns the NATS message of a call: the encoded envelope, with the
// deadline in [schema.HeaderDeadline] (none when deadline is zero) and the
// trace context in [schema.HeaderTraceparent] when traceparent is not empty.
// The caller sets Reply, or leaves it empty for a notification, and sets
// [schema.HeaderCallID] when it may cancel the call.
func CallMsg(subject string, env *schema.CallEnvelope, deadline time.Time, traceparent string) (*nats.Msg, error) {
	data, err := schema.MarshalCall(env)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if !deadline.IsZero() {
		msg.Header.Set(schema.HeaderDeadline, schema.FormatDeadline(deadline))
	}
	if traceparent != "" {
		msg.Header.Set(schema.HeaderTraceparent, traceparent)
	}
	return msg, nil
}

// ReadCall decodes a call message and its deadline (zero when the message
// carries none).
func ReadCall(msg *nats.Msg) (*schema.CallEnvelope, time.Time, error) {
	env, err := schema.UnmarshalCall(msg.Data)
	if err != nil {
		return nil, time.Time{}, err
	}
	var deadline time.Time
	if v := msg.Header.Get(schema.HeaderDeadline); v != "" {
		if deadline, err = schema.ParseDeadline(v); err != nil {
			return nil, time.Time{}, err
		}
	}
	return env, deadline, nil
}

// Reply answers a call message with a reply envelope. It does nothing for a
// notification (a message without a reply subject).
func Reply(msg *nats.Msg, r *schema.ReplyEnvelope) error { return ReplyWith(msg, r, nil) }

// ReplyWith is [Reply] with the headers h on the reply, when not nil.
func ReplyWith(msg *nats.Msg, r *schema.ReplyEnvelope, h nats.Header) error {
	if msg.Reply == "" {
		return nil
	}
	data, err := schema.MarshalReply(r)
	if err != nil {
		return err
	}
	if h != nil {
		return msg.RespondMsg(&nats.Msg{Subject: msg.Reply, Data: data, Header: h})
	}
	return msg.Respond(data)
}

// ErrNoResponders means no worker is subscribed to the call's subject.
var ErrNoResponders = nats.ErrNoResponders

// noRespondersStatus is the Status header of the message NATS sends to a
// publisher's reply subject when nobody was subscribed to the subject it
// published on.
const noRespondersStatus = "503"

// NoResponders reports whether msg is the message NATS sends, on the reply
// subject of a message it delivered to nobody, to say that nobody was
// subscribed to that message's subject: an empty body with the header
// Status: 503.
func NoResponders(msg *nats.Msg) bool {
	return len(msg.Data) == 0 && msg.Header != nil && msg.Header.Get("Status") == noRespondersStatus
}

// ReadReply decodes a worker's reply. A NATS status message (such as "no
// responders") is reported as an error, never as an empty success.
func ReadReply(msg *nats.Msg) (*schema.ReplyEnvelope, error) {
	if NoResponders(msg) {
		return nil, ErrNoResponders
	}
	if len(msg.Data) == 0 && msg.Header != nil {
		if status := msg.Header.Get("Status"); status != "" {
			return nil, fmt.Errorf("bus: nats status %s: %s", status, msg.Header.Get("Description"))
		}
	}
	r, err := schema.UnmarshalReply(msg.Data)
	if err != nil {
		if errors.Is(err, schema.ErrEmptyReply) {
			return nil, err
		}
		// The subject is an inbox of toolbus's: it means nothing to an
		// agent, who may see this error's text.
		return nil, fmt.Errorf("bus: reply: %w", err)
	}
	return r, nil
}

// HeaderCarrier lets a trace propagator read and write the headers of a NATS
// message. Its methods are those of OpenTelemetry's
// propagation.TextMapCarrier, so
//
//	propagation.TraceContext{}.Inject(ctx, bus.HeaderCarrier(msg.Header))
//
// puts the W3C trace context of ctx into msg, and Extract reads it back,
// without this package depending on OpenTelemetry.
//
// Unlike http.Header, nats.Header does not canonicalise names, and NATS
// keeps their case on the wire: the lower-case names a W3C propagator uses,
// "traceparent" ([schema.HeaderTraceparent]) and "tracestate", are stored
// and sent exactly so.
// Get still finds a header whose name differs only in case, since HTTP,
// where these headers come from, ignores case.
//
// A nil HeaderCarrier reads as empty; Set on it panics, as on a nil map.
type HeaderCarrier nats.Header

// Get returns the first value of key, or, when there is no header of that
// exact name, of a header whose name equals key but for case; "" when there
// is none.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set replaces the values of key with value, keeping key's case.
func (c HeaderCarrier) Set(key, value string) {
	c[key] = []string{value}
}

// Keys returns the names of the headers, in no particular order.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
