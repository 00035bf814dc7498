package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/ingress/door"
	"github.com/toolbus/toolbus/schema"
)

// callAsJob runs a tools/call as a durable job, when a job runner serves
// the tool and the call asked for progress or the tool declares that it
// asks its caller questions (a question needs a job to wait in). It
// submits the job through the same plan and dispatcher as any call (so
// authorization applies) and follows it ([Server.follow]). A client that
// cannot answer a form elicitation submits the job with can_ask false, so
// that a tool that asks fails cannot_ask at once instead of waiting for
// an answer nobody can give. It reports false when the call cannot run
// as a job, and the caller runs it as a plain call.
func (m *Server) callAsJob(ctx context.Context, req *mcp.CallToolRequest, hdr request, args json.RawMessage) (*mcp.CallToolResult, bool) {
	if req.Params.GetProgressToken() == nil && !m.asks(req.Params.Name) {
		return nil, false
	}
	if m.jobs == nil || !m.jobs.Promotable(ctx, req.Params.Name) {
		return nil, false
	}
	sp := map[string]any{"method": req.Params.Name, "params": args}
	if !canElicit(req.Session) {
		sp["can_ask"] = false
	}
	submit, _ := json.Marshal(sp)
	// Following the job counts a subscription: one past the caller's
	// bound is refused before the job exists.
	release, e := m.jobs.HoldSubscription(hdr.Caller)
	if e != nil {
		return toolError(e), true
	}
	defer release()
	r := hdr.call(ctx, m.nextID(), m.jobsPrefix+"submit", submit)
	if r.Error != nil {
		return toolError(r.Error), true
	}
	var job schema.JobSubmitResult
	if err := json.Unmarshal(r.Result, &job); err != nil || job.ID == "" {
		return toolError(internalError()), true
	}
	return m.followHeld(ctx, req, hdr, job.ID, nil, release), true
}

// resume serves the retry of a tools/call that returned a question as an
// input request (MCP 2026-07-28): its request state names the job and the
// question, and its input responses carry the client's answer, which
// goes to the job as rpc.jobs.answer from the retry's caller, so that
// only the job's own caller answers it. The job is then followed again.
// The retry may reach any replica whose request state key is the same.
// A request state this front door did not sign, one for another tool,
// and a retry without a response to the question are invalid params.
func (m *Server) resume(ctx context.Context, req *mcp.CallToolRequest, hdr request) (*mcp.CallToolResult, error) {
	st, err := m.states.open(req.Params.RequestState)
	if err != nil {
		m.log.Info("refused a tools/call retry whose request state does not verify", "tool", req.Params.Name, "err", err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid params: " + err.Error() +
			"; send back the requestState of the call's input_required result unchanged, or call the tool again without requestState to start over"}
	}
	if st.Tool != req.Params.Name {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"invalid params: requestState belongs to a call of tool %q, not %q; retry the call of %q with it, or call %q without it",
			st.Tool, req.Params.Name, st.Tool, req.Params.Name)}
	}
	res, ok := req.Params.InputResponses[st.Question].(*mcp.ElicitResult)
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"invalid params: inputResponses has no elicitation result under %q, the input request that requestState answers; retry with the client's response to it under that key",
			st.Question)}
	}
	if m.jobs == nil {
		return toolError(schema.NewError(schema.CodeUnavailable,
			"unavailable: this ingress runs no jobs, so it cannot resume job "+st.Job+"; retry on an ingress that does",
			map[string]any{"retryable": true, "job_id": st.Job})), nil
	}
	return m.follow(ctx, req, hdr, st.Job, &reply{question: st.Question, res: res}), nil
}

// reply is a client's response to a question of a job, brought by the
// retry of the call that asked it.
type reply struct {
	question string
	res      *mcp.ElicitResult
}

// follow follows job id, of the call req, until it is over or asks a
// question its client must answer through the call's result; it returns
// the call's result. It sends each progress report as an MCP progress
// notification (percent of a total of 100) and puts each question of the
// job to the client: at 2026-07-28 and later as the result's input
// request, with a signed request state that names the job and the
// question; before, with elicitation/create while it serves the call
// ([Server.elicit]). A reply, when not nil, answers the question the job
// waits on if that is still the question it names; a question answered
// already (the client sent its retry twice) is not answered again.
func (m *Server) follow(ctx context.Context, req *mcp.CallToolRequest, hdr request, id string, r *reply) *mcp.CallToolResult {
	return m.followHeld(ctx, req, hdr, id, r, nil)
}

