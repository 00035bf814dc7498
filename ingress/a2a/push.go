package a2a

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/schema"
)

// Bounds of push notification configs.
const (
	// MaxPushConfigs is the most configs one task may have.
	MaxPushConfigs = 10
	// MaxPushURLBytes, MaxPushTokenBytes and MaxPushIDBytes bound a
	// config's URL, token and id.
	MaxPushURLBytes   = 2048
	MaxPushTokenBytes = 1024
	MaxPushIDBytes    = 128
	// DefaultPushMaxBytes caps the bucket of configs, and DefaultPushTTL
	// is how long a config is kept.
	DefaultPushMaxBytes int64 = 64 << 20
	DefaultPushTTL            = 7 * 24 * time.Hour
	// pushTimeout bounds one POST of a notification.
	pushTimeout = 10 * time.Second
	// tokenHeader carries a config's token, as A2A defines.
	tokenHeader = "X-A2A-Notification-Token"
)

// PushStore holds the push notification configs of tasks in a JetStream
// bucket, which every replica reads. Its zero value is ready and refuses
// every request as unavailable until [PushStore.Open] gives it its bucket,
// which a process opens in the background ([PushBucket]).
type PushStore struct {
	mu sync.RWMutex
	kv jetstream.KeyValue
}

// Open makes the store use kv.
func (p *PushStore) Open(kv jetstream.KeyValue) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kv = kv
}

func (p *PushStore) bucket() (jetstream.KeyValue, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.kv == nil {
		return nil, fmt.Errorf("push notifications are not available yet (their JetStream bucket is not open); try again shortly: %w", a2a.ErrServerError)
	}
	return p.kv, nil
}

// PushBucket creates or updates the bucket of push configs of the cluster
// of prefix, <prefix>_a2a_push, with replicas, a byte cap of maxBytes
// (zero: [DefaultPushMaxBytes]) and configs kept ttl (zero:
// [DefaultPushTTL]).
func PushBucket(ctx context.Context, js jetstream.JetStream, prefix string, replicas int, maxBytes int64, ttl time.Duration) (jetstream.KeyValue, error) {
	if maxBytes < 0 || ttl < 0 {
		return nil, fmt.Errorf("a2a: push bucket max bytes %d and ttl %v must not be negative", maxBytes, ttl)
	}
	if maxBytes == 0 {
		maxBytes = DefaultPushMaxBytes
	}
	if ttl == 0 {
		ttl = DefaultPushTTL
	}
	s, err := bus.NewSubjects(prefix)
	if err != nil {
		return nil, err
	}
	kv, err := bus.KeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      s.Token() + "_a2a_push",
		Description: "toolbus A2A push notification configs",
		History:     1,
		TTL:         ttl,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		MaxBytes:    maxBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("a2a: push notification configs: %w", err)
	}
	return kv, nil
}

// pushEntry is one config as the bucket holds it, with its owner.
type pushEntry struct {
	Caller string         `json:"caller"`
	Config a2a.PushConfig `json:"config"`
}

func configKey(task, id string) string { return "cfg." + task + "." + hex.EncodeToString([]byte(id)) }
func configKeys(task string) string    { return "cfg." + task + ".*" }
func followKey(task string) string     { return "follow." + task }

// checkPush refuses a config the front door cannot deliver: no push
// notifications on this server, a URL that is not http(s), one with
// credentials in it, or whose host is an address the operator did not
// allow.
func (s *Server) checkPush(ctx context.Context, c *a2a.PushConfig) error {
	if s.push == nil {
		return fmt.Errorf("push notifications are not enabled on this server; poll tasks/get or use message/stream: %w", a2a.ErrPushNotificationNotSupported)
	}
	switch {
	case len(c.URL) > MaxPushURLBytes:
		return fmt.Errorf("the push notification URL is over %d bytes: %w", MaxPushURLBytes, a2a.ErrInvalidParams)
	case len(c.Token) > MaxPushTokenBytes:
		return fmt.Errorf("the push notification token is over %d bytes: %w", MaxPushTokenBytes, a2a.ErrInvalidParams)
	case len(c.ID) > MaxPushIDBytes:
		return fmt.Errorf("the push notification config id is over %d bytes: %w", MaxPushIDBytes, a2a.ErrInvalidParams)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("the push notification URL must be an absolute http or https URL: %w", a2a.ErrInvalidParams)
	}
	if u.User != nil {
		return fmt.Errorf("the push notification URL must not carry credentials; put them in the config's authentication: %w", a2a.ErrInvalidParams)
	}
	lctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	err = s.guard.Check(lctx, u)
	var blocked *egress.BlockedError
	switch {
	case err == nil:
	case errors.As(err, &blocked):
		return fmt.Errorf("the push notification URL is refused: %s; push notifications reach loopback, private, link-local and other internal addresses only when the operator allows them with --callback-allow: %w", blocked.Reason(), a2a.ErrInvalidParams)
	case egress.Classify(err) == egress.ClassDNS:
		return fmt.Errorf("the host of the push notification URL does not resolve; give a host name that resolves in DNS: %w", a2a.ErrInvalidParams)
	default:
		return fmt.Errorf("the push notification URL must be an absolute http or https URL with a valid port: %w", a2a.ErrInvalidParams)
	}
	return nil
}

