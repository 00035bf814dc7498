package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
)

// Service answers the rpc.jobs.* methods on top of JetStream and, once
// started, delivers completion callbacks. It keeps no state of its own, so
// any number of services (one per ingress replica) can share a cluster's
// jobs. Its methods are safe for concurrent use.
type Service struct {
	st  *store
	cfg config
	log *slog.Logger
	// guard judges notify_url at submit and every callback connection.
	guard *egress.Guard

	mu       sync.Mutex
	notifier *notifier
	closed   bool

	served    servedFilters
	ids       idSource
	collector *statsCollector
	// hub follows records for every waiter with one watch; subs counts
	// the subscriptions open per caller.
	hub  *hub
	subs *subscriptions
}

// New returns a service on js. It creates the cluster's queue stream and
// record bucket, or brings existing ones to the configured limits, so the
// first service to start sets them up; setting up takes at most
// [setupTimeout]. The caller owns js and its connection.
func New(js jetstream.JetStream, opts ...Option) (*Service, error) {
	// Setting up is not tied to any request; bound it on its own.
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	return Open(ctx, js, opts...)
}

// Open is [New] with setting up bounded by ctx, for a process that retries
// it until JetStream is up and must be able to stop meanwhile.
func Open(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Service, error) {
	if js == nil {
		return nil, errors.New("jobs: nil JetStream")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	n := newNames(cfg.subjects)
	guard, err := egress.New(append([]egress.Option{egress.WithAllow(cfg.callbackAllow...)}, cfg.egress...)...)
	if err != nil {
		return nil, fmt.Errorf("jobs: callbacks: %w", err)
	}
	st, err := openStore(ctx, js, n, cfg.store, true)
	if err != nil {
		return nil, err
	}
	if cfg.counters == nil {
		cfg.counters = NewCounters()
	}
	s := &Service{st: st, cfg: cfg, log: cfg.logger.With("component", "jobs"), guard: guard,
		subs: newSubscriptions(cfg.maxSubs, cfg.callerMaxSubs)}
	s.hub = newHub(st, s.log)
	s.collector = newStatsCollector(s)
	return s, nil
}

// setupTimeout bounds creating the stream, bucket and consumers.
const setupTimeout = 30 * time.Second

// ServeRPC answers one rpc.jobs.* call: call.Method names the method,
// call.Params its params and call.Caller who asks (empty when
// unauthenticated; a caller sees only its own jobs). It returns the result
// as JSON or an error: -32601 for an rpc.jobs.* name it does not know,
// -32602 naming the member for invalid params, [schema.ErrJobNotFound] for
// an id with no job, -32006 naming the limit, -32003 when JetStream cannot
// be reached. ctx bounds the JetStream requests; without a deadline
// JetStream's default timeout applies.
func (s *Service) ServeRPC(ctx context.Context, call schema.Call) (json.RawMessage, *schema.Error) {
	var v any
	var rpcErr *schema.Error
	switch call.Method {
	case schema.MethodJobsSubmit:
		v, rpcErr = s.submit(ctx, call)
	case schema.MethodJobsGet:
		v, rpcErr = s.get(ctx, call)
	case schema.MethodJobsCancel:
		v, rpcErr = s.cancel(ctx, call)
	case schema.MethodJobsList:
		v, rpcErr = s.list(ctx, call)
	case schema.MethodJobsAnswer:
		v, rpcErr = s.answer(ctx, call)
	case schema.MethodJobsSubscribe:
		return nil, schema.NewError(schema.CodeMethodNotFound,
			"method not found: "+schema.MethodJobsSubscribe+" needs a connection that stays open (WebSocket); poll "+schema.MethodJobsGet+" instead",
			map[string]any{"method": call.Method, "reason": schema.ReasonNeedsWebSocket})
	default:
		return nil, schema.NewError(schema.CodeMethodNotFound, "method not found: "+call.Method,
			map[string]any{"method": call.Method})
	}
	if rpcErr != nil {
		return nil, rpcErr
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, schema.NewError(schema.CodeInternal, "internal error: encode result: "+err.Error(), nil)
	}
	return b, nil
}

type submitParams struct {
	Method         *string         `json:"method"`
	Params         json.RawMessage `json:"params"`
	IdempotencyKey *string         `json:"idempotency_key"`
	NotifyURL      *string         `json:"notify_url"`
	ContextID      *string         `json:"context_id"`
	References     []string        `json:"references"`
	Message        *submitMessage  `json:"message"`
	CanAsk         *bool           `json:"can_ask"`
}

// submitMessage is the submitter's message of a job, the first of its
// history.
type submitMessage struct {
	ID      *string         `json:"id"`
	Text    string          `json:"text"`
	Data    json.RawMessage `json:"data"`
	Content json.RawMessage `json:"content"`
}

// message returns the history message of m, sent at now.
func (m *submitMessage) message(now time.Time) (schema.JobMessage, *schema.Error) {
	switch {
	case m.ID == nil || *m.ID == "":
		return schema.JobMessage{}, invalidParams("/message/id", "required")
	case len(*m.ID) > MaxMessageIDBytes:
		return schema.JobMessage{}, schema.LimitError("max_message_id_bytes", MaxMessageIDBytes, int64(len(*m.ID)))
	}
	msg := schema.JobMessage{ID: *m.ID, Role: schema.JobRoleUser, Text: m.Text, At: now}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *json.RawMessage
	}{{"/message/data", m.Data, &msg.Data}, {"/message/content", m.Content, &msg.Content}} {
		raw := bytes.TrimSpace(f.raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue
		}
		if raw[0] != '{' {
			return schema.JobMessage{}, invalidParams(f.name, "must be an object")
		}
		*f.dst = raw
	}
	return msg, nil
}

