package a2a

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/egress"
	"github.com/toolbus/toolbus/internal/webhook"
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
	// MaxPushCredentialsBytes bounds a config's authentication: its
	// credentials and the names of its schemes together; MaxPushSchemes
	// is the most schemes it may name.
	MaxPushCredentialsBytes = 1024
	MaxPushSchemes          = 8
	// DefaultPushCallerMaxConfigs and DefaultPushCallerMaxBytes bound the
	// configs one caller keeps in the bucket, over all its tasks
	// ([WithPushCallerLimits]).
	DefaultPushCallerMaxConfigs       = 100
	DefaultPushCallerMaxBytes   int64 = 1 << 20
	// DefaultPushMaxBytes caps the bucket of configs, and DefaultPushTTL
	// is how long a config is kept.
	DefaultPushMaxBytes int64 = 64 << 20
	DefaultPushTTL            = 7 * 24 * time.Hour
	// pushTimeout bounds one POST of a notification, and the bucket
	// writes a message/send makes after its task exists.
	pushTimeout = 10 * time.Second
	// reserveTTL is how long the room a message/send reserved for its
	// config counts against its caller: far longer than submitting a job
	// takes, so that only a reservation whose replica stopped in between
	// is ever given up.
	reserveTTL = 15 * time.Minute
	// tokenHeader carries a config's token, as A2A defines.
	tokenHeader = "X-A2A-Notification-Token"
)

// The limits of one caller's configs, as refusals name them.
const (
	limitCallerConfigs = "a2a_push_caller_max_configs"
	limitCallerBytes   = "a2a_push_caller_max_bytes"
)

// WithPushCallerLimits bounds the push notification configs one caller
// keeps, over all its tasks: at most maxConfigs configs (default
// [DefaultPushCallerMaxConfigs]) of at most maxBytes together, as the
// bucket stores them (default [DefaultPushCallerMaxBytes]); zero keeps a
// default. The configs are counted in the bucket, so the bounds hold
// across every replica of the ingress. A config of a task that is final
// and notified gives its room to a new config when its caller is at a
// bound; a set or message/send past a bound is refused with the limit's
// name (a2a_push_caller_max_configs, a2a_push_caller_max_bytes), and a
// refused message/send makes no task.
func WithPushCallerLimits(maxConfigs int, maxBytes int64) Option {
	return func(s *Server) error {
		if maxConfigs < 0 || maxBytes < 0 {
			return fmt.Errorf("a2a: push caller limits must not be negative, got %d configs and %d bytes", maxConfigs, maxBytes)
		}
		s.pushCaps = pushCaps{configs: maxConfigs, bytes: maxBytes}
		return nil
	}
}

// pushCaps are the bounds of one caller's configs; a zero field is its
// default.
type pushCaps struct {
	configs int
	bytes   int64
}

func (c pushCaps) maxConfigs() int { return cmp.Or(c.configs, DefaultPushCallerMaxConfigs) }
func (c pushCaps) maxBytes() int64 { return cmp.Or(c.bytes, DefaultPushCallerMaxBytes) }

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
		return nil, refuse(a2a.ErrServerError, "push notifications are not available yet (their JetStream bucket is not open); try again shortly")
	}
	return p.kv, nil
}

