package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// SkillKey is the key of a message's metadata that names the skill (the
// toolbus method) the message is for.
const SkillKey = "skill"

// pick is what a message asks for: the method of the job and its params.
type pick struct {
	method string
	params json.RawMessage
}

// howToPick ends every refusal of a message that names no usable skill.
const howToPick = `; name a skill with a data part {"method": "NAME", "params": {...}} or with the message metadata {"skill": "NAME"} and its params in a data part; the agent card lists the skills`

// pick reads the tool a message selects: a data part carrying "method"
// (and "params"), or else the skill named in the message's metadata with
// the first data part as its params, or else, for text alone, the
// operator's text method with {"text": ...}. A message that selects
// nothing usable is refused with an A2A error that says how to select.
func (s *Server) pick(r request, m *a2a.Message) (pick, error) {
	if m == nil || len(m.Parts) == 0 {
		return pick{}, refuse(a2a.ErrInvalidParams, "the message has no parts"+howToPick+"")
	}
	skill, hasSkill := m.Metadata[SkillKey]
	var p pick
	if hasSkill {
		name, ok := skill.(string)
		if !ok || name == "" {
			return pick{}, refuse(a2a.ErrInvalidParams, "the metadata %q must be a skill name (a string)"+howToPick+"", SkillKey)
		}
		p.method = name
	}
	var texts []string
	var data *a2a.DataPart
	dataAt := -1
	for i, part := range m.Parts {
		switch part := part.(type) {
		case a2a.TextPart:
			texts = append(texts, part.Text)
		case a2a.DataPart:
			if data == nil {
				data, dataAt = &part, i
			}
		default:
			return pick{}, refuse(a2a.ErrUnsupportedContentType, "part %d is a %T, which toolbus tools do not take; send text or data parts", i, part)
		}
	}
	switch {
	case data != nil && data.Data["method"] != nil:
		method, ok := data.Data["method"].(string)
		if !ok || method == "" {
			return pick{}, refuse(a2a.ErrInvalidParams, `the data part's "method" must be a skill name (a string)`+howToPick+"")
		}
		if hasSkill && method != p.method {
			return pick{}, refuse(a2a.ErrInvalidParams, "the data part names the skill %q and the metadata %q; name one", method, p.method)
		}
		p.method = method
		if params, ok := data.Data["params"]; ok && params != nil {
			b, err := json.Marshal(params)
			if raw, ok := r.rawData(dataAt); ok && raw["params"] != nil {
				b = bytes.TrimSpace(raw["params"])
			}
			if err != nil || len(b) == 0 || (b[0] != '{' && b[0] != '[') {
				return pick{}, refuse(a2a.ErrInvalidParams, `the data part's "params" must be an object or an array`)
			}
			p.params = b
		}
	case hasSkill && data != nil:
		b, err := json.Marshal(data.Data)
		if err != nil {
			return pick{}, refuse(a2a.ErrInvalidParams, "the data part cannot be read as params")
		}
		if dataAt < len(r.parts) && r.parts[dataAt] != nil {
			b = r.parts[dataAt]
		}
		p.params = b
	case hasSkill:
		p.params = textParams(texts)
	case s.textMethod != "" && data == nil:
		p.method, p.params = s.textMethod, textParams(texts)
	case data != nil:
		return pick{}, refuse(a2a.ErrInvalidParams, `the data part has no "method"`+howToPick+"")
	default:
		return pick{}, refuse(a2a.ErrUnsupportedContentType, "this agent takes no text alone"+howToPick+"")
	}
	if err := schema.ValidateMethod(p.method); err != nil || schema.IsReserved(p.method) || !s.known(r, p.method) {
		return pick{}, unknownSkill(p.method)
	}
	return p, nil
}

func textParams(texts []string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"text": strings.Join(texts, "\n")})
	return b
}

// known reports whether r's caller may use the skill method: it may call
// it, and, with a registry, a live worker announces it. A caller cannot
// tell a skill it may not call from one that does not exist.
func (s *Server) known(r request, method string) bool {
	if !r.mayCall(method) {
		return false
	}
	if s.reg == nil {
		return true
	}
	_, ok := s.reg.Lookup(method)
	return ok
}

func unknownSkill(method string) error {
	return refuse(a2a.ErrInvalidParams, "no skill %q for this caller"+howToPick+"", method)
}

