package a2a

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
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
	case schema.JobInputRequired:
		return a2a.TaskStateInputRequired
	case schema.JobSucceeded:
		return a2a.TaskStateCompleted
	case schema.JobFailed:
		return a2a.TaskStateFailed
	case schema.JobCanceled:
		return a2a.TaskStateCanceled
	}
	return a2a.TaskStateUnknown
}

// Keys of a task's metadata.
const (
	// MetaMethod names the skill (the toolbus method) the task runs.
	MetaMethod = "method"
	// MetaReferenceTaskIDs lists the referenceTaskIds of the message
	// that started the task.
	MetaReferenceTaskIDs = "referenceTaskIds"
	// MetaHistoryDropped counts the oldest messages of the task's
	// history that were dropped to keep it within its budget.
	MetaHistoryDropped = "historyDropped"
)

// task returns the A2A task of a job record: its id is the job's, its
// context the job's context_id, its history the job's messages, a
// completed task carries the result as the data part of the artifact
// [ResultArtifactID], and the status message says the progress or the
// error. Its metadata names the method, the references of the message
// that started it ([MetaReferenceTaskIDs]) and how many of its oldest
// messages were dropped ([MetaHistoryDropped]).
func task(rec *schema.JobRecord) *a2a.Task {
	t := &a2a.Task{
		ID:        a2a.TaskID(rec.ID),
		ContextID: rec.ContextID,
		Status:    status(rec),
		History:   history(rec),
		Metadata:  map[string]any{MetaMethod: rec.Method},
	}
	if len(rec.References) > 0 {
		t.Metadata[MetaReferenceTaskIDs] = rec.References
	}
	if rec.HistoryDropped > 0 {
		t.Metadata[MetaHistoryDropped] = rec.HistoryDropped
	}
	if rec.State == schema.JobSucceeded {
		t.Artifacts = []*a2a.Artifact{artifact(rec)}
	}
	return t
}

// lastMessages keeps the last n messages of t's history, as
// historyLength asks: all of them when n is nil, none when it is 0.
func lastMessages(t *a2a.Task, n *int) *a2a.Task {
	switch {
	case n == nil:
	case *n <= 0:
		t.History = nil
	case *n < len(t.History):
		t.History = t.History[len(t.History)-*n:]
	}
	return t
}

// history returns the messages of a job as A2A messages, oldest first.
func history(rec *schema.JobRecord) []*a2a.Message {
	if len(rec.History) == 0 {
		return nil
	}
	out := make([]*a2a.Message, 0, len(rec.History))
	for _, m := range rec.History {
		out = append(out, message(rec, m))
	}
	return out
}

// message returns a message of a job's history as an A2A message: the
// client's own message as it sent it (its taskId and contextId those of
// the task), a message of the job as an agent message of its text and
// data.
func message(rec *schema.JobRecord, m schema.JobMessage) *a2a.Message {
	if len(m.Content) > 0 {
		if msg, ok := decodeMessage(m.Content); ok {
			msg.TaskID, msg.ContextID = a2a.TaskID(rec.ID), rec.ContextID
			return msg
		}
	}
	var parts []a2a.Part
	if m.Text != "" {
		parts = append(parts, a2a.TextPart{Text: m.Text})
	}
	if data, ok := rawValue(m.Data).(map[string]any); ok {
		parts = append(parts, a2a.DataPart{Data: data})
	}
	role := a2a.MessageRoleAgent
	if m.Role == schema.JobRoleUser {
		role = a2a.MessageRoleUser
	}
	return &a2a.Message{ID: m.ID, Role: role, Parts: parts, TaskID: a2a.TaskID(rec.ID), ContextID: rec.ContextID}
}

// decodeMessage decodes an A2A message keeping the numbers of its data
// parts and metadata as they are written, since the SDK would read them
// as float64.
func decodeMessage(raw json.RawMessage) (*a2a.Message, bool) {
	var msg a2a.Message
	if json.Unmarshal(raw, &msg) != nil {
		return nil, false
	}
	for i, data := range rawParts(raw) {
		if p, ok := msg.Parts[i].(a2a.DataPart); ok && data != nil {
			if exact, ok := rawValue(data).(map[string]any); ok {
				p.Data = exact
				msg.Parts[i] = p
			}
		}
	}
	var meta struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(raw, &meta) == nil {
		if exact, ok := rawValue(meta.Metadata).(map[string]any); ok {
			msg.Metadata = exact
		}
	}
	return &msg, true
}

// status returns the A2A status of a job record, at the time of its last
// change. The status of an input-required task carries its question: the
// message as a text part, and a data part with the question's id
// ([QuestionIDKey]) and the JSON Schema of the answer
// ([QuestionSchemaKey]). Its message is a message of the job's history when the history
// holds what it says, and otherwise a message whose id is made of what it
// says: either way, every read of the same status gives the same
// messageId.
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
		data, _ := json.Marshal(map[string]any{"error": rec.Error})
		st.Message = said(rec, rec.Error.Message, data)
	case rec.State == schema.JobInputRequired && rec.Question != nil:
		data, _ := json.Marshal(map[string]any{QuestionIDKey: rec.Question.ID, QuestionSchemaKey: rec.Question.Schema})
		st.Message = questionMessage(rec, data)
	case rec.Progress != nil && !rec.State.Final():
		data, _ := json.Marshal(map[string]any{"percent": rec.Progress.Percent})
		st.Message = said(rec, rec.Progress.Message, data)
	}
	return st
}

// said returns the agent message of a status that says text and data:
// the job's last message when it says the same, and otherwise a message
// named by the job and what it says.
func said(rec *schema.JobRecord, text string, data json.RawMessage) *a2a.Message {
	for i := len(rec.History) - 1; i >= 0; i-- {
		if m := rec.History[i]; m.Role == schema.JobRoleAgent {
			if m.Text == text && sameJSON(m.Data, data) {
				return message(rec, m)
			}
			break
		}
	}
	sum := sha256.Sum256([]byte(string(rec.State) + "\x00" + text + "\x00" + string(data)))
	return message(rec, schema.JobMessage{ID: rec.ID + "-status-" + hex.EncodeToString(sum[:8]), Role: schema.JobRoleAgent, Text: text, Data: data})
}

// questionMessage returns the status message of a job waiting on its
// question: the question as the history holds it (the same messageId),
// with data, the question's id and schema, which the history leaves out.
func questionMessage(rec *schema.JobRecord, data json.RawMessage) *a2a.Message {
	for i := len(rec.History) - 1; i >= 0; i-- {
		m := rec.History[i]
		var q struct {
			Question string `json:"question"`
		}
		if m.Role == schema.JobRoleAgent && json.Unmarshal(m.Data, &q) == nil && q.Question == rec.Question.ID {
			m.Text, m.Data = rec.Question.Message, data
			return message(rec, m)
		}
	}
	return said(rec, rec.Question.Message, data)
}

// sameJSON reports whether a and b are the same JSON value, whatever
// their spacing and the order of their members.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
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
// The status update of a final state, and of input-required, is marked
// final, as A2A ends a stream or a blocking send there.
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
		Status: status(cur), Final: ends(cur.State)})
}

// ends reports whether a blocking message/send answers and a stream ends
// at state st: a final state, or input-required, where the client has to
// answer before the task goes on.
func ends(st schema.JobState) bool { return st.Final() || st == schema.JobInputRequired }

func sameProgress(a, b *schema.JobProgress) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
