package a2abridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
)

// DefaultPollInterval is how often [Follow] reads a task that it cannot
// stream.
const DefaultPollInterval = 500 * time.Millisecond

// cancelTimeout bounds the tasks/cancel sent for a call that ended: its own
// context is already over.
const cancelTimeout = 5 * time.Second

// Update is a change of a remote task's status, seen while following it.
type Update struct {
	TaskID a2a.TaskID
	State  a2a.TaskState
	// Message is the text of the status's message, if it has one.
	Message string
}

// FollowOptions says how [Follow] follows a task. The zero value polls
// every [DefaultPollInterval] and reports nothing.
type FollowOptions struct {
	// Streaming sends message/stream and reads the task's events as they
	// come; without it the message is sent with message/send (not
	// blocking) and the task is read with tasks/get every PollInterval.
	// Set it when the agent's card says it can stream.
	Streaming bool
	// PollInterval is how often the task is read when it is not streamed
	// (default [DefaultPollInterval]).
	PollInterval time.Duration
	// OnUpdate, when set, receives every change of the task's status, on
	// Follow's goroutine.
	OnUpdate func(Update)
}

// Outcome is how an exchange with an agent ended.
type Outcome struct {
	// Task is the remote task in its last known state; nil when the agent
	// answered with a message and started no task.
	Task *a2a.Task
	// Message is the agent's answer when it started no task.
	Message *a2a.Message
}

// Follow sends msg through c and follows the task it starts until the task
// ends (completed, failed, rejected, canceled) or stops for input
// (input-required, auth-required), reporting each status change to
// opts.OnUpdate. A stream that ends before the task does is followed on by
// polling. When ctx ends first, Follow asks the agent to cancel the task
// (tasks/cancel, bounded by a few seconds of its own) and returns ctx's
// error.
func Follow(ctx context.Context, c *a2aclient.Client, msg *a2a.Message, opts FollowOptions) (*Outcome, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	f := &follower{c: c, opts: opts}
	out, err := f.run(ctx, &a2a.MessageSendParams{Message: msg})
	if ctx.Err() != nil {
		f.cancel(ctx)
		return nil, ctx.Err()
	}
	return out, err
}

// follower keeps what is known of one remote task while it is followed.
type follower struct {
	c    *a2aclient.Client
	opts FollowOptions
	task *a2a.Task // nil until the agent names the task
	last Update
}

func (f *follower) run(ctx context.Context, params *a2a.MessageSendParams) (*Outcome, error) {
	// The request that starts the task outlives a call that ends before
	// the agent named the task, so that the task can still be canceled.
	l := newLeash(ctx)
	defer l.release()
	if f.opts.Streaming {
		out, err := f.stream(ctx, l, params)
		if out != nil || (err != nil && f.task == nil) || ctx.Err() != nil {
			return out, err
		}
		// The stream broke or ended early, but the task goes on: poll it.
		return f.poll(ctx)
	}
	res, err := f.c.SendMessage(l.ctx, params)
	if err != nil {
		return nil, fmt.Errorf("message/send: %w", err)
	}
	if out := f.see(res); out != nil || ctx.Err() != nil {
		return out, nil
	}
	return f.poll(ctx)
}

// stream reads the events of message/stream. It returns the outcome when
// the task ended on the stream, else nil and why the stream stopped.
func (f *follower) stream(ctx context.Context, l *leash, params *a2a.MessageSendParams) (*Outcome, error) {
	for ev, err := range f.c.SendStreamingMessage(l.ctx, params) {
		if err != nil {
			return nil, fmt.Errorf("message/stream: %w", err)
		}
		out := f.see(ev)
		if out != nil {
			return out, nil
		}
		if f.task != nil {
			l.named()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return nil, nil
}

// leash is the context of the request that starts a task. It ends with
// the call's context once the agent has named the task; before that it
// outlives the call's context by up to cancelTimeout, to learn the task's
// id.
type leash struct {
	ctx   context.Context
	stop  context.CancelFunc
	unreg func() bool

	mu      sync.Mutex
	isNamed bool
	grace   *time.Timer
}

func newLeash(parent context.Context) *leash {
	l := &leash{}
	l.ctx, l.stop = context.WithCancel(context.WithoutCancel(parent))
	l.unreg = context.AfterFunc(parent, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.isNamed {
			l.stop()
			return
		}
		l.grace = time.AfterFunc(cancelTimeout, l.stop)
	})
	return l
}

// named says the agent has named the task.
func (l *leash) named() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isNamed {
		return
	}
	l.isNamed = true
	if l.grace != nil {
		l.grace.Stop()
		l.stop()
	}
}

func (l *leash) release() {
	l.unreg()
	l.mu.Lock()
	if l.grace != nil {
		l.grace.Stop()
	}
	l.mu.Unlock()
	l.stop()
}

