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
	records := make(chan json.RawMessage, 16)
	streamCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		defer close(records)
		stream(streamCtx, func(method string, params json.RawMessage) {
			if !strings.HasSuffix(method, ".progress") {
				return
			}
			select {
			case records <- params:
			case <-streamCtx.Done():
			}
		})
	}()
	last := -1.0
	rec := first
	for {
		var cur schema.JobRecord
		if err := json.Unmarshal(rec, &cur); err != nil {
			return toolError(internalError()), true
		}
		if cur.Progress != nil && cur.Progress.Percent > last {
			last = cur.Progress.Percent
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: cur.Progress.Percent, Total: 100, Message: cur.Progress.Message})
		}
		if cur.State.Final() {
			return jobResult(&cur, m.wrapped(req.Params.Name)), true
		}
		var ok bool
		select {
		case rec, ok = <-records:
		case <-ctx.Done():
			return toolError(schema.NewError(schema.CodeCanceled, "canceled: the client stopped waiting; job "+job.ID+" goes on",
				map[string]any{"job_id": job.ID})), true
		}
		if !ok {
			// The stream ended before a final record: read it once more.
			g, _ := json.Marshal(map[string]string{"id": job.ID})
			r := hdr.call(ctx, m.nextID(), prefix+"get", g)
			if r.Error != nil {
				return toolError(r.Error), true
			}
			var end schema.JobRecord
			if json.Unmarshal(r.Result, &end) != nil || !end.State.Final() {
				return toolError(schema.NewError(schema.CodeUnavailable, "unavailable: lost track of job "+job.ID,
					map[string]any{"retryable": true, "job_id": job.ID})), true
			}
			return jobResult(&end, m.wrapped(req.Params.Name)), true
		}
	}
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
