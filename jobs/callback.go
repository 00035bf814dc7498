package jobs

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
)

// A completion callback carries three headers: [schema.HeaderTimestamp],
// the time it was signed, in Unix seconds (each attempt is signed afresh);
// [schema.HeaderSignature], "v1=" and the lower-case hex HMAC-SHA256, under
// the callback secret, of the timestamp, a dot and the raw body ([Sign]);
// and [schema.HeaderJobID], so that a receiver can drop a repeated delivery
// before parsing the body.

// ReplayWindow is how far from its receiver's clock a callback's timestamp
// may be for [Verify] to accept it, as this package advises receivers: an
// attempt is signed when it is sent, so a delivery that took longer is a
// replay or a clock that is off.
const ReplayWindow = 5 * time.Minute

// Errors of [Verify], which wraps one of them with the detail.
var (
	// ErrSignature: the signature or timestamp header is missing or
	// malformed, or the signature does not match.
	ErrSignature = errors.New("jobs: callback signature is not valid")
	// ErrStale: the timestamp is outside the replay window.
	ErrStale = errors.New("jobs: callback timestamp is outside the replay window")
)

// Sign returns the value of [schema.HeaderSignature] for body sent at timestamp
// (Unix seconds, the value of [schema.HeaderTimestamp]) under secret:
// "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body)).
func Sign(secret []byte, timestamp int64, body []byte) string {
	return "v1=" + hex.EncodeToString(mac(secret, strconv.FormatInt(timestamp, 10), body))
}

func mac(secret []byte, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a callback as a receiver got it: h its headers, body its
// raw body, now the receiver's clock. It accepts the callback when a v1
// signature of [schema.HeaderSignature] (a comma-separated list is accepted)
// matches, compared in constant time, and the timestamp is within window
// of now ([ReplayWindow] is the advised window). It returns an error
// wrapping [ErrSignature] or [ErrStale] otherwise.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, window time.Duration) error {
	ts := h.Get(schema.HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != ts {
		return fmt.Errorf("%w: the %s header %q is not Unix seconds", ErrSignature, schema.HeaderTimestamp, ts)
	}
	want := mac(secret, ts, body)
	matched := false
	for sig := range strings.SplitSeq(h.Get(schema.HeaderSignature), ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(sig), "v1=")
		got, err := hex.DecodeString(v)
		if ok && err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !matched {
		return fmt.Errorf("%w: no v1 signature in the %s header matches the timestamp and body under the secret", ErrSignature, schema.HeaderSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)).Abs(); d > window {
		return fmt.Errorf("%w: signed %v from now, more than %v", ErrStale, d.Round(time.Second), window)
	}
	return nil
}

// Callback delivery bounds.
const (
	callbackLease       = 30 * time.Second
	callbackConcurrency = 16
	callbackFetchWait   = 2 * time.Second
	maxCallbackErrBytes = 512
)

// notifier delivers completion callbacks. Every service with a callback
// secret runs one, and they share one durable consumer, so each callback is
// sent by one of them; one that dies mid-delivery leaves the message to be
// redelivered to another, which carries on from the attempts recorded on
// the job. A callback may therefore arrive more than once: receivers should
// treat the job id as the key.
type notifier struct {
	s    *Service
	cons jetstream.Consumer
	// client connects through the service's guard only, follows no
	// redirects and gives up after the callback timeout.
	client *http.Client

	stop chan struct{}
	wg   sync.WaitGroup
	// ctx ends the deliveries when Shutdown runs out of time; it spans the
	// notifier's life, not a request.
	ctx    context.Context
	cancel context.CancelFunc
}

// Start begins delivering completion callbacks when the service has a
// callback secret ([WithCallbackSecret]); otherwise it does nothing. ctx
// bounds setting up the consumer only.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("jobs: service is shut down")
	}
	if s.notifier != nil || s.cfg.callbackSecret == nil {
		return nil
	}
	cons, err := s.st.js.CreateOrUpdateConsumer(ctx, s.st.names.stream, jetstream.ConsumerConfig{
		Durable:       "notify",
		Description:   "toolbus completion callbacks",
		FilterSubject: s.st.names.notifySubject(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       callbackLease,
		MaxAckPending: 1000,
	})
	if err != nil {
		return fmt.Errorf("jobs: callback consumer: %w", err)
	}
	client := s.guard.Client()
	client.Timeout = s.cfg.callbackTimeout
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	nctx, cancel := context.WithCancel(context.Background())
	n := &notifier{s: s, cons: cons, client: client, stop: make(chan struct{}), ctx: nctx, cancel: cancel}
	n.wg.Add(1)
	go n.loop()
	s.notifier = n
	return nil
}

// Shutdown stops delivering callbacks: it fetches no more, lets deliveries
// in progress finish their current attempt within ctx, and leaves the rest
// to other services or a later start. It does not close the connection.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	n := s.notifier
	s.mu.Unlock()
	if n == nil {
		return nil
	}
	n.once()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	defer n.client.CloseIdleConnections()
	select {
	case <-done:
		n.cancel()
		return nil
	case <-ctx.Done():
		n.cancel()
		<-done
		return fmt.Errorf("jobs: shutdown: callbacks still in progress: %w", ctx.Err())
	}
}

