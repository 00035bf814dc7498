package a2a

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// DeclineKey is the key of a follow-up message's metadata that declines
// the question of an input-required task: {"decline": true}. A decline
// sits in the metadata, not in a data part, so that it never clashes with
// a member of the question's schema.
const DeclineKey = "decline"

// Members of the data part of an input-required task's status message.
const (
	// QuestionIDKey names the question the task waits on.
	QuestionIDKey = "questionId"
	// QuestionSchemaKey holds the JSON Schema the answer must fit.
	QuestionSchemaKey = "schema"
)

// answerQuestion answers the question of task rec, which is
// input-required, with follow-up message m, through rpc.jobs.answer for
// r's caller: the metadata {"decline": true} declines it, the first data
// part is the answer, and text parts alone are the answer's one member
// when the question's schema has exactly one member, a string. An answer
// that does not fit is -32602 naming the member of the message (in
// data.field of a message/send) and the task keeps waiting. The message
// joins the task's history after the question, as the client wrote it.
// It returns the record of the job running again.
func (s *Server) answerQuestion(ctx context.Context, r request, m *a2a.Message, rec *schema.JobRecord) (*schema.JobRecord, error) {
	kept, err := keptMessage(r, m)
	if err != nil {
		return nil, err
	}
	params := map[string]any{"id": rec.ID, "message": kept}
	if rec.Question != nil {
		// The question the client saw: a late follow-up never answers a
		// later one.
		params["question"] = rec.Question.ID
	}
	var partAt string // the JSON pointer of the part that carries the answer
	if v, ok := m.Metadata[DeclineKey]; ok {
		if d, isBool := v.(bool); !isBool || !d {
			return nil, s.refuseField(r, "/message/metadata/"+DeclineKey, `the metadata %q declines the question of task %s only as true; to answer it, leave it out`, DeclineKey, rec.ID)
		}
		params["decline"] = true
	} else {
		answer, at, err := s.answerOf(r, m, rec)
		if err != nil {
			return nil, err
		}
		params["answer"], partAt = answer, at
	}
	var cur schema.JobRecord
	if e := s.call(ctx, r, schema.MethodJobsAnswer, params, &cur); e != nil {
		switch {
		case e.Code == schema.CodeJobNotFound:
			return nil, refuse(a2a.ErrTaskNotFound, "task %s not found", rec.ID)
		case e.Code == schema.CodeInvalidParams && fieldOf(e) == "/question":
			return nil, refuse(a2a.ErrUnsupportedOperation, "task %s now waits on another question; get the task to see it, and answer that", rec.ID)
		case e.Code == schema.CodeInvalidParams && fieldOf(e) == "/id":
			return nil, refuse(a2a.ErrUnsupportedOperation, "task %s no longer waits for an answer; get the task to see its state", rec.ID)
		case e.Code == schema.CodeInvalidParams && strings.HasPrefix(fieldOf(e), "/answer"):
			field := partAt
			if strings.HasSuffix(partAt, "/data") {
				field += strings.TrimPrefix(fieldOf(e), "/answer")
			}
			return nil, s.refuseField(r, field, "the answer to the question of task %s does not fit its schema (%s); the task still waits for an answer that fits the schema in its status message",
				rec.ID, e.Message)
		case e.Code == schema.CodeInvalidParams && strings.HasPrefix(fieldOf(e), "/message"):
			return nil, s.refuseField(r, fieldOf(e), "the message that answers the question of task %s cannot be kept in its history (%s); the task still waits for its answer",
				rec.ID, e.Message)
		}
		return nil, a2aError(e)
	}
	return &cur, nil
}

// answerOf returns the answer m carries to the question of rec, and the
// JSON pointer of the part it came from.
func (s *Server) answerOf(r request, m *a2a.Message, rec *schema.JobRecord) (json.RawMessage, string, error) {
	var texts []string
	textAt := -1
	for i, part := range m.Parts {
		switch part := part.(type) {
		case a2a.DataPart:
			at := "/message/parts/" + strconv.Itoa(i) + "/data"
			if i < len(r.parts) && r.parts[i] != nil {
				return r.parts[i], at, nil
			}
			b, err := json.Marshal(part.Data)
			if err != nil {
				return nil, "", s.refuseField(r, at, "the data part cannot be read as an answer")
			}
			return b, at, nil
		case a2a.TextPart:
			if textAt < 0 {
				textAt = i
			}
			texts = append(texts, part.Text)
		default:
			return nil, "", refuse(a2a.ErrUnsupportedContentType, "part %d is a %T; answer the question of task %s with a data part that fits its schema", i, part, rec.ID)
		}
	}
	name, ok := stringMember(rec.Question.Schema)
	if textAt < 0 || !ok {
		return nil, "", s.refuseField(r, "/message/parts", "task %s waits for an answer that fits the schema in its status message: send it as a data part, or decline with the metadata {%q: true}",
			rec.ID, DeclineKey)
	}
	b, err := json.Marshal(map[string]string{name: strings.Join(texts, "\n")})
	if err != nil {
		return nil, "", refuse(a2a.ErrInternalError, "the text answer cannot be encoded")
	}
	return b, "/message/parts/" + strconv.Itoa(textAt) + "/text", nil
}

// stringMember returns the name of the one member of a question's schema
// when it has exactly one and that member is a string: then a text
// answer is that member.
func stringMember(raw json.RawMessage) (string, bool) {
	var sch struct {
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	if json.Unmarshal(raw, &sch) != nil || len(sch.Properties) != 1 {
		return "", false
	}
	for name, p := range sch.Properties {
		return name, p.Type == "string"
	}
	return "", false
}

// refuseField refuses the params of r's message with -32602 naming field
// (a JSON pointer into the params), which the answer of a message/send
// carries in data.field.
func (s *Server) refuseField(r request, field, format string, args ...any) error {
	if r.field != nil {
		*r.field = field
	}
	return refuse(a2a.ErrInvalidParams, format, args...)
}

// fieldOf returns data.field of e, or "".
func fieldOf(e *schema.Error) string {
	var d struct {
		Field string `json:"field"`
	}
	if json.Unmarshal(e.Data, &d) != nil {
		return ""
	}
	return d.Field
}