func (s *Service) submit(ctx context.Context, call schema.Call) (*schema.JobSubmitResult, *schema.Error) {
	var p submitParams
	if e := decodeParams(call.Params, &p); e != nil {
		return nil, e
	}
	if p.Method == nil {
		return nil, invalidParams("method", "required")
	}
	method := *p.Method
	if err := schema.ValidateMethod(method); err != nil {
		return nil, invalidParams("method", schema.ErrorFrom(err).Message)
	}
	if schema.IsReserved(method) {
		return nil, invalidParams("method", "rpc.* methods cannot run as jobs")
	}
	if s.cfg.authorize != nil {
		if e := s.cfg.authorize(ctx, method); e != nil {
			return nil, e
		}
	}
	params := p.Params
	if t := strings.TrimSpace(string(params)); t == "null" || t == "" {
		params = nil
	} else if t[0] != '{' && t[0] != '[' {
		return nil, invalidParams("params", "must be an object or an array")
	}
	if len(params) > s.cfg.maxParamsBytes {
		return nil, schema.LimitError("max_params_bytes", int64(s.cfg.maxParamsBytes), int64(len(params)))
	}
	var waiting string
	if s.cfg.checkMethod != nil {
		var e *schema.Error
		if waiting, e = s.cfg.checkMethod(ctx, method, params); e != nil {
			return nil, e
		}
	}
	now := time.Now().UTC()
	rec := &stored{JobRecord: schema.JobRecord{
		ID:          s.ids.next(now),
		Method:      method,
		Params:      params,
		State:       schema.JobQueued,
		Waiting:     waiting,
		MaxAttempts: s.cfg.maxAttempts,
		Caller:      call.Caller,
		CreatedAt:   now,
		TTLSeconds:  int64(s.cfg.ttl / time.Second),
	}, TraceParent: call.TraceParent}
	if p.CanAsk != nil && !*p.CanAsk {
		rec.CannotAsk = true
	}
	if p.NotifyURL != nil {
		if e := s.checkNotifyURL(ctx, *p.NotifyURL); e != nil {
			return nil, e
		}
		rec.NotifyURL = *p.NotifyURL
	}
	if p.ContextID != nil {
		if len(*p.ContextID) > MaxContextIDBytes {
			return nil, schema.LimitError("max_context_id_bytes", MaxContextIDBytes, int64(len(*p.ContextID)))
		}
		rec.ContextID = *p.ContextID
	}
	if len(p.References) > MaxReferences {
		return nil, schema.LimitError("max_references", MaxReferences, int64(len(p.References)))
	}
	for _, ref := range p.References {
		switch {
		case ref == "":
			return nil, invalidParams("references", "must not name an empty id")
		case len(ref) > MaxReferenceBytes:
			return nil, schema.LimitError("max_reference_bytes", MaxReferenceBytes, int64(len(ref)))
		}
	}
	if len(p.References) > 0 {
		rec.References = slices.Clone(p.References)
	}
	if p.Message != nil {
		m, e := p.Message.message(now)
		if e != nil {
			return nil, e
		}
		rec.addMessage(m)
	}
	if p.IdempotencyKey != nil {
		key := *p.IdempotencyKey
		switch {
		case key == "":
			return nil, invalidParams("idempotency_key", "must not be empty")
		case len(key) > MaxIdempotencyKeyBytes:
			return nil, schema.LimitError("max_idempotency_key_bytes", MaxIdempotencyKeyBytes, int64(len(key)))
		}
		rec.IdempotencyKey = key
		rec.IdemKey = idemKey(call.Caller, key)
		existing, e := s.claimKey(ctx, rec)
		if e != nil || existing != nil {
			return existing, e
		}
	}
	if e := s.admitQueued(ctx, rec.Caller); e != nil {
		return nil, e
	}
	seq, qerr := s.enqueue(ctx, rec)
	if qerr != nil {
		return nil, qerr
	}
	if _, err := s.st.create(ctx, rec); err != nil {
		if bus.StoreFull(err) {
			// The job must not run behind a refusal: take it out of the
			// queue again.
			if err := s.st.stream.DeleteMsg(ctx, seq); err != nil {
				s.log.Warn("take a refused job out of the queue", "id", rec.ID, "err", err)
			}
			return nil, recordsFull(s.cfg.store.recordsBytes)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, unavailable("store the job", err)
		}
		// A runner took the job before this write, or another replica
		// submitted it under the same idempotency key.
		cur, _, err := s.st.get(ctx, rec.ID)
		if err != nil {
			return nil, storeError(rec.ID, err)
		}
		return &schema.JobSubmitResult{ID: cur.ID, State: cur.State}, nil
	}
	return &schema.JobSubmitResult{ID: rec.ID, State: rec.State}, nil
}

