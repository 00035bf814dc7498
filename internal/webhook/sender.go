package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/toolbus/toolbus/internal/egress"
)

// Defaults and bounds of a [Sender].
const (
	// DefaultTimeout bounds one attempt, from connecting to the end of its
	// answer ([WithTimeout]).
	DefaultTimeout = 10 * time.Second
	// DefaultUserAgent is the User-Agent of a sender made without
	// [WithUserAgent].
	DefaultUserAgent = "toolbus"
	// MaxAnswerBytes is the most of an answer's body a sender reads; the
	// body is discarded, and read only so that its connection can carry
	// the next attempt.
	MaxAnswerBytes = 64 << 10
)

// Sender POSTs deliveries through an egress guard. Make one with [New]
// and release its connections with [Sender.Close]. It is safe for
// concurrent use.
type Sender struct {
	client *http.Client
	agent  string
	retry  Retry
	now    func() time.Time
}

// Option configures [New].
type Option func(*Sender) error

// WithTimeout bounds one attempt, from connecting to the end of its
// answer (default [DefaultTimeout]); an attempt that runs out of it fails
// with class "timeout". d must be more than 0.
func WithTimeout(d time.Duration) Option {
	return func(s *Sender) error {
		if d <= 0 {
			return fmt.Errorf("webhook: timeout must be more than 0, got %v", d)
		}
		s.client.Timeout = d
		return nil
	}
}

// WithRetry sets how many attempts a delivery gets and the waits between
// them (default one attempt, no retry); see [Retry] for what it accepts.
func WithRetry(r Retry) Option {
	return func(s *Sender) error {
		if err := r.validate(); err != nil {
			return err
		}
		s.retry = r
		return nil
	}
}

// WithUserAgent sets the User-Agent of every attempt (default
// [DefaultUserAgent]), which tells a receiver what is calling.
func WithUserAgent(agent string) Option {
	return func(s *Sender) error {
		if agent == "" {
			return errors.New("webhook: empty User-Agent")
		}
		s.agent = agent
		return nil
	}
}

// WithClock makes the sender read the time from now (default time.Now):
// the time each attempt is signed at, and the time of its [Attempt].
func WithClock(now func() time.Time) Option {
	return func(s *Sender) error {
		if now == nil {
			return errors.New("webhook: nil clock")
		}
		s.now = now
		return nil
	}
}

// New returns a sender whose every connection goes through guard; it
// fails on an invalid option, naming it.
func New(guard *egress.Guard, opts ...Option) (*Sender, error) {
	if guard == nil {
		return nil, errors.New("webhook: a sender needs an egress guard")
	}
	client := guard.Client()
	client.Timeout = DefaultTimeout
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	s := &Sender{client: client, agent: DefaultUserAgent, retry: Retry{Attempts: 1}, now: time.Now}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Close closes the connections the sender keeps open between attempts.
// A sender closed is still usable: it opens new ones. A nil Sender is
// left as it is.
func (s *Sender) Close() {
	if s != nil {
		s.client.CloseIdleConnections()
	}
}

// Delivery is one body to POST to one URL, and what its caller wants to
// know and decide of its attempts.
type Delivery struct {
	// URL is the receiver's http or https URL.
	URL string
	// Body is sent as is, as application/json.
	Body []byte
	// Header holds headers of the caller's own (such as the job a
	// callback is about, or an A2A config's token) sent with every
	// attempt; the sender sets Content-Type and User-Agent over them.
	Header http.Header
	// Sign signs every attempt afresh; nil sends it unsigned.
	Sign Signer
	// Tried is how many attempts were made before, by this process or
	// another that handed the delivery on; Deliver goes on from there.
	Tried int
	// Wait, when set, waits d between two attempts and reports whether
	// to go on; false stops the delivery ([ErrStopped]). Nil waits on a
	// timer while ctx lasts. A caller sets it to do something meanwhile
	// (keep a lease of the delivery) or to stop on its own signal.
	Wait func(ctx context.Context, d time.Duration) bool
	// Report, when set, is called after every attempt, before the wait
	// for the next.
	Report func(Attempt)
}

// send makes one attempt of d: it signs it at the time it is sent, POSTs
// it and reads at most [MaxAnswerBytes] of the answer. Any answer but
// 2xx is a failure of its [egress.StatusClass]; every error it returns
// has a class for [egress.Classify].
func (s *Sender) send(ctx context.Context, d *Delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return &egress.Error{Class: egress.ClassFailed, Err: err}
	}
	for k, vs := range d.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.agent)
	if d.Sign != nil {
		d.Sign.Sign(req.Header, d.Body, s.now())
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxAnswerBytes))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &egress.Error{Class: egress.StatusClass(resp.StatusCode), Err: fmt.Errorf("the receiver answered %s", resp.Status)}
	}
	return nil
}