// PushBucket creates or updates the bucket of push configs of the cluster
// of subjects, <prefix>_a2a_push, with replicas, a byte cap of maxBytes
// (zero: [DefaultPushMaxBytes]) and configs kept ttl (zero:
// [DefaultPushTTL]).
func PushBucket(ctx context.Context, js jetstream.JetStream, subjects bus.Subjects, replicas int, maxBytes int64, ttl time.Duration) (jetstream.KeyValue, error) {
	if subjects.IsZero() {
		return nil, errors.New("a2a: push bucket of zero subjects")
	}
	if maxBytes < 0 || ttl < 0 {
		return nil, fmt.Errorf("a2a: push bucket max bytes %d and ttl %v must not be negative", maxBytes, ttl)
	}
	if maxBytes == 0 {
		maxBytes = DefaultPushMaxBytes
	}
	if ttl == 0 {
		ttl = DefaultPushTTL
	}
	kv, err := bus.KeyValue(ctx, js, jetstream.KeyValueConfig{
		Bucket:      subjects.Token() + "_a2a_push",
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
	// Reserved is when a message/send reserved room for the config
	// before its task existed; zero for the config of a task.
	Reserved time.Time `json:"reserved,omitzero"`
	// Final is when the config's task was seen final and notified; zero
	// while it may still change.
	Final time.Time `json:"final,omitzero"`
}

// The bucket's keys. All the configs of a caller live under
// cfg.<caller>., where <caller> is a digest of the caller's name, so that
// one listing finds and counts them on any replica: those of a task
// under cfg.<caller>.t.<task>.<config id in hex>, and those a message/send
// reserved room for before its task existed under cfg.<caller>.r.<random>.
// follow.<task> says that a replica follows the task.
func callerToken(caller string) string {
	sum := sha256.Sum256([]byte(caller))
	return hex.EncodeToString(sum[:16])
}

func callerKeys(caller string) string { return "cfg." + callerToken(caller) + ".>" }
func taskKeys(caller, task string) string {
	return "cfg." + callerToken(caller) + ".t." + task + ".*"
}
func configKey(caller, task, id string) string {
	return "cfg." + callerToken(caller) + ".t." + task + "." + hex.EncodeToString([]byte(id))
}
func reservedKey(caller string) string {
	var b [16]byte
	rand.Read(b[:]) // never fails
	return "cfg." + callerToken(caller) + ".r." + hex.EncodeToString(b[:])
}
func followKey(task string) string { return "follow." + task }

// taskOf returns the task of a config's key, or "" for a reservation.
func taskOf(key string) string {
	parts := strings.Split(key, ".")
	if len(parts) == 5 && parts[2] == "t" {
		return parts[3]
	}
	return ""
}

// checkPush refuses a config the front door cannot deliver or will not
// keep: no push notifications on this server, a field over its bound, a
// URL that is not http(s), one with credentials in it, or whose host is
// an address the operator did not allow.
func (s *Server) checkPush(ctx context.Context, c *a2a.PushConfig) error {
	if s.push == nil {
		return refuse(a2a.ErrPushNotificationNotSupported, "push notifications are not enabled on this server; poll tasks/get or use message/stream")
	}
	over := func(what, limit string, got, max int) error {
		return refuse(a2a.ErrInvalidParams, "the push notification %s is %d bytes, over the limit %s (%d); send a shorter one", what, got, limit, max)
	}
	switch {
	case len(c.URL) > MaxPushURLBytes:
		return over("URL", "max_push_url_bytes", len(c.URL), MaxPushURLBytes)
	case len(c.Token) > MaxPushTokenBytes:
		return over("token", "max_push_token_bytes", len(c.Token), MaxPushTokenBytes)
	case len(c.ID) > MaxPushIDBytes:
		return over("config id", "max_push_id_bytes", len(c.ID), MaxPushIDBytes)
	}
	if c.Auth != nil {
		if len(c.Auth.Schemes) > MaxPushSchemes {
			return refuse(a2a.ErrInvalidParams, "the push notification authentication names %d schemes, over the limit max_push_schemes (%d); name the one the receiver takes", len(c.Auth.Schemes), MaxPushSchemes)
		}
		n := len(c.Auth.Credentials)
		for _, scheme := range c.Auth.Schemes {
			n += len(scheme)
		}
		if n > MaxPushCredentialsBytes {
			return over("authentication (credentials and scheme names)", "max_push_credentials_bytes", n, MaxPushCredentialsBytes)
		}
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return refuse(a2a.ErrInvalidParams, "the push notification URL must be an absolute http or https URL")
	}
	if u.User != nil {
		return refuse(a2a.ErrInvalidParams, "the push notification URL must not carry credentials; put them in the config's authentication")
	}
	lctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	err = s.guard.Check(lctx, u)
	var blocked *egress.BlockedError
	switch {
	case err == nil:
	case errors.As(err, &blocked):
		s.log.Info("push notification URL refused", "host", u.Hostname(), "err", blocked)
		return pushURLRefused(blocked.Reason())
	case egress.Classify(err) == egress.ClassDNS:
		// Refused in the words a name that resolves inside gets, so that
		// the answer tells nothing of the operator's names.
		s.log.Info("push notification URL refused: its host did not resolve", "host", u.Hostname(), "err", err)
		return pushURLRefused(egress.NameRule(u.Hostname()))
	default:
		return refuse(a2a.ErrInvalidParams, "the push notification URL must be an absolute http or https URL with a valid port")
	}
	return nil
}

// pushURLRefused is the caller's error for a push notification URL whose
// host the callback rule refuses: it names the rule, and of a host name
// neither whether it resolves nor where to (the operator's log has that).
func pushURLRefused(why string) error {
	return refuse(a2a.ErrInvalidParams, "the push notification URL is refused: %s; push notifications reach only hosts with public addresses, unless the operator allows others with --callback-allow", why)
}

// own returns the record of task id when r's caller may see it, read with
// rpc.jobs.get; another caller's task is not found.
func (s *Server) own(ctx context.Context, r request, id a2a.TaskID) (*schema.JobRecord, error) {
	if id == "" {
		return nil, refuse(a2a.ErrInvalidParams, "give the task's id")
	}
	var rec schema.JobRecord
	if e := s.call(ctx, r, schema.MethodJobsGet, map[string]string{"id": string(id)}, &rec); e != nil {
		if e.Code == schema.CodeInvalidParams {
			return nil, refuse(a2a.ErrTaskNotFound, "task %s not found", id)
		}
		return nil, a2aError(e)
	}
	return &rec, nil
}

// OnSetTaskPushConfig implements tasks/pushNotificationConfig/set: it
// keeps the config (its id defaults to the task's, so that a task's one
// config is replaced by setting it again) within the caller's bounds and
// POSTs the task to it from now on at every state change.
func (s *Server) OnSetTaskPushConfig(ctx context.Context, p *a2a.TaskPushConfig) (*a2a.TaskPushConfig, error) {
	r, err := requestOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.checkPush(ctx, &p.Config); err != nil {
		return nil, err
	}
	if _, err := s.own(ctx, r, p.TaskID); err != nil {
		return nil, err
	}
	kv, err := s.push.bucket()
	if err != nil {
		return nil, err
	}
	id := string(p.TaskID)
	cfg := p.Config
	if cfg.ID == "" {
		cfg.ID = id
	}
	if _, err := s.keep(ctx, kv, configKey(r.Caller, id, cfg.ID), id, pushEntry{Caller: r.Caller, Config: cfg}); err != nil {
		return nil, err
	}
	s.followForPush(ctx, r, id)
	return &a2a.TaskPushConfig{TaskID: p.TaskID, Config: cfg}, nil
}

// reservation is the room a message/send holds for its push config
// within its caller's bounds before its task exists: it is either settled
// as the config of the task the message made, or released when the
// message made none.
type reservation struct {
	kv    jetstream.KeyValue
	key   string
	rev   uint64
	entry pushEntry
}

// reserve checks config c of a message/send of r and holds room for it,
// so that a message whose config cannot be kept is refused before its
// task exists.
func (s *Server) reserve(ctx context.Context, r request, c *a2a.PushConfig) (*reservation, error) {
	if err := s.checkPush(ctx, c); err != nil {
		return nil, err
	}
	kv, err := s.push.bucket()
	if err != nil {
		return nil, err
	}
	res := &reservation{kv: kv, key: reservedKey(r.Caller), entry: pushEntry{Caller: r.Caller, Config: *c, Reserved: now()}}
	if res.rev, err = s.keep(ctx, kv, res.key, "", res.entry); err != nil {
		return nil, err
	}
	return res, nil
}

// release gives the reserved room back. A nil reservation is left as it
// is.
func (res *reservation) release(ctx context.Context) error {
	if res == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pushTimeout)
	defer cancel()
	return res.kv.Delete(ctx, res.key, jetstream.LastRevision(res.rev))
}

// settle makes the reserved config the config of task id, the task the
// message/send made (its id defaults to the task's), and follows the
// task for it. The task exists already, so the writes are not cut short
// by a client that goes away meanwhile.
func (s *Server) settle(ctx context.Context, r request, res *reservation, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pushTimeout)
	defer cancel()
	cfg := res.entry.Config
	if cfg.ID == "" {
		cfg.ID = id
	}
	b, _ := json.Marshal(pushEntry{Caller: r.Caller, Config: cfg})
	// The config is written before the reservation goes, so that the
	// room stays taken throughout; the task is new, so the key is too.
	_, err := res.kv.Create(ctx, configKey(r.Caller, id, cfg.ID), b)
	if rerr := res.release(ctx); rerr != nil && !errors.Is(rerr, jetstream.ErrKeyNotFound) {
		s.log.Warn("cannot give back the room reserved for a push notification config; it counts against its caller until it is stale", "task", id, "err", rerr)
	}
	if err != nil {
		return storeError(err)
	}
	s.followForPush(ctx, r, id)
	return nil
}