// poll reads the task with tasks/get until it ends.
func (f *follower) poll(ctx context.Context) (*Outcome, error) {
	if f.task == nil {
		return nil, errors.New("the agent answered with no task and no message")
	}
	t := time.NewTimer(f.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		task, err := f.c.GetTask(ctx, &a2a.TaskQueryParams{ID: f.task.ID})
		if err != nil {
			return nil, fmt.Errorf("tasks/get %s: %w", f.task.ID, err)
		}
		if out := f.see(task); out != nil {
			return out, nil
		}
		t.Reset(f.opts.PollInterval)
	}
}

// see takes in one event of the task and returns the outcome once the
// task has ended.
func (f *follower) see(ev a2a.Event) *Outcome {
	switch e := ev.(type) {
	case *a2a.Message:
		if f.task == nil {
			return &Outcome{Message: e}
		}
		// A message within a task is conversation, not status.
		return nil
	case *a2a.Task:
		f.task = e
	case *a2a.TaskStatusUpdateEvent:
		f.ensure(e.TaskID, e.ContextID)
		f.task.Status = e.Status
	case *a2a.TaskArtifactUpdateEvent:
		f.ensure(e.TaskID, e.ContextID)
		f.task.Artifacts = addArtifact(f.task.Artifacts, e)
		return nil
	default:
		return nil
	}
	f.report()
	if ended(f.task.Status.State) {
		return &Outcome{Task: f.task}
	}
	return nil
}

// ensure makes the task an event names known, when no task event came
// first.
func (f *follower) ensure(id a2a.TaskID, contextID string) {
	if f.task == nil {
		f.task = &a2a.Task{ID: id, ContextID: contextID}
	}
}

func (f *follower) report() {
	u := Update{TaskID: f.task.ID, State: f.task.Status.State, Message: Text(f.task.Status.Message)}
	if u == f.last || f.opts.OnUpdate == nil {
		f.last = u
		return
	}
	f.last = u
	f.opts.OnUpdate(u)
}

// cancel asks the agent to cancel the task, if it started one that has
// not ended, after ctx has ended.
func (f *follower) cancel(ctx context.Context) {
	if f.task == nil || ended(f.task.Status.State) {
		return
	}
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer stop()
	// The call's own answer is its context's error; a cancel that fails
	// leaves the task to the agent, which is all that can be done.
	_, _ = f.c.CancelTask(ctx, &a2a.TaskIDParams{ID: f.task.ID})
}

// ended reports whether a task in state s will change no more without
// something from the caller.
func ended(s a2a.TaskState) bool {
	return s.Terminal() || s == a2a.TaskStateInputRequired || s == a2a.TaskStateAuthRequired
}

// addArtifact applies an artifact event to the artifacts seen so far:
// an appended chunk joins the artifact of its id, any other replaces it.
func addArtifact(arts []*a2a.Artifact, e *a2a.TaskArtifactUpdateEvent) []*a2a.Artifact {
	if e.Artifact == nil {
		return arts
	}
	for i, a := range arts {
		if a.ID != e.Artifact.ID {
			continue
		}
		if e.Append {
			joined := *a
			joined.Parts = append(append(a2a.ContentParts{}, a.Parts...), e.Artifact.Parts...)
			arts[i] = &joined
		} else {
			arts[i] = e.Artifact
		}
		return arts
	}
	return append(arts, e.Artifact)
}

// Text returns the text parts of m joined by line breaks; "" for nil.
func Text(m *a2a.Message) string {
	if m == nil {
		return ""
	}
	return partsText(m.Parts)
}

func partsText(parts a2a.ContentParts) string {
	var texts []string
	for _, p := range parts {
		if t, ok := p.(a2a.TextPart); ok {
			texts = append(texts, t.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// Result returns the JSON value an exchange that succeeded answers: of
// the parts of the task's artifacts (or, when it has none, of its final
// status message, or of the agent's message when it made no task), the
// data when there is exactly one part and it is a data part, the text
// joined by line breaks when every part is text, else the parts as A2A
// writes them (an array, empty when there are none).
func Result(o *Outcome) (json.RawMessage, error) {
	var parts a2a.ContentParts
	switch {
	case o.Task != nil:
		for _, a := range o.Task.Artifacts {
			parts = append(parts, a.Parts...)
		}
		if len(parts) == 0 && o.Task.Status.Message != nil {
			parts = o.Task.Status.Message.Parts
		}
	case o.Message != nil:
		parts = o.Message.Parts
	}
	if len(parts) == 1 {
		if d, ok := parts[0].(a2a.DataPart); ok {
			return json.Marshal(d.Data)
		}
	}
	allText := len(parts) > 0
	for _, p := range parts {
		if _, ok := p.(a2a.TextPart); !ok {
			allText = false
		}
	}
	if allText {
		return json.Marshal(partsText(parts))
	}
	if parts == nil {
		parts = a2a.ContentParts{}
	}
	return json.Marshal(parts)
}
