package mcp

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/schema"
)

// callAsJob runs a tools/call that asked for progress as a durable job, when
// a job runner serves the tool: it submits the job through the same plan
// and dispatcher as any call (so authorization applies), follows its record
// and sends each progress report as an MCP progress notification (percent
// of a total of 100). It reports false when the call cannot run as a job,
// and the caller runs it as a plain call.
func (m *Server) callAsJob(ctx context.Context, req *mcp.CallToolRequest, hdr request, args json.RawMessage) (*mcp.CallToolResult, bool) {
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil, false
	}
	if m.jobs == nil || !m.jobs.Promotable(ctx, req.Params.Name) {
		return nil, false
	}
	prefix := m.jobsPrefix
	submit, _ := json.Marshal(map[string]any{"method": req.Params.Name, "params": args})
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
	// see reports the progress of a record; it returns the record when it
	// is final, or nil. stream calls it on this goroutine, one record
	// after the other, skipping versions when it is slow.
	see := func(raw json.RawMessage) (*schema.JobRecord, error) {
		var cur schema.JobRecord
		if err := json.Unmarshal(raw, &cur); err != nil {
			return nil, err
		}
		if cur.Progress != nil && cur.Progress.Percent > last {
			last = cur.Progress.Percent
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: cur.Progress.Percent, Total: 100, Message: cur.Progress.Message})
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

func jobResult(rec *schema.JobRecord, wrap bool) *mcp.CallToolResult {
	switch {
	case rec.Error != nil:
		return toolError(rec.Error)
	case rec.State != schema.JobSucceeded:
		return toolError(schema.NewError(schema.CodeCanceled, "canceled: job "+rec.ID+" was canceled", map[string]any{"job_id": rec.ID}))
	}
	return success(rec.Result, wrap)
}