// withdraw cancels task id, which a message/send made but whose push
// config could not be kept after all (err), so that no task runs behind
// the refusal, and returns the refusal.
func (s *Server) withdraw(ctx context.Context, r request, id string, err error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pushTimeout)
	defer cancel()
	var rec schema.JobRecord
	if e := s.call(ctx, r, schema.MethodJobsCancel, map[string]string{"id": id}, &rec); e != nil {
		s.log.Error("a task whose push notification config could not be kept was not canceled", "task", id, "err", e)
		return refuse(a2a.ErrServerError, "the push notification config could not be kept (%v), and task %s could not be canceled (%s); cancel it with tasks/cancel",
			err, id, e.Message)
	}
	return refuse(a2a.ErrServerError, "task %s was canceled because its push notification config could not be kept (%v); send the message again", id, err)
}

// holding is what one caller keeps in the bucket: its configs and
// reservations, their bytes, the configs of each task, and the configs of
// final tasks, which may give their room to new ones, oldest first.
type holding struct {
	configs int
	bytes   int64
	tasks   map[string]int
	final   []kept
}

// kept is one config of a final task in a [holding].
type kept struct {
	key, task string
	rev       uint64
	size      int64
	at        time.Time
}

// holding reads what caller keeps in the bucket now. A reservation older
// than [reserveTTL], left by a replica that stopped in the middle of a
// message/send, is not counted and is deleted.
func (s *Server) holding(ctx context.Context, kv jetstream.KeyValue, caller string) (holding, error) {
	entries, err := scan(ctx, kv, callerKeys(caller))
	if err != nil {
		return holding{}, err
	}
	h := holding{tasks: map[string]int{}}
	for _, e := range entries {
		var pe pushEntry
		_ = json.Unmarshal(e.Value(), &pe) // what cannot be read still counts
		if !pe.Reserved.IsZero() && time.Since(pe.Reserved) > reserveTTL {
			_ = kv.Delete(ctx, e.Key(), jetstream.LastRevision(e.Revision()))
			continue
		}
		size, task := int64(len(e.Value())), taskOf(e.Key())
		h.configs++
		h.bytes += size
		if task != "" {
			h.tasks[task]++
		}
		if !pe.Final.IsZero() {
			h.final = append(h.final, kept{key: e.Key(), task: task, rev: e.Revision(), size: size, at: pe.Final})
		}
	}
	slices.SortFunc(h.final, func(a, b kept) int { return a.at.Compare(b.at) })
	return h, nil
}

