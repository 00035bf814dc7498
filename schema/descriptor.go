package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// AnnouncementVersion is the version of the discovery announcement format
// (see PROTOCOL.md, section 9).
const AnnouncementVersion = 1

// Descriptor says what a tool is: its name, what it does, the JSON Schemas
// of its params and result, and how it may be called. Workers advertise one
// per registered method; the ingress validates params against it and lists
// it in rpc.discover and the MCP front door. Every member but Name is
// optional: an absent schema accepts anything.
type Descriptor struct {
	// Name is the method name, or a pattern such as "math.*".
	Name string `json:"name"`
	// Description says what the tool does, for people and models.
	Description string `json:"description,omitempty"`
	// Params is the JSON Schema of the params (an object or array schema).
	Params json.RawMessage `json:"params,omitempty"`
	// Result is the JSON Schema of the result.
	Result json.RawMessage `json:"result,omitempty"`
	// TimeoutMS is the tool's own deadline in milliseconds; zero when it
	// has none. The ingress shortens a call's deadline to it.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// RetrySafe reports that running the tool twice has the effect of
	// running it once, so a call may be retried or hedged and an
	// interrupted job run again. On the wire it is "idempotent"; it is not
	// an error's data.retryable, which says whether one answer invites a
	// retry.
	RetrySafe bool `json:"idempotent,omitempty"`
	// Version is the tool's own version string, free-form.
	Version string `json:"version,omitempty"`
	// Asks reports that the tool may ask its caller a question while it
	// runs (PROTOCOL.md rule 11, revision 9), which only a caller that can
	// answer can take: a job, an A2A task, an MCP session with
	// elicitation. A synchronous call of it fails when it asks.
	Asks bool `json:"asks,omitempty"`
}

// Timeout returns TimeoutMS as a duration.
func (d Descriptor) Timeout() time.Duration { return time.Duration(d.TimeoutMS) * time.Millisecond }

// IsPattern reports whether Name is a pattern ('*' or '>' tokens) rather
// than one method.
func (d Descriptor) IsPattern() bool {
	for _, t := range strings.Split(d.Name, ".") {
		if t == "*" || t == ">" {
			return true
		}
	}
	return false
}

// Errors of [Descriptor.Validate] and [ParseAnnouncement].
var (
	// ErrBadDescriptor means a descriptor breaks a rule of the format.
	ErrBadDescriptor = errors.New("schema: bad descriptor")
	// ErrBadAnnouncement means an announcement cannot be read at all.
	ErrBadAnnouncement = errors.New("schema: bad announcement")
)

// Validate checks the rules a descriptor must follow: a method name or
// pattern that a worker may serve, schemas that are JSON objects (or the
// boolean schemas true and false), and no negative timeout. It does not
// compile the schemas; the ingress does that and reports what fails.
func (d Descriptor) Validate() error {
	if err := validatePattern(d.Name); err != nil {
		return fmt.Errorf("%w: name %q: %w", ErrBadDescriptor, d.Name, err)
	}
	if IsReserved(d.Name) {
		return fmt.Errorf("%w: name %q is reserved for the ingress", ErrBadDescriptor, d.Name)
	}
	for _, s := range []struct {
		what string
		raw  json.RawMessage
	}{{"params", d.Params}, {"result", d.Result}} {
		if len(s.raw) == 0 {
			continue
		}
		if !isSchemaJSON(s.raw) {
			return fmt.Errorf("%w: %s of %q: a JSON Schema is an object or a boolean", ErrBadDescriptor, s.what, d.Name)
		}
	}
	if d.TimeoutMS < 0 {
		return fmt.Errorf("%w: timeout_ms of %q is negative", ErrBadDescriptor, d.Name)
	}
	return nil
}

func isSchemaJSON(raw json.RawMessage) bool {
	if !json.Valid(raw) {
		return false
	}
	b := bytes.TrimSpace(raw)
	return bytes.HasPrefix(b, []byte("{")) || bytes.Equal(b, []byte("true")) || bytes.Equal(b, []byte("false"))
}

// Announcement is what a worker publishes for each tool it serves, on that
// tool's own discovery subject (PROTOCOL.md section 9, revision 8): who it
// is, how often it announces, and in Tools the one descriptor of that
// tool. A worker that stops sends one last announcement with Leaving set
// for each. Workers before revision 8 published one announcement of all
// their tools on the shared subject.
type Announcement struct {
	// V is [AnnouncementVersion].
	V int `json:"v"`
	// Worker identifies the worker process, unique in the cluster.
	Worker string `json:"worker"`
	// IntervalMS is how often the worker announces; a listener forgets it
	// after three intervals without an announcement.
	IntervalMS int64 `json:"interval_ms"`
	// Leaving is set on the last announcement of a worker that stops.
	Leaving bool `json:"leaving,omitempty"`
	// Tools holds one descriptor per served method or pattern.
	Tools []Descriptor `json:"tools"`
}

// Interval returns IntervalMS as a duration.
func (a Announcement) Interval() time.Duration { return time.Duration(a.IntervalMS) * time.Millisecond }

// BadTool is a descriptor of an announcement that could not be used, and
// why.
type BadTool struct {
	// Name is the descriptor's name when it could be read.
	Name string
	// Raw is the descriptor as the worker sent it.
	Raw json.RawMessage
	// Err says what is wrong; it wraps [ErrBadDescriptor].
	Err error
}

// ParseAnnouncement reads an announcement. A message that is not an
// announcement at all (not JSON, another version, no worker id) fails with
// an error wrapping [ErrBadAnnouncement]; a descriptor that breaks the
// rules is left out of a.Tools and returned in bad, so that one broken
// descriptor never hides the worker's other tools.
func ParseAnnouncement(data []byte) (a Announcement, bad []BadTool, err error) {
	var wire struct {
		V          int               `json:"v"`
		Worker     string            `json:"worker"`
		IntervalMS int64             `json:"interval_ms"`
		Leaving    bool              `json:"leaving"`
		Tools      []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return Announcement{}, nil, fmt.Errorf("%w: %w", ErrBadAnnouncement, err)
	}
	if wire.V != AnnouncementVersion {
		return Announcement{}, nil, fmt.Errorf("%w: version %d, want %d", ErrBadAnnouncement, wire.V, AnnouncementVersion)
	}
	if wire.Worker == "" {
		return Announcement{}, nil, fmt.Errorf("%w: no worker id", ErrBadAnnouncement)
	}
	if wire.IntervalMS <= 0 && !wire.Leaving {
		return Announcement{}, nil, fmt.Errorf("%w: interval_ms must be positive, got %d", ErrBadAnnouncement, wire.IntervalMS)
	}
	a = Announcement{V: wire.V, Worker: wire.Worker, IntervalMS: wire.IntervalMS, Leaving: wire.Leaving}
	for _, raw := range wire.Tools {
		var d Descriptor
		if err := json.Unmarshal(raw, &d); err != nil {
			var name struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal(raw, &name) // best effort: the name is only for the report
			bad = append(bad, BadTool{Name: name.Name, Raw: raw, Err: fmt.Errorf("%w: %w", ErrBadDescriptor, err)})
			continue
		}
		if err := d.Validate(); err != nil {
			bad = append(bad, BadTool{Name: d.Name, Raw: raw, Err: err})
			continue
		}
		a.Tools = append(a.Tools, d)
	}
	return a, bad, nil
}