// checkNotifyURL refuses a notify_url that is not an http or https URL,
// or whose host is, or resolves to, an address callbacks may not reach.
// The callback's connection is checked again, so a name that resolves
// elsewhere later gains nothing; a lookup that fails for want of an answer
// (a timeout) therefore does not refuse the job.
func (s *Service) checkNotifyURL(ctx context.Context, raw string) *schema.Error {
	if len(raw) > MaxNotifyURLBytes {
		return schema.LimitError("max_notify_url_bytes", MaxNotifyURLBytes, int64(len(raw)))
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return invalidParams("notify_url", "must be an absolute http or https URL")
	}
	if u.User != nil {
		return invalidParams("notify_url", "must not carry credentials")
	}
	if s.cfg.callbackSecret == nil {
		return invalidParams("notify_url", "completion callbacks are not enabled on this server")
	}
	lctx, cancel := context.WithTimeout(ctx, notifyLookupTimeout)
	defer cancel()
	err = s.guard.Check(lctx, u)
	var blocked *egress.BlockedError
	var dnsErr *net.DNSError
	switch {
	case err == nil:
	case errors.As(err, &blocked):
		s.log.Info("notify_url refused", "host", u.Hostname(), "err", blocked)
		data := map[string]string{"field": "/notify_url"}
		if r := blocked.CallerRange(); r != "" {
			data["range"] = r
		}
		return notifyRefused(blocked.Reason(), data)
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		s.log.Info("notify_url refused: its host does not resolve", "host", u.Hostname(), "err", err)
		return notifyRefused(egress.NameRule(u.Hostname()), map[string]string{"field": "/notify_url"})
	case egress.Classify(err) == egress.ClassDNS:
		s.log.Info("notify_url not resolved at submit; its callback is checked when it connects", "host", u.Hostname(), "err", err)
	default:
		return invalidParams("notify_url", "must be an absolute http or https URL with a valid port")
	}
	return nil
}

// notifyRefused is the caller's error for a notify_url whose host the
// callback rule refuses: it names the rule, and of a host name neither
// whether it resolves nor where to (the operator's log has that).
func notifyRefused(why string, data map[string]string) *schema.Error {
	reason := why + "; job callbacks reach only hosts with public addresses, unless the operator allows others with --callback-allow"
	data["reason"] = reason
	return schema.NewError(schema.CodeInvalidParams, "invalid params: notify_url: "+reason, data)
}

// notifyLookupTimeout bounds resolving a notify_url's host at submit.
const notifyLookupTimeout = 5 * time.Second

// idemKey is the bucket key of the idempotency entry of caller's key. The
// caller's length goes first so that no two (caller, key) pairs hash the
// same input.
func idemKey(caller, key string) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(caller)))])
	h.Write([]byte(caller))
	h.Write([]byte(key))
	return "idem." + hex.EncodeToString(h.Sum(nil))
}

// idemEntry is the idempotency entry of a key: the job it names and the
// fingerprint of what was submitted under it.
type idemEntry struct {
	ID          string `json:"id"`
	Fingerprint string `json:"fp,omitempty"`
}