// keep writes entry under key, a config of task ("" for a reservation),
// within the bounds of the entry's caller, and returns its revision. The
// bounds are checked before the write, making room with the caller's
// configs of final tasks, and again after it on what the bucket then
// holds: of writes that race past the first check on any replicas, the
// later one sees the earlier and takes itself back, so that a caller
// never keeps more than its bounds allow.
func (s *Server) keep(ctx context.Context, kv jetstream.KeyValue, key, task string, entry pushEntry) (uint64, error) {
	value, err := json.Marshal(entry)
	if err != nil {
		return 0, refuse(a2a.ErrInvalidParams, "the push notification config cannot be encoded")
	}
	for attempt := 1; ; attempt++ {
		prev, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			prev = nil
		case err != nil:
			return 0, storeError(err)
		}
		h, err := s.holding(ctx, kv, entry.Caller)
		if err != nil {
			return 0, err
		}
		if prev == nil {
			h.configs++
			if task != "" {
				h.tasks[task]++
			}
		} else {
			h.bytes -= int64(len(prev.Value()))
		}
		h.bytes += int64(len(value))
		if err := s.makeRoom(ctx, kv, &h, key, task); err != nil {
			return 0, err
		}
		var rev uint64
		if prev == nil {
			rev, err = kv.Create(ctx, key, value)
		} else {
			rev, err = kv.Update(ctx, key, value, prev.Revision())
		}
		if (errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)) && attempt < 3 {
			continue // another request wrote the key meanwhile
		}
		if err != nil {
			return 0, storeError(err)
		}
		if h, err = s.holding(ctx, kv, entry.Caller); err == nil {
			err = s.makeRoom(ctx, kv, &h, key, task)
		}
		if err != nil {
			s.takeBack(ctx, kv, key, prev, rev)
			return 0, err
		}
		return rev, nil
	}
}

