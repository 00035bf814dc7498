package mcp

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/schema"
)

// callAsJob runs a tools/call as a durable job, when a job runner serves
// the tool and the call asked for progress or the tool declares that it
// asks its caller questions (a question needs a job to wait in). It
// submits the job through the same plan and dispatcher as any call (so
// authorization applies), follows its record, sends each progress report
// as an MCP progress notification (percent of a total of 100), and puts
// each question of the job to the client (see [Server.elicit]). A session
// that cannot elicit submits the job with can_ask false, so that a tool
// that asks fails cannot_ask at once instead of waiting for an answer
// nobody can give. It reports false when the call cannot run as a job,
// and the caller runs it as a plain call.
func (m *Server) callAsJob(ctx context.Context, req *mcp.CallToolRequest, hdr request, args json.RawMessage) (*mcp.CallToolResult, bool) {
	token := req.Params.GetProgressToken()
	if token == nil && !m.asks(req.Params.Name) {
		return nil, false
	}
	if m.jobs == nil || !m.jobs.Promotable(ctx, req.Params.Name) {
		return nil, false
	}
	canAsk := canElicit(req.Session)
	prefix := m.jobsPrefix
	sp := map[string]any{"method": req.Params.Name, "params": args}
	if !canAsk {
		sp["can_ask"] = false
	}
	submit, _ := json.Marshal(sp)
	r := hdr.call(ctx, m.nextID(), prefix+"submit", submit)
	if r.Error != nil {
		return toolError(r.Error), true
	}
	var job schema.JobSubmitResult
	if err := json.Unmarshal(r.Result, &job); err != nil || job.ID == "" {
		return toolError(internalError()), true
	}
	idParams, _ := json.Marshal(map[string]string{"id": job.ID})
	call := schema.Call{Request: schema.Request{ID: m.nextID(), Method: prefix + "subscribe", Params: idParams}, Caller: hdr.Caller}
	first, stream, e := m.jobs.Subscribe(ctx, call)
	if e != nil {
		return toolError(e), true
	}
	last := -1.0
	asked := ""
	// see reports the progress of a record and puts its question to the
	// client; it returns the record when it is final, or nil. stream
	// calls it on this goroutine, one record after the other, skipping
	// versions when it is slow (or waits for the client's answer).
	see := func(raw json.RawMessage) (*schema.JobRecord, error) {
		var cur schema.JobRecord
		if err := json.Unmarshal(raw, &cur); err != nil {
			return nil, err
		}
		if token != nil && cur.Progress != nil && cur.Progress.Percent > last {
			last = cur.Progress.Percent
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: cur.Progress.Percent, Total: 100, Message: cur.Progress.Message})
		}
		if q := cur.Question; canAsk && cur.State == schema.JobInputRequired && q != nil && q.ID != asked {
			asked = q.ID
			m.elicit(ctx, req.Session, hdr, job.ID, q)
		}
		if cur.State.Final() {
			return &cur, nil
		}
		return nil, nil
	}
	end, err := see(first)
	if end == nil && err == nil {
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		stream(sctx, func(method string, params json.RawMessage) {
			if !strings.HasSuffix(method, ".progress") || end != nil || err != nil {
				return
			}
			if end, err = see(params); end != nil || err != nil {
				stop()
			}
		})
	}
	switch {
	case err != nil:
		return toolError(internalError()), true
	case end != nil:
		return jobResult(end, m.wrapped(req.Params.Name)), true
	case ctx.Err() != nil:
		return toolError(schema.NewError(schema.CodeCanceled, "canceled: the client stopped waiting; job "+job.ID+" goes on",
			map[string]any{"job_id": job.ID})), true
	}
	return toolError(schema.NewError(schema.CodeUnavailable,
		"unavailable: stopped following job "+job.ID+" before it ended (its record is gone, or this ingress lost JetStream); poll "+prefix+"get",
		map[string]any{"retryable": true, "job_id": job.ID})), true
}

// elicit puts question q of job id to the client with elicitation/create
// and answers the job with rpc.jobs.answer: accept with the client's
// content, decline as a decline. MCP's cancel (the person dismissed the
// question without a choice) is answered as a decline too: it is what the
// jobs' answer can say of a question left without a yes, and the tool
// then decides, as it does for rule 11's cancel. An elicitation that
// fails (the client's handler errs, or its content does not fit the
// question's schema) is declined as well, so that the tool need not wait
// to its deadline. When ctx ends first, nothing is answered: the job
// keeps waiting for its caller, who may answer it with rpc.jobs.answer.
func (m *Server) elicit(ctx context.Context, ss *mcp.ServerSession, hdr request, id string, q *schema.JobQuestion) {
	var requested map[string]any
	if err := json.Unmarshal(q.Schema, &requested); err != nil {
		requested = nil
	}
	answer := map[string]any{"id": id, "decline": true}
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: q.Message, RequestedSchema: requested})
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		m.log.Info("declined a job's question the client could not answer", "job_id", id, "question_id", q.ID, "err", err)
	case res.Action == "accept":
		content := res.Content
		if content == nil {
			content = map[string]any{}
		}
		answer = map[string]any{"id": id, "answer": content}
	}
	params, _ := json.Marshal(answer)
	r := hdr.call(ctx, m.nextID(), m.jobsPrefix+"answer", params)
	if r.Error != nil && answer["decline"] == nil {
		// The jobs refused the content: the tool gets a decline rather
		// than a wait to its deadline.
		m.log.Info("declined a job's question whose answer was refused", "job_id", id, "question_id", q.ID, "err", r.Error)
		params, _ = json.Marshal(map[string]any{"id": id, "decline": true})
		r = hdr.call(ctx, m.nextID(), m.jobsPrefix+"answer", params)
	}
	if r.Error != nil {
		m.log.Info("could not answer a job's question", "job_id", id, "question_id", q.ID, "err", r.Error)
	}
}

// canElicit reports whether the client of ss declared that it can answer
// a form elicitation, at a protocol revision where the server may send
// elicitation/create while it serves a call: from 2026-07-28 the SDK
// refuses it, wanting the question returned as the call's input request
// instead, which this front door, a stateful Streamable HTTP server, is
// never asked to speak.
func canElicit(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil || p.ProtocolVersion >= firstInputRequestsRevision {
		return false
	}
	caps := p.Capabilities.Elicitation
	return caps.Form != nil || caps.URL == nil
}

// firstInputRequestsRevision is the first MCP revision in which a server
// asks its client through the result of the call (input requests) and may
// no longer send elicitation/create while serving it.
const firstInputRequestsRevision = "2026-07-28"

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