// submitFingerprint sums what a submit asks for: the method, the params
// (compacted, so that spacing does not count), the notify_url, and the
// context_id and references when it has them (a submit without them sums
// as services before them summed it, so their entries still match).
func submitFingerprint(rec *stored) string {
	h := sha256.New()
	h.Write([]byte(rec.Method))
	h.Write([]byte{0})
	var params bytes.Buffer
	if json.Compact(&params, rec.Params) != nil {
		params.Write(rec.Params)
	}
	h.Write(params.Bytes())
	h.Write([]byte{0})
	h.Write([]byte(rec.NotifyURL))
	if rec.ContextID != "" || len(rec.References) > 0 {
		h.Write([]byte{0})
		var n [binary.MaxVarintLen64]byte
		for _, s := range append([]string{rec.ContextID}, rec.References...) {
			h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
			h.Write([]byte(s))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// keyReused is the answer to a submit whose idempotency key names job id,
// submitted with another method, params, notify_url, context_id or
// references.
func keyReused(key, id string) *schema.Error {
	return schema.NewError(schema.CodeInvalidRequest,
		fmt.Sprintf("invalid request: idempotency_key %q already names job %s, submitted with another method, params, notify_url, context_id or references; "+
			"send the same submit to get that job, or a new key for a new job", key, id),
		map[string]any{"reason": schema.ReasonIdempotencyKeyReused, "field": "/idempotency_key", "idempotency_key": key, "id": id})
}

// claimKey creates rec's idempotency entry, pointing at rec.ID. When the
// entry already exists it returns the job it points at, or refuses the
// submit when that job was submitted with another method, params,
// notify_url, context_id or references; when that job's record is missing (its submitter stopped
// between the entry and the record) it adopts that id into rec, so the
// submit completes the same job. Create makes two replicas racing with the
// same key agree on one id.
func (s *Service) claimKey(ctx context.Context, rec *stored) (*schema.JobSubmitResult, *schema.Error) {
	fp := submitFingerprint(rec)
	entry, _ := json.Marshal(idemEntry{ID: rec.ID, Fingerprint: fp})
	for range 3 {
		_, err := s.st.kv.Create(ctx, rec.IdemKey, entry)
		if err == nil {
			return nil, nil
		}
		if bus.StoreFull(err) {
			return nil, recordsFull(s.cfg.store.recordsBytes)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, unavailable("store the idempotency key", err)
		}
		e, err := s.st.kv.Get(ctx, rec.IdemKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired in between: claim it again
		}
		if err != nil {
			return nil, unavailable("read the idempotency key", err)
		}
		var prev idemEntry
		if err := json.Unmarshal(e.Value(), &prev); err != nil || !validID(prev.ID) {
			return nil, schema.NewError(schema.CodeInternal, "internal error: unreadable idempotency entry", nil)
		}
		// Entries of a service that wrote no fingerprint name their job
		// whatever the submit.
		if prev.Fingerprint != "" && prev.Fingerprint != fp {
			return nil, keyReused(rec.IdempotencyKey, prev.ID)
		}
		cur, _, err := s.st.get(ctx, prev.ID)
		switch {
		case err == nil:
			return &schema.JobSubmitResult{ID: cur.ID, State: cur.State}, nil
		case errors.Is(err, errNotFound):
			rec.ID = prev.ID
			return nil, nil
		default:
			return nil, storeError(prev.ID, err)
		}
	}
	return nil, unavailable("claim the idempotency key", errors.New("it keeps changing"))
}

// enqueue publishes rec to the queue. The message carries the whole record,
// so a runner can write the record itself if the submitter stopped before
// it did; its id is the message id, so a resubmit within [DuplicateWindow]
// queues the job once.
func (s *Service) enqueue(ctx context.Context, rec *stored) (uint64, *schema.Error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, schema.NewError(schema.CodeInternal, "internal error: encode job: "+err.Error(), nil)
	}
	msg := &nats.Msg{Subject: s.st.names.queueSubject(rec.Caller, rec.Method), Data: b}
	ack, err := s.st.js.PublishMsg(ctx, msg, jetstream.WithMsgID(rec.ID), jetstream.WithExpectStream(s.st.names.stream))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && strings.Contains(apiErr.Description, "maximum messages") {
		return 0, schema.LimitError("max_queued_jobs", s.cfg.store.maxQueued, -1)
	}
	if bus.StoreFull(err) {
		e := schema.LimitError("job_queue_max_bytes", s.cfg.store.queueBytes, -1)
		e.Message += "; the queue is full: submit again once queued jobs have run"
		return 0, e.WithData(map[string]any{"limit": "job_queue_max_bytes", "max": s.cfg.store.queueBytes,
			"retryable": true, "retry_after_ms": 1000})
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		return 0, schema.LimitError("max_payload", s.st.js.Conn().MaxPayload(), int64(len(b)))
	}
	if err != nil {
		return 0, unavailable("queue the job", err)
	}
	// A duplicate is a job an earlier submit of the same id queued.
	if !ack.Duplicate {
		s.cfg.counters.addSubmitted(rec.Method)
		// Wake a runner with nothing to do; one that misses it finds the
		// job when it next lists the stream.
		if err := s.st.js.Conn().Publish(s.st.names.readySubject(rec.Caller, rec.Method), nil); err != nil {
			s.log.Debug("ring for a queued job", "id", rec.ID, "err", err)
		}
	}
	return ack.Sequence, nil
}

type idParams struct {
	ID *string `json:"id"`
}

// jobID reads and checks the id member of get and cancel.
func jobID(call schema.Call) (string, *schema.Error) {
	var p idParams
	if e := decodeParams(call.Params, &p); e != nil {
		return "", e
	}
	if p.ID == nil {
		return "", invalidParams("id", "required")
	}
	if !validID(*p.ID) {
		return "", invalidParams("id", "not a job id")
	}
	return *p.ID, nil
}

func (s *Service) get(ctx context.Context, call schema.Call) (*schema.JobRecord, *schema.Error) {
	id, e := jobID(call)
	if e != nil {
		return nil, e
	}
	rec, _, err := s.st.get(ctx, id)
	if err != nil {
		return nil, storeError(id, err)
	}
	if rec.Caller != call.Caller {
		return nil, notFound(id)
	}
	return rec.public(), nil
}

// errFinished is what a mutation returns for a job that has already ended.
var errFinished = errors.New("jobs: job already finished")

func (s *Service) cancel(ctx context.Context, call schema.Call) (*schema.JobRecord, *schema.Error) {
	id, e := jobID(call)
	if e != nil {
		return nil, e
	}
	var wasRunning bool
	rec, err := s.st.update(ctx, id, func(r *stored) error {
		if r.Caller != call.Caller {
			return errNotFound
		}
		switch r.State {
		case schema.JobCanceled:
			return errSkip // canceling twice is canceling once
		case schema.JobSucceeded, schema.JobFailed:
			return errFinished
		}
		wasRunning = r.State.Started()
		r.finish(schema.JobCanceled, nil, canceledError(), time.Now().UTC())
		return nil
	})
	switch {
	case errors.Is(err, errSkip):
		return rec.public(), nil
	case errors.Is(err, errFinished):
		return nil, schema.NewError(schema.CodeInvalidParams,
			fmt.Sprintf("invalid params: id: job %s already %s; only queued or running jobs can be canceled", id, rec.State),
			map[string]any{"field": "/id", "reason": schema.ReasonJobFinished, "state": rec.State})
	case err != nil:
		return nil, storeError(id, err)
	}
	if wasRunning {
		// The runner also notices the canceled record on its next lease
		// renewal; this message only makes it stop at once.
		if err := s.st.js.Conn().Publish(s.st.names.cancelSubject(id), nil); err != nil {
			s.log.Warn("announce a cancel", "id", id, "err", err)
		}
	}
	s.cfg.counters.addFinished(rec.Method, rec.State)
	s.st.finished(ctx, rec, s.log)
	return rec.public(), nil
}

func canceledError() *schema.Error {
	return schema.NewError(schema.CodeCanceled, "canceled: the job was canceled", map[string]any{"reason": schema.ReasonCanceledByCaller})
}

func notFound(id string) *schema.Error {
	return schema.NewError(schema.CodeJobNotFound, "job not found: "+id, map[string]any{"id": id})
}

// storeError maps an error of reading or writing job id to its answer.
func storeError(id string, err error) *schema.Error {
	if errors.Is(err, errNotFound) {
		return notFound(id)
	}
	return unavailable("job "+id, err)
}

// recordsFull is the answer of a write the full bucket of records refused.
func recordsFull(max int64) *schema.Error {
	return schema.NewError(schema.CodeUnavailable,
		fmt.Sprintf("unavailable: the bucket of job records is full (job_records_max_bytes is %d); try again once finished jobs expire", max),
		map[string]any{"retryable": true, "retry_after_ms": 1000, "limit": "job_records_max_bytes", "max": max})
}

func unavailable(what string, err error) *schema.Error {
	return schema.NewError(schema.CodeUnavailable, "unavailable: "+what+": "+err.Error(), map[string]any{"retryable": true})
}