// makeRoom deletes the caller's configs of final tasks but key, oldest
// first, until h is within the caller's bounds, and returns the refusal
// when it cannot.
func (s *Server) makeRoom(ctx context.Context, kv jetstream.KeyValue, h *holding, key, task string) error {
	for _, f := range h.final {
		if h.configs <= s.pushCaps.maxConfigs() && h.bytes <= s.pushCaps.maxBytes() {
			break
		}
		if f.key == key || kv.Delete(ctx, f.key, jetstream.LastRevision(f.rev)) != nil {
			continue // a config written since is no longer final
		}
		h.configs--
		h.bytes -= f.size
		if f.task != "" {
			h.tasks[f.task]--
		}
	}
	return s.refusal(*h, task)
}

// refusal returns the error of a write that leaves h over a bound, or
// nil.
func (s *Server) refusal(h holding, task string) error {
	maxConfigs, maxBytes := s.pushCaps.maxConfigs(), s.pushCaps.maxBytes()
	switch {
	case task != "" && h.tasks[task] > MaxPushConfigs:
		return refuse(a2a.ErrInvalidParams, "task %s has %d push notification configs already, the most it may have; delete one first", task, MaxPushConfigs)
	case h.configs > maxConfigs:
		return a2aError(schema.NewError(schema.CodeLimitExceeded, fmt.Sprintf(
			"limit exceeded: %s is %d: this caller keeps %d push notification configs of tasks that are not final already; "+
				"delete some with tasks/pushNotificationConfig/delete, or wait until their tasks end", limitCallerConfigs, maxConfigs, maxConfigs),
			map[string]any{"limit": limitCallerConfigs, "max": maxConfigs}))
	case h.bytes > maxBytes:
		return a2aError(schema.NewError(schema.CodeLimitExceeded, fmt.Sprintf(
			"limit exceeded: %s is %d: this config would take this caller's push notification configs of tasks that are not final to %d bytes; "+
				"delete some with tasks/pushNotificationConfig/delete, wait until their tasks end, or send smaller configs", limitCallerBytes, maxBytes, h.bytes),
			map[string]any{"limit": limitCallerBytes, "max": maxBytes, "got": h.bytes}))
	}
	return nil
}

// takeBack undoes the write of key at revision rev, which put it over
// its caller's bounds: the config before it comes back, or the key goes.
func (s *Server) takeBack(ctx context.Context, kv jetstream.KeyValue, key string, prev jetstream.KeyValueEntry, rev uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pushTimeout)
	defer cancel()
	var err error
	if prev == nil {
		err = kv.Delete(ctx, key, jetstream.LastRevision(rev))
	} else {
		_, err = kv.Update(ctx, key, prev.Value(), rev)
	}
	if err != nil {
		s.log.Warn("cannot take back a push notification config over its caller's bounds", "key", key, "err", err)
	}
}

func storeError(err error) error {
	if bus.StoreFull(err) || errors.Is(err, jetstream.ErrMaxBytesExceeded) {
		return refuse(a2a.ErrServerError, "the bucket of push notification configs is full (its byte cap); nothing was kept, and it takes more as configs expire or are deleted")
	}
	return refuse(a2a.ErrServerError, "the bucket of push notification configs is unavailable (%v); try again shortly", err)
}

// scan returns the entries under the keys that filter matches, as they
// are now, in one pass over the bucket.
func scan(ctx context.Context, kv jetstream.KeyValue, filter string) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, storeError(err)
	}
	defer w.Stop()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, storeError(errors.New("the listing ended early"))
			}
			if e == nil {
				return out, nil
			}
			out = append(out, e)
		case <-ctx.Done():
			return nil, storeError(ctx.Err())
		}
	}
}

// stored is one config of a task as the bucket holds it.
type stored struct {
	key   string
	rev   uint64
	entry pushEntry
}

// configs returns the configs caller keeps for task id.
func (s *Server) configs(ctx context.Context, kv jetstream.KeyValue, id, caller string) ([]stored, error) {
	entries, err := scan(ctx, kv, taskKeys(caller, id))
	if err != nil {
		return nil, err
	}
	out := make([]stored, 0, len(entries))
	for _, e := range entries {
		var pe pushEntry
		if json.Unmarshal(e.Value(), &pe) != nil || pe.Caller != caller {
			continue
		}
		out = append(out, stored{key: e.Key(), rev: e.Revision(), entry: pe})
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
	e, err := kv.Get(ctx, configKey(r.Caller, string(p.TaskID), id))
	var pe pushEntry
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, storeError(err)
	case json.Unmarshal(e.Value(), &pe) == nil && pe.Caller == r.Caller:
		return &a2a.TaskPushConfig{TaskID: p.TaskID, Config: pe.Config}, nil
	}
	return nil, refuse(a2a.ErrInvalidParams, "task %s has no push notification config %q; tasks/pushNotificationConfig/list lists them", p.TaskID, id)
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
		out = append(out, &a2a.TaskPushConfig{TaskID: p.TaskID, Config: e.entry.Config})
	}
	return out, nil
}