// own returns the record of task id when r's caller may see it, read with
// rpc.jobs.get; another caller's task is not found.
func (s *Server) own(ctx context.Context, r Request, id a2a.TaskID) (*schema.JobRecord, error) {
	if id == "" {
		return nil, fmt.Errorf("give the task's id: %w", a2a.ErrInvalidParams)
	}
	var rec schema.JobRecord
	if e := s.call(ctx, r, schema.MethodJobsGet, map[string]string{"id": string(id)}, &rec); e != nil {
		if e.Code == schema.CodeInvalidParams {
			return nil, fmt.Errorf("task %s not found: %w", id, a2a.ErrTaskNotFound)
		}
		return nil, a2aError(e)
	}
	return &rec, nil
}

// OnSetTaskPushConfig implements tasks/pushNotificationConfig/set: it
// keeps the config (its id defaults to the task's, so that a task's one
// config is replaced by setting it again) and POSTs the task to it from
// now on at every state change.
func (s *Server) OnSetTaskPushConfig(ctx context.Context, p *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	r, err := request(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkPush(ctx, &p.Config); err != nil {
		return nil, err
	}
	if _, err := s.own(ctx, r, p.TaskID); err != nil {
		return nil, err
	}
	return s.setPush(ctx, r, string(p.TaskID), &p.Config)
}

// setPush stores config c of task id for r's caller, which owns the task,
// and follows the task to deliver it.
func (s *Server) setPush(ctx context.Context, r Request, id string, c *a2a.PushConfig) (*a2a.TaskPushConfig, error) {
	kv, err := s.push.bucket()
	if err != nil {
		return nil, err
	}
	cfg := *c
	if cfg.ID == "" {
		cfg.ID = id
	}
	key := configKey(id, cfg.ID)
	if _, err := kv.Get(ctx, key); errors.Is(err, jetstream.ErrKeyNotFound) {
		n, err := s.countConfigs(ctx, kv, id)
		if err != nil {
			return nil, err
		}
		if n >= MaxPushConfigs {
			return nil, fmt.Errorf("task %s has %d push notification configs already, the most it may have; delete one first: %w", id, MaxPushConfigs, a2a.ErrInvalidParams)
		}
	}
	b, _ := json.Marshal(pushEntry{Caller: r.Caller, Config: cfg})
	if _, err := kv.Put(ctx, key, b); err != nil {
		return nil, storeError(err)
	}
	s.followForPush(ctx, r, id)
	return &a2a.TaskPushConfig{TaskID: a2a.TaskID(id), Config: cfg}, nil
}

func storeError(err error) error {
	if errors.Is(err, jetstream.ErrMaxBytesExceeded) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return fmt.Errorf("the bucket of push notification configs cannot take more now; try again later: %w", a2a.ErrServerError)
	}
	return fmt.Errorf("the bucket of push notification configs is unavailable (%v); try again shortly: %w", err, a2a.ErrServerError)
}

func (s *Server) countConfigs(ctx context.Context, kv jetstream.KeyValue, id string) (int, error) {
	entries, err := s.configs(ctx, kv, id, "")
	return len(entries), err
}

// configs returns the configs of task id, those of caller alone unless
// caller is "" (any).
func (s *Server) configs(ctx context.Context, kv jetstream.KeyValue, id, caller string) ([]pushEntry, error) {
	lister, err := kv.ListKeysFiltered(ctx, configKeys(id))
	if err != nil {
		return nil, storeError(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []pushEntry
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, storeError(err)
		}
		var pe pushEntry
		if json.Unmarshal(e.Value(), &pe) != nil || (caller != "" && pe.Caller != caller) {
			continue
		}
		out = append(out, pe)
	}
	return out, nil
}

// OnGetTaskPushConfig implements tasks/pushNotificationConfig/get; without
// a config id it reads the config whose id is the task's.
func (s *Server) OnGetTaskPushConfig(ctx context.Context, p *a2a.GetTaskPushConfigParams) (*a2a.TaskPushConfig, error) {
	r, kv, err := s.pushRequest(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	id := p.ConfigID
	if id == "" {
		id = string(p.TaskID)
	}
	e, err := kv.Get(ctx, configKey(string(p.TaskID), id))
	var pe pushEntry
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, storeError(err)
	case json.Unmarshal(e.Value(), &pe) == nil && pe.Caller == r.Caller:
		return &a2a.TaskPushConfig{TaskID: p.TaskID, Config: pe.Config}, nil
	}
	return nil, fmt.Errorf("task %s has no push notification config %q; tasks/pushNotificationConfig/list lists them: %w", p.TaskID, id, a2a.ErrInvalidParams)
}

