package a2a

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// ResultArtifactID names the artifact that carries a completed task's
// result.
const ResultArtifactID a2a.ArtifactID = "result"

// state is the A2A state of a job state; the two correspond one to one.
func state(s schema.JobState) a2a.TaskState {
	switch s {
	case schema.JobQueued:
		return a2a.TaskStateSubmitted
	case schema.JobRunning:
		return a2a.TaskStateWorking
	case schema.JobSucceeded:
		return a2a.TaskStateCompleted
	case schema.JobFailed:
		return a2a.TaskStateFailed
	case schema.JobCanceled:
		return a2a.TaskStateCanceled
	}
	return a2a.TaskStateUnknown
}

// task returns the A2A task of a job record: its id is the job's, its
// context the job's context_id, a completed task carries the result as
// the data part of the artifact [ResultArtifactID], and the status message
// says the progress or the error.
func task(rec *schema.JobRecord) *a2a.Task {
	t := &a2a.Task{
		ID:        a2a.TaskID(rec.ID),
		ContextID: rec.ContextID,
		Status:    status(rec),
		Metadata:  map[string]any{"method": rec.Method},
	}
	if rec.State == schema.JobSucceeded {
		t.Artifacts = []*a2a.Artifact{artifact(rec)}
	}
	return t
}

// status returns the A2A status of a job record, at the time of its last
// change.
func status(rec *schema.JobRecord) a2a.TaskStatus {
	at := rec.CreatedAt
	switch {
	case rec.FinishedAt != nil:
		at = *rec.FinishedAt
	case rec.StartedAt != nil:
		at = *rec.StartedAt
	}
	at = at.UTC().Truncate(time.Millisecond)
	st := a2a.TaskStatus{State: state(rec.State), Timestamp: &at}
	switch {
	case rec.Error != nil && rec.State.Final():
		e := map[string]any{"code": rec.Error.Code, "message": rec.Error.Message}
		if len(rec.Error.Data) > 0 {
			e["data"] = rawValue(rec.Error.Data)
		}
		st.Message = agentMessage(rec, a2a.TextPart{Text: rec.Error.Message}, a2a.DataPart{Data: map[string]any{"error": e}})
	case rec.Progress != nil && !rec.State.Final():
		parts := []a2a.Part{a2a.DataPart{Data: map[string]any{"percent": rec.Progress.Percent}}}
		if rec.Progress.Message != "" {
			parts = append([]a2a.Part{a2a.TextPart{Text: rec.Progress.Message}}, parts...)
		}
		st.Message = agentMessage(rec, parts...)
	}
	return st
}

func agentMessage(rec *schema.JobRecord, parts ...a2a.Part) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleAgent, parts...)
	m.TaskID, m.ContextID = a2a.TaskID(rec.ID), rec.ContextID
	return m
}

// artifact returns the result of a succeeded job as an artifact with one
// data part: the result itself when it is a JSON object, and otherwise
// {"result": <the result>}, since a data part holds an object. Numbers
// keep every digit.
func artifact(rec *schema.JobRecord) *a2a.Artifact {
	data, ok := rawValue(rec.Result).(map[string]any)
	if !ok {
		data = map[string]any{"result": rawValue(rec.Result)}
	}
	return &a2a.Artifact{ID: ResultArtifactID, Name: "result", Parts: a2a.ContentParts{a2a.DataPart{Data: data}}}
}

// rawValue decodes raw JSON keeping numbers as they are written.
func rawValue(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return string(raw)
	}
	return v
}

// events returns the A2A events that take a client who has seen prev (nil:
// nothing yet) to cur: a status update when the state or the progress
// changed, and for a completed task first the artifact of its result.
// The status update of a final state is marked final.
func events(prev, cur *schema.JobRecord) []a2a.Event {
	if prev != nil && prev.State == cur.State && sameProgress(prev.Progress, cur.Progress) {
		return nil
	}
	var out []a2a.Event
	if cur.State == schema.JobSucceeded {
		out = append(out, &a2a.TaskArtifactUpdateEvent{TaskID: a2a.TaskID(cur.ID), ContextID: cur.ContextID,
			Artifact: artifact(cur), LastChunk: true})
	}
	return append(out, &a2a.TaskStatusUpdateEvent{TaskID: a2a.TaskID(cur.ID), ContextID: cur.ContextID,
		Status: status(cur), Final: cur.State.Final()})
}

func sameProgress(a, b *schema.JobProgress) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