// OnDeleteTaskPushConfig implements tasks/pushNotificationConfig/delete
// (without a config id, of the config whose id is the task's); deleting a config that is not there is not an error, and writes
// nothing: a delete leaves a marker in the bucket, which names that were
// never set must not fill.
func (s *Server) OnDeleteTaskPushConfig(ctx context.Context, p *a2a.DeleteTaskPushConfigParams) error {
	r, kv, err := s.pushRequest(ctx, p.TaskID)
	if err != nil {
		return err
	}
	key := configKey(r.Caller, string(p.TaskID), cmp.Or(p.ConfigID, string(p.TaskID)))
	_, err = kv.Get(ctx, key)
	if err == nil {
		err = kv.Delete(ctx, key)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return storeError(err)
	}
	return nil
}

// pushRequest checks a request about the push configs of task id: push
// notifications are on, and the task is the caller's.
func (s *Server) pushRequest(ctx context.Context, id a2a.TaskID) (request, jetstream.KeyValue, error) {
	r, err := requestOf(ctx)
	if err != nil {
		return request{}, nil, err
	}
	if s.push == nil {
		return request{}, nil, refuse(a2a.ErrPushNotificationNotSupported, "push notifications are not enabled on this server")
	}
	if _, err := s.own(ctx, r, id); err != nil {
		return request{}, nil, err
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
func (s *Server) followForPush(ctx context.Context, r request, id string) {
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
		err := s.follow(fctx, r, id, nil, func(rec *schema.JobRecord) error {
			if st := state(rec.State); st != last {
				last = st
				s.pushTask(fctx, kv, r.Caller, rec)
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

// pushTask POSTs the task of rec to every push config caller keeps for
// it. Once the task is final, its configs are marked so, and give their
// room to their caller's new configs when it needs it.
func (s *Server) pushTask(ctx context.Context, kv jetstream.KeyValue, caller string, rec *schema.JobRecord) {
	entries, err := s.configs(ctx, kv, rec.ID, caller)
	if err != nil {
		s.log.Warn("cannot read the push notification configs of a task", "task", rec.ID, "err", err)
		return
	}
	body, err := json.Marshal(task(rec))
	if err != nil {
		return
	}
	for _, e := range entries {
		if err := s.post(ctx, &e.entry.Config, body); err != nil {
			s.log.Warn("push notification not delivered", "task", rec.ID, "config", e.entry.Config.ID, "class", egress.Classify(err), "err", err)
		}
		if rec.State.Final() {
			e.entry.Final = now()
			b, _ := json.Marshal(e.entry)
			// A config set again meanwhile keeps its own revision, and
			// is not marked.
			_, _ = kv.Update(ctx, e.key, b, e.rev)
		}
	}
}

// newPushSender returns the sender of push notifications: one attempt
// each, bounded by pushTimeout, through guard.
func newPushSender(guard *egress.Guard) (*webhook.Sender, error) {
	return webhook.New(guard, webhook.WithUserAgent("toolbus-a2a-push"), webhook.WithTimeout(pushTimeout))
}

// post sends one notification as A2A defines it: the task as JSON, the
// config's token in X-A2A-Notification-Token, and its credentials in
// Authorization under the first scheme it names that is Bearer or Basic.
// It makes one attempt: the next change of the task's state is the next
// notification.
func (s *Server) post(ctx context.Context, c *a2a.PushConfig, body []byte) error {
	return s.sender.Deliver(ctx, webhook.Delivery{URL: c.URL, Body: body, Header: pushHeader(c)})
}

// pushHeader returns the headers that authenticate a notification to the
// receiver of c: its token and its credentials.
func pushHeader(c *a2a.PushConfig) http.Header {
	h := http.Header{}
	if c.Token != "" {
		h.Set(tokenHeader, c.Token)
	}
	if c.Auth == nil || c.Auth.Credentials == "" {
		return h
	}
	for _, scheme := range c.Auth.Schemes {
		switch strings.ToLower(scheme) {
		case "bearer":
			h.Set("Authorization", "Bearer "+c.Auth.Credentials)
			return h
		case "basic":
			h.Set("Authorization", "Basic "+c.Auth.Credentials)
			return h
		}
	}
	return h
}