// OnListTaskPushConfig implements tasks/pushNotificationConfig/list.
func (s *Server) OnListTaskPushConfig(ctx context.Context, p *a2a.ListTaskPushConfigParams) ([]*a2a.TaskPushConfig, error) {
	r, kv, err := s.pushRequest(ctx, p.TaskID)
	if err != nil {
		return nil, err
	}
	entries, err := s.configs(ctx, kv, string(p.TaskID), r.Caller)
	if err != nil {
		return nil, err
	}
	out := make([]*a2a.TaskPushConfig, 0, len(entries))
	for _, e := range entries {
		out = append(out, &a2a.TaskPushConfig{TaskID: p.TaskID, Config: e.Config})
	}
	return out, nil
}

// OnDeleteTaskPushConfig implements tasks/pushNotificationConfig/delete;
// deleting a config that is not there is not an error.
func (s *Server) OnDeleteTaskPushConfig(ctx context.Context, p *a2a.DeleteTaskPushConfigParams) error {
	_, kv, err := s.pushRequest(ctx, p.TaskID)
	if err != nil {
		return err
	}
	if err := kv.Delete(ctx, configKey(string(p.TaskID), p.ConfigID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return storeError(err)
	}
	return nil
}

// pushRequest checks a request about the push configs of task id: push
// notifications are on, and the task is the caller's.
func (s *Server) pushRequest(ctx context.Context, id a2a.TaskID) (Request, jetstream.KeyValue, error) {
	r, err := request(ctx)
	if err != nil {
		return Request{}, nil, err
	}
	if s.push == nil {
		return Request{}, nil, fmt.Errorf("push notifications are not enabled on this server: %w", a2a.ErrPushNotificationNotSupported)
	}
	if _, err := s.own(ctx, r, id); err != nil {
		return Request{}, nil, err
	}
	kv, err := s.push.bucket()
	return r, kv, err
}

// followForPush follows task id for its push notifications, unless a
// replica does already: the one that claims the task in the bucket
// follows it until it is final, and POSTs the task to every config at its
// first sight of it and at every change of its state. The follower
// outlives the request that started it, which is why it is detached from
// that request's cancellation; [Server.Close] stops it.
func (s *Server) followForPush(ctx context.Context, r Request, id string) {
	kv, err := s.push.bucket()
	if err != nil {
		return
	}
	if _, err := kv.Create(ctx, followKey(id), []byte("1")); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			s.log.Warn("cannot claim a task to follow for push notifications", "task", id, "err", err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer s.wg.Done()
		defer cancel()
		go func() {
			select {
			case <-s.quit:
				cancel()
			case <-fctx.Done():
			}
		}()
		var last a2a.TaskState
		err := s.follow(fctx, r, id, func(rec *schema.JobRecord) error {
			if st := state(rec.State); st != last {
				last = st
				s.pushTask(fctx, kv, rec)
			}
			return nil
		})
		if err != nil && fctx.Err() == nil {
			s.log.Warn("stopped following a task for push notifications", "task", id, "err", err)
		}
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(fctx), pushTimeout)
		_ = kv.Delete(dctx, followKey(id))
		dcancel()
	}()
}

// pushTask POSTs the task of rec to every push config of its caller.
func (s *Server) pushTask(ctx context.Context, kv jetstream.KeyValue, rec *schema.JobRecord) {
	entries, err := s.configs(ctx, kv, rec.ID, rec.Caller)
	if err != nil {
		s.log.Warn("cannot read the push notification configs of a task", "task", rec.ID, "err", err)
		return
	}
	body, err := json.Marshal(task(rec))
	if err != nil {
		return
	}
	for _, e := range entries {
		if err := s.post(ctx, &e.Config, body); err != nil {
			s.log.Warn("push notification not delivered", "task", rec.ID, "config", e.Config.ID, "class", egress.Classify(err), "err", err)
		}
	}
}

// post sends one notification as A2A defines it: the task as JSON, the
// config's token in X-A2A-Notification-Token, and its credentials in
// Authorization under the first scheme it names that is Bearer or Basic.
func (s *Server) post(ctx context.Context, c *a2a.PushConfig, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolbus-a2a-push")
	if c.Token != "" {
		req.Header.Set(tokenHeader, c.Token)
	}
	if c.Auth != nil && c.Auth.Credentials != "" {
	schemes:
		for _, scheme := range c.Auth.Schemes {
			switch strings.ToLower(scheme) {
			case "bearer":
				req.Header.Set("Authorization", "Bearer "+c.Auth.Credentials)
				break schemes
			case "basic":
				req.Header.Set("Authorization", "Basic "+c.Auth.Credentials)
				break schemes
			}
		}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &egress.Error{Class: egress.StatusClass(resp.StatusCode), Err: fmt.Errorf("push receiver answered %s", resp.Status)}
	}
	return nil
}
