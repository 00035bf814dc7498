// Package a2abridgetest runs a small A2A agent over loopback HTTP for
// tests of code that talks to A2A agents, as net/http/httptest runs an
// HTTP server. The agent is written with the A2A SDK's server package on
// its in-memory task store.
//
// Its skills, chosen by the skill id in the message's metadata
// ([a2abridge.SkillMetadataKey]; echo when there is none):
//
//   - echo: answers one artifact with the message's parts;
//   - steps: reports "step 1" and "step 2" while working, then answers
//     the text "done";
//   - fail: fails with the message "insufficient funds";
//   - wait: works until it is canceled, reporting on [Agent.Started] and
//     [Agent.Canceled];
//   - secret (only with [WithToken], on the extended card): answers the
//     text "secret".
package a2abridgetest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"
)

// skillKey is the metadata key naming the skill; a2abridge.SkillMetadataKey
// is the same, not imported so that the bridge's own tests can use this
// package.
const skillKey = "skill"

// Agent is a running test agent.
type Agent struct {
	// URL is the agent's base URL, under which its card is served at
	// /.well-known/agent-card.json.
	URL string
	// Endpoint is the URL of its JSON-RPC endpoint.
	Endpoint string
	// Started receives the id of each task of the skill wait once it
	// works; Canceled the id of each task canceled. Both are buffered
	// and drop what does not fit.
	Started, Canceled chan a2a.TaskID

	streaming bool
	token     string
	mu        sync.Mutex
	withdrawn map[string]bool
	addr      string
	mux       *http.ServeMux
	srv       *httptest.Server
}

// Option configures [Start].
type Option func(*Agent)

// WithStreaming sets whether the agent's card says it can stream (default
// true).
func WithStreaming(on bool) Option { return func(a *Agent) { a.streaming = on } }

// WithToken makes the agent's JSON-RPC endpoint require the header
// "Authorization: Bearer token" and offer an extended card with the skill
// secret besides the others. The public card stays public.
func WithToken(token string) Option { return func(a *Agent) { a.token = token } }

// Start starts an agent on a loopback port and stops it when the test
// ends.
func Start(t testing.TB, opts ...Option) *Agent {
	t.Helper()
	a := &Agent{streaming: true, Started: make(chan a2a.TaskID, 16), Canceled: make(chan a2a.TaskID, 16),
		withdrawn: map[string]bool{}}
	for _, o := range opts {
		o(a)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("a2abridgetest: %v", err)
	}
	a.addr = l.Addr().String()
	a.URL = "http://" + a.addr
	a.Endpoint = a.URL + "/a2a"

	public := func(context.Context) (*a2a.AgentCard, error) {
		c := a.card(false)
		c.SupportsAuthenticatedExtendedCard = a.token != ""
		return c, nil
	}
	hopts := []a2asrv.RequestHandlerOption{a2asrv.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if a.token != "" {
		hopts = append(hopts, a2asrv.WithExtendedAgentCard(a.card(true)))
	}
	rpc := a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(&executor{a}, hopts...))
	a.mux = http.NewServeMux()
	a.mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewAgentCardHandler(a2asrv.AgentCardProducerFn(public)))
	a.mux.Handle("/a2a", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token != "" && r.Header.Get("Authorization") != "Bearer "+a.token {
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		rpc.ServeHTTP(w, r)
	}))
	a.serve(l)
	t.Cleanup(a.Stop)
	return a
}

func (a *Agent) serve(l net.Listener) {
	a.srv = httptest.NewUnstartedServer(a.mux)
	a.srv.Listener.Close()
	a.srv.Listener = l
	a.srv.Start()
}

// Stop closes the agent's server, as an agent going away would. It waits
// for requests in flight.
func (a *Agent) Stop() { a.srv.Close() }

// Restart serves the agent again on the address it had, after [Agent.Stop].
func (a *Agent) Restart(t testing.TB) {
	t.Helper()
	l, err := net.Listen("tcp", a.addr)
	if err != nil {
		t.Fatalf("a2abridgetest: listen again on %s: %v", a.addr, err)
	}
	a.serve(l)
}

// Withdraw drops the skill id from the agent's cards.
func (a *Agent) Withdraw(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.withdrawn[id] = true
}

func (a *Agent) card(extended bool) *a2a.AgentCard {
	skills := []a2a.AgentSkill{
		{ID: "echo", Name: "Echo", Description: "answers the message's parts", Examples: []string{"hello"}},
		{ID: "fail", Name: "Fail", Description: "always fails"},
		{ID: "steps", Name: "Steps", Description: "works in two steps"},
		{ID: "wait", Name: "Wait", Description: "works until canceled"},
	}
	if extended {
		skills = append(skills, a2a.AgentSkill{ID: "secret", Name: "Secret", Description: "for authenticated callers"})
	}
	a.mu.Lock()
	skills = slices.DeleteFunc(skills, func(s a2a.AgentSkill) bool { return a.withdrawn[s.ID] })
	a.mu.Unlock()
	return &a2a.AgentCard{
		Name:               "test agent",
		Description:        "an agent for tests",
		URL:                a.Endpoint,
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		ProtocolVersion:    "0.3.0",
		Version:            "1.2.3",
		Capabilities:       a2a.AgentCapabilities{Streaming: a.streaming},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		Skills:             skills,
	}
}

type executor struct{ a *Agent }

func (e *executor) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	status := func(state a2a.TaskState, text string) error {
		var msg *a2a.Message
		if text != "" {
			msg = a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: text})
		}
		ev := a2a.NewStatusUpdateEvent(rc, state, msg)
		ev.Final = state.Terminal()
		return q.Write(ctx, ev)
	}
	// A status event first, not the task: the SDK's task manager changes
	// a task event it was given while the stream may still write it.
	if err := status(a2a.TaskStateSubmitted, ""); err != nil {
		return err
	}
	answer := func(parts ...a2a.Part) error {
		if err := q.Write(ctx, a2a.NewArtifactEvent(rc, parts...)); err != nil {
			return err
		}
		return status(a2a.TaskStateCompleted, "")
	}
	skill, _ := rc.Message.Metadata[skillKey].(string)
	switch skill {
	case "", "echo":
		if err := status(a2a.TaskStateWorking, "echoing"); err != nil {
			return err
		}
		return answer(rc.Message.Parts...)
	case "steps":
		for _, s := range []string{"step 1", "step 2"} {
			if err := status(a2a.TaskStateWorking, s); err != nil {
				return err
			}
		}
		return answer(a2a.TextPart{Text: "done"})
	case "fail":
		return status(a2a.TaskStateFailed, "insufficient funds")
	case "wait":
		if err := status(a2a.TaskStateWorking, "waiting"); err != nil {
			return err
		}
		send(e.a.Started, rc.TaskID)
		// The task's context ends once its cancellation is processed.
		<-ctx.Done()
		return nil
	case "secret":
		return answer(a2a.TextPart{Text: "secret"})
	}
	return status(a2a.TaskStateRejected, "no skill "+skill)
}

func (e *executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	send(e.a.Canceled, rc.TaskID)
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func send(ch chan a2a.TaskID, id a2a.TaskID) {
	select {
	case ch <- id:
	default:
	}
}