func (n *notifier) once() {
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
}

func (n *notifier) loop() {
	defer n.wg.Done()
	sem := make(chan struct{}, callbackConcurrency)
	fetchLoop(n.ctx, n.stop, n.cons, sem, callbackFetchWait, n.s.log, func(msg jetstream.Msg) {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer func() { <-sem }()
			n.deliver(msg)
		}()
	})
}

// deliver sends the callback of the job a notify message names, retrying
// with exponential backoff, and records every attempt on the job.
func (n *notifier) deliver(msg jetstream.Msg) {
	log := n.s.log
	var entry idemEntry
	if err := json.Unmarshal(msg.Data(), &entry); err != nil || !validID(entry.ID) {
		log.Error("undecodable callback message", "err", err)
		_ = msg.Term()
		return
	}
	id := entry.ID
	ctx := n.ctx
	rec, _, err := n.s.st.get(ctx, id)
	if errors.Is(err, errNotFound) {
		_ = msg.Ack()
		return
	}
	if err != nil {
		log.Warn("read a job for its callback", "id", id, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if rec.Callback == nil || rec.Callback.State != schema.JobCallbackPending || !rec.State.Final() {
		_ = msg.Ack()
		return
	}
	body := rec.public()
	body.Callback = nil
	payload, err := json.Marshal(body)
	if err != nil {
		log.Error("encode a callback", "id", id, "err", err)
		_ = msg.Term()
		return
	}
	attempt := rec.Callback.Attempts
	for attempt < n.s.cfg.callbackAttempts {
		if attempt > 0 && !n.wait(msg, backoff(attempt, n.s.cfg.callbackMin, n.s.cfg.callbackMax)) {
			_ = msg.Nak()
			return
		}
		attempt++
		sendErr := n.post(ctx, rec.NotifyURL, id, payload)
		class := egress.Classify(sendErr)
		now := time.Now().UTC()
		_, err := n.s.st.update(ctx, id, func(r *stored) error {
			if r.Callback == nil || r.Callback.State != schema.JobCallbackPending {
				return errSkip
			}
			r.Callback.Attempts = attempt
			switch {
			case sendErr == nil:
				r.Callback.State = schema.JobCallbackDelivered
				r.Callback.DeliveredAt = &now
			default:
				r.Callback.Failures = append(r.Callback.Failures, schema.JobCallbackFailure{At: now, Error: string(class)})
				if attempt >= n.s.cfg.callbackAttempts {
					r.Callback.State = schema.JobCallbackFailed
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errSkip) {
			log.Warn("record a callback attempt", "id", id, "attempt", attempt, "err", err)
		}
		if sendErr == nil {
			_ = msg.Ack()
			return
		}
		// The error may quote the receiver: it goes to the operator's
		// log, and the job's record holds only its class.
		log.Info("callback failed", "id", id, "attempt", attempt, "class", class, "err", sendErr)
	}
	_ = msg.Ack()
}

// wait sleeps d while keeping msg's lease, and reports false when the
// notifier is stopping.
func (n *notifier) wait(msg jetstream.Msg, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(callbackLease / 3)
	defer tick.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-tick.C:
			_ = msg.InProgress()
		case <-n.stop:
			return false
		}
	}
}

// post sends one callback, signed at the time it is sent; any answer but
// 2xx is a failure of class "status N".
func (n *notifier) post(ctx context.Context, target, id string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, callbackLease/2)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolbus-callback")
	req.Header.Set(schema.HeaderJobID, id)
	req.Header.Set(schema.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(schema.HeaderSignature, Sign(n.s.cfg.callbackSecret, ts, body))
	resp, err := n.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &egress.Error{Class: egress.StatusClass(resp.StatusCode), Err: fmt.Errorf("callback answered %s", resp.Status)}
	}
	return nil
}

// backoff is the wait before attempt+1: min doubled per attempt after the
// first, at most max.
func backoff(attempt int, min, max time.Duration) time.Duration {
	d := min
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}

// fetchLoop fetches from cons while a slot of sem is free and hands each
// message to handle, which must release its slot; it returns when stop is
// closed. Messages fetched after stop are given back at once.
func fetchLoop(ctx context.Context, stop <-chan struct{}, cons jetstream.Consumer, sem chan struct{}, wait time.Duration, log *slog.Logger, handle func(jetstream.Msg)) {
	// sctx ends a fetch in progress as soon as stop is closed.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	go func() {
		select {
		case <-stop:
			scancel()
		case <-sctx.Done():
		}
	}()
	for {
		select {
		case sem <- struct{}{}:
		case <-stop:
			return
		}
		n := 1
		for n < cap(sem) {
			select {
			case sem <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		fctx, cancel := context.WithTimeout(sctx, wait)
		batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				got++
				select {
				case <-stop:
					_ = msg.Nak()
					<-sem
				default:
					handle(msg)
				}
			}
			err = batch.Error()
		}
		cancel()
		for range n - got {
			<-sem
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) &&
			!errors.Is(err, jetstream.ErrNoMessages) {
			log.Warn("fetch", "err", err)
			select {
			case <-time.After(time.Second):
			case <-stop:
				return
			}
		}
	}
}