// submit submits the job a message asks for, in the message's context (a
// new one when it names none), with the message as the first of its
// history and its referenceTaskIds as its references. A message that
// names a task (taskId) is a follow-up ([Server.followUp]). A push
// config the message carries is checked, and room for it reserved within
// its caller's bounds, before the job is submitted: a message whose
// config cannot be kept is refused and makes no task, and a task that
// exists is never answered with a refusal while it runs.
func (s *Server) submit(ctx context.Context, r request, p *a2a.MessageSendParams) (*schema.JobRecord, error) {
	if p.Message != nil && p.Message.TaskID != "" {
		return s.followUp(ctx, r, p.Message)
	}
	picked, err := s.pick(r, p.Message)
	if err != nil {
		return nil, err
	}
	contextID := p.Message.ContextID
	if contextID == "" {
		contextID = a2a.NewContextID()
	}
	var held *reservation
	if p.Config != nil && p.Config.PushConfig != nil {
		if held, err = s.reserve(ctx, r, p.Config.PushConfig); err != nil {
			return nil, err
		}
	}
	kept, err := keptMessage(r, p.Message)
	if err != nil {
		return nil, err
	}
	params := map[string]any{"method": picked.method, "context_id": contextID, "message": kept}
	if picked.params != nil {
		params["params"] = picked.params
	}
	if refs := p.Message.ReferenceTasks; len(refs) > 0 {
		params["references"] = refs
	}
	var sub schema.JobSubmitResult
	if e := s.call(ctx, r, schema.MethodJobsSubmit, params, &sub); e != nil {
		if err := held.release(ctx); err != nil {
			s.log.Warn("cannot give back the room reserved for a push notification config; it counts against its caller until it is stale", "err", err)
		}
		if e.Code == schema.CodeForbidden && !bytes.Contains(e.Data, []byte(schema.MethodJobsPrefix)) {
			return nil, unknownSkill(picked.method)
		}
		return nil, a2aError(e)
	}
	rec := &schema.JobRecord{ID: sub.ID, Method: picked.method, State: sub.State, ContextID: contextID, Caller: r.Caller, CreatedAt: now()}
	for _, ref := range p.Message.ReferenceTasks {
		rec.References = append(rec.References, string(ref))
	}
	if held != nil {
		if err := s.settle(ctx, r, held, rec.ID); err != nil {
			return nil, s.withdraw(ctx, r, rec.ID, err)
		}
	}
	return rec, nil
}

// keptMessage returns the message of a job's history that keeps m, the
// message of r: m as the client wrote it, under its messageId, so that
// the task's history gives it back with every digit of its data.
func keptMessage(r request, m *a2a.Message) (map[string]any, error) {
	content := r.message
	if content == nil {
		var err error
		if content, err = json.Marshal(m); err != nil {
			return nil, refuse(a2a.ErrInternalError, "the message cannot be kept")
		}
	}
	return map[string]any{"id": m.ID, "content": content}, nil
}

// followUp answers a message that names a task (taskId). A task that
// waits for its caller's answer (input-required) takes it: the message
// answers the task's question ([Server.answerQuestion]) and followUp
// returns the record of the job running again. A toolbus task runs one
// tool call, so it takes no other message: a task in a terminal state
// is refused -32004 (unsupported operation) naming its state, as A2A
// wants of any agent, and so is a task that is submitted or working.
// Another caller's task and one that does not exist are both -32001
// (task not found), which says neither; a contextId other than the
// task's is -32602. To run the tool again, a client sends a new message
// without taskId in the same context.
func (s *Server) followUp(ctx context.Context, r request, m *a2a.Message) (*schema.JobRecord, error) {
	var rec schema.JobRecord
	if e := s.call(ctx, r, schema.MethodJobsGet, map[string]string{"id": string(m.TaskID)}, &rec); e != nil {
		if e.Code == schema.CodeInvalidParams || e.Code == schema.CodeJobNotFound {
			return nil, refuse(a2a.ErrTaskNotFound, "task %s not found", m.TaskID)
		}
		return nil, a2aError(e)
	}
	if m.ContextID != "" && m.ContextID != rec.ContextID {
		return nil, refuse(a2a.ErrInvalidParams, "the message's contextId %q is not the context of task %s; send the task's contextId, or none",
			m.ContextID, m.TaskID)
	}
	if rec.State == schema.JobInputRequired && rec.Question != nil {
		return s.answerQuestion(ctx, r, m, &rec)
	}
	again := "to run the tool again, send a new message without taskId in context " + rec.ContextID
	if rec.State.Final() {
		return nil, refuse(a2a.ErrUnsupportedOperation, "task %s is %s, a terminal state, and takes no further messages; %s",
			m.TaskID, state(rec.State), again)
	}
	return nil, refuse(a2a.ErrUnsupportedOperation, "task %s is %s: a toolbus task runs one tool call and takes no message while it runs, only the answer to its question while it is input-required; wait for it or cancel it; %s",
		m.TaskID, state(rec.State), again)
}
