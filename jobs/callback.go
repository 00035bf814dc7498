package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/webhook"
	"github.com/toolbus/toolbus/schema"
)

// A completion callback carries three headers: [schema.HeaderTimestamp],
// the time it was signed, in Unix seconds (each attempt is signed afresh);
// [schema.HeaderSignature], "v1=" and the lower-case hex HMAC-SHA256, under
// the callback secret, of the timestamp, a dot and the raw body ([Sign]);
// and [schema.HeaderJobID], so that a receiver can drop a repeated delivery
// before parsing the body. The sending, retrying and signing are the
// outbound webhook sender's ([webhook.Sender], [webhook.HMAC]).

// ReplayWindow is how far from its receiver's clock a callback's timestamp
// may be for [Verify] to accept it, as this package advises receivers: an
// attempt is signed when it is sent, so a delivery that took longer is a
// replay or a clock that is off.
const ReplayWindow = 5 * time.Minute

// Errors of [Verify], which wraps one of them with the detail.
var (
	// ErrSignature: the signature or timestamp header is missing or
	// malformed, or the signature does not match.
	ErrSignature = webhook.ErrSignature
	// ErrStale: the timestamp is outside the replay window.
	ErrStale = webhook.ErrStale
)

// signer is the scheme of completion callbacks under secret.
func signer(secret []byte) webhook.HMAC {
	return webhook.HMAC{Secret: secret, SignatureHeader: schema.HeaderSignature, TimestampHeader: schema.HeaderTimestamp}
}

// Sign returns the value of [schema.HeaderSignature] for body sent at timestamp
// (Unix seconds, the value of [schema.HeaderTimestamp]) under secret:
// "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body)).
func Sign(secret []byte, timestamp int64, body []byte) string {
	return signer(secret).Signature(timestamp, body)
}

// Verify checks a callback as a receiver got it: h its headers, body its
// raw body, now the receiver's clock. It accepts the callback when a v1
// signature of [schema.HeaderSignature] (a comma-separated list is accepted)
// matches, compared in constant time, and the timestamp is within window
// of now ([ReplayWindow] is the advised window). It returns an error
// wrapping [ErrSignature] or [ErrStale] otherwise.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, window time.Duration) error {
	return signer(secret).Verify(h, body, now, window)
}

// Callback delivery bounds.
const (
	callbackLease       = 30 * time.Second
	callbackConcurrency = 16
	callbackFetchWait   = 2 * time.Second
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
	// sender posts through the service's guard, follows no redirects,
	// gives up an attempt after the callback timeout and retries as the
	// service is configured.
	sender *webhook.Sender
	sign   webhook.Signer

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
	sender, err := webhook.New(s.guard, webhook.WithUserAgent("toolbus-callback"), webhook.WithTimeout(s.cfg.callbackTimeout),
		webhook.WithRetry(webhook.Retry{Attempts: s.cfg.callbackAttempts, Min: s.cfg.callbackMin, Max: s.cfg.callbackMax}))
	if err != nil {
		return fmt.Errorf("jobs: callbacks: %w", err)
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
	nctx, cancel := context.WithCancel(context.Background())
	n := &notifier{s: s, cons: cons, sender: sender, sign: signer(s.cfg.callbackSecret), stop: make(chan struct{}), ctx: nctx, cancel: cancel}
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
	defer n.sender.Close()
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
	err = n.sender.Deliver(ctx, webhook.Delivery{
		URL:    rec.NotifyURL,
		Body:   payload,
		Header: http.Header{schema.HeaderJobID: {id}},
		Sign:   n.sign,
		Tried:  rec.Callback.Attempts,
		Wait:   func(_ context.Context, d time.Duration) bool { return n.wait(msg, d) },
		Report: func(a webhook.Attempt) { n.record(ctx, id, a) },
	})
	if errors.Is(err, webhook.ErrStopped) {
		_ = msg.Nak()
		return
	}
	_ = msg.Ack()
}

// record writes attempt a of the callback of job id on the job, and logs
// a failure.
func (n *notifier) record(ctx context.Context, id string, a webhook.Attempt) {
	at := a.At.UTC()
	_, err := n.s.st.update(ctx, id, func(r *stored) error {
		if r.Callback == nil || r.Callback.State != schema.JobCallbackPending {
			return errSkip
		}
		r.Callback.Attempts = a.N
		switch {
		case a.Err == nil:
			r.Callback.State = schema.JobCallbackDelivered
			r.Callback.DeliveredAt = &at
		default:
			r.Callback.Failures = append(r.Callback.Failures, schema.JobCallbackFailure{At: at, Error: string(a.Class)})
			if a.Last {
				r.Callback.State = schema.JobCallbackFailed
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errSkip) {
		n.s.log.Warn("record a callback attempt", "id", id, "attempt", a.N, "err", err)
	}
	if a.Err != nil {
		// The error may quote the receiver: it goes to the operator's
		// log, and the job's record holds only its class.
		n.s.log.Info("callback failed", "id", id, "attempt", a.N, "class", a.Class, "err", a.Err)
	}
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

// fetchLoop fetches from cons while a slot of sem is free and hands each
// message to handle, which must release its slot; it returns when stop is
// closed. Messages fetched after stop are given back at once.
func fetchLoop(ctx context.Context, stop <-chan struct{}, cons jetstream.Consumer, sem chan struct{}, wait time.Duration, log *slog.Logger, handle func(jetstream.Msg)) {
	// sctx ends a fetch in progress as soon as stop is closed.
	sctx, scancel := untilClosed(ctx, stop)
	defer scancel()
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

// untilClosed returns a context that ends with ctx or once stop is closed,
// whichever comes first. Call cancel when done with it.
func untilClosed(ctx context.Context, stop <-chan struct{}) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-sctx.Done():
		}
	}()
	return sctx, cancel
}