// followHeld is [Server.follow] with held, when not nil, the release of
// a subscription [Jobs.HoldSubscription] counted for it.
func (m *Server) followHeld(ctx context.Context, req *mcp.CallToolRequest, hdr request, id string, r *reply, held func()) *mcp.CallToolResult {
	idParams, _ := json.Marshal(map[string]string{"id": id})
	call := schema.Call{Request: schema.Request{ID: m.nextID(), Method: m.jobsPrefix + "subscribe", Params: idParams}, Caller: hdr.Caller}
	var first json.RawMessage
	var stream func(context.Context, func(string, json.RawMessage))
	var e *schema.Error
	if held != nil {
		first, stream, e = m.jobs.SubscribeHeld(ctx, call, held)
	} else {
		first, stream, e = m.jobs.Subscribe(ctx, call)
	}
	if e != nil {
		return toolError(e)
	}
	token := req.Params.GetProgressToken()
	inResult := sessionless(protocolVersion(req.Session))
	canAsk := canElicit(req.Session)
	last := -1.0
	lastQuestion := "" // the id of the question handled last
	var end *schema.JobRecord
	var question *schema.JobQuestion
	// see reports the progress of a record and answers or puts its
	// question; it reports whether following is over (end or question
	// set). [door.Follow] calls it on this goroutine, one record after
	// the other, skipping versions when it is slow (or waits for the
	// client's answer).
	see := func(cur *schema.JobRecord) (bool, error) {
		if token != nil && cur.Progress != nil && cur.Progress.Percent > last {
			last = cur.Progress.Percent
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: cur.Progress.Percent, Total: 100, Message: cur.Progress.Message})
		}
		q := cur.Question
		if cur.State != schema.JobInputRequired {
			q = nil
		}
		if r != nil {
			if q != nil && q.ID == r.question {
				lastQuestion = q.ID
				m.answer(ctx, hdr, id, q.ID, r.res, nil)
			}
			r = nil
		}
		switch {
		case cur.State.Final():
			end = cur
			return true, nil
		case q == nil || q.ID == lastQuestion:
		case inResult:
			question = q
			return true, nil
		case canAsk:
			lastQuestion = q.ID
			m.elicit(ctx, req.Session, hdr, id, q)
		}
		return false, nil
	}
	_, err := door.Follow(ctx, first, stream, see)
	switch {
	case err != nil:
		return toolError(internalError())
	case end != nil:
		return jobResult(end, m.wrapped(req.Params.Name))
	case question != nil:
		return &mcp.CallToolResult{
			InputRequests: mcp.InputRequestMap{question.ID: elicitParams(question)},
			RequestState:  m.states.sign(requestState{Tool: req.Params.Name, Job: id, Question: question.ID}),
		}
	case ctx.Err() != nil:
		return toolError(schema.NewError(schema.CodeCanceled, "canceled: the client stopped waiting; job "+id+" goes on",
			map[string]any{"job_id": id}))
	}
	return toolError(schema.NewError(schema.CodeUnavailable,
		"unavailable: stopped following job "+id+" before it ended (its record is gone, or this ingress lost JetStream); poll "+m.jobsPrefix+"get",
		map[string]any{"retryable": true, "job_id": id}))
}

// elicitParams is question q as MCP asks it: a form elicitation.
func elicitParams(q *schema.JobQuestion) *mcp.ElicitParams {
	var requested map[string]any
	if err := json.Unmarshal(q.Schema, &requested); err != nil {
		requested = nil
	}
	return &mcp.ElicitParams{Message: q.Message, RequestedSchema: requested}
}

// elicit puts question q of job id to the client of ss with
// elicitation/create and answers the job with its response
// ([Server.answer]). When ctx ends first, nothing is answered: the job
// keeps waiting for its caller, who may answer it with rpc.jobs.answer.
func (m *Server) elicit(ctx context.Context, ss *mcp.ServerSession, hdr request, id string, q *schema.JobQuestion) {
	res, err := ss.Elicit(ctx, elicitParams(q))
	if ctx.Err() != nil {
		return
	}
	m.answer(ctx, hdr, id, q.ID, res, err)
}

// answer answers question qid of job id with the client's response res,
// or err when the client could not give one, as rpc.jobs.answer of the
// caller of hdr: accept with the client's content, decline as a decline.
// MCP's cancel (the person dismissed the question without a choice) is
// answered as a decline too: it is what the jobs' answer can say of a
// question left without a yes, and the tool then decides, as it does for
// rule 11's cancel. A response that failed, or whose content the jobs
// refuse (it does not fit the question's schema), is declined as well,
// so that the tool need not wait to its deadline.
func (m *Server) answer(ctx context.Context, hdr request, id, qid string, res *mcp.ElicitResult, err error) {
	answer := map[string]any{"id": id, "question": qid, "decline": true}
	switch {
	case err != nil:
		m.log.Info("declined a job's question the client could not answer", "job_id", id, "question_id", qid, "err", err)
	case res != nil && res.Action == "accept":
		content := res.Content
		if content == nil {
			content = map[string]any{}
		}
		answer = map[string]any{"id": id, "question": qid, "answer": content}
	}
	params, _ := json.Marshal(answer)
	r := hdr.call(ctx, m.nextID(), m.jobsPrefix+"answer", params)
	if r.Error != nil && answer["decline"] == nil {
		m.log.Info("declined a job's question whose answer was refused", "job_id", id, "question_id", qid, "err", r.Error)
		params, _ = json.Marshal(map[string]any{"id": id, "question": qid, "decline": true})
		r = hdr.call(ctx, m.nextID(), m.jobsPrefix+"answer", params)
	}
	if r.Error != nil {
		m.log.Info("could not answer a job's question", "job_id", id, "question_id", qid, "err", r.Error)
	}
}

// canElicit reports whether the client of ss declared that it can answer
// a form elicitation: at the revisions with sessions when it initialized
// the session, from 2026-07-28 in the request's own _meta.
func canElicit(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return false
	}
	caps := p.Capabilities.Elicitation
	return caps.Form != nil || caps.URL == nil
}

// protocolVersion is the MCP revision the client of ss speaks, or "" when
// it is not known.
func protocolVersion(ss *mcp.ServerSession) string {
	if ss == nil || ss.InitializeParams() == nil {
		return ""
	}
	return ss.InitializeParams().ProtocolVersion
}

// asks reports whether the registry's tool name declares that it may ask
// its caller a question (the descriptor's asks).
func (m *Server) asks(name string) bool {
	t, ok := m.reg.Lookup(name)
	return ok && t.Asks
}

func jobResult(rec *schema.JobRecord, wrap bool) *mcp.CallToolResult {
	switch {
	case rec.Error != nil:
		return toolError(rec.Error)
	case rec.State != schema.JobSucceeded:
		return toolError(schema.NewError(schema.CodeCanceled, "canceled: job "+rec.ID+" was canceled", map[string]any{"job_id": rec.ID}))
	}
	return success(rec.Result, wrap)
}
