package discovery

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/toolbus/toolbus/schema"
)

// Method is the ingress's own method that answers the OpenRPC document of
// the live tools ([Discoverer]); GET /openrpc.json serves the same
// document.
const Method = "rpc.discover"

// OpenRPCVersion is the version of the OpenRPC specification the document
// follows.
const OpenRPCVersion = "1.3.2"

// OpenRPC is an OpenRPC document: the live methods of the cluster, each
// with its params and result as content descriptors, and, under
// "x-toolbus-problems", the descriptors the registry could not use.
type OpenRPC struct {
	OpenRPC  string          `json:"openrpc"`
	Info     OpenRPCInfo     `json:"info"`
	Methods  []OpenRPCMethod `json:"methods"`
	Problems []Problem       `json:"x-toolbus-problems"`
}

// OpenRPCInfo is the document's info object.
type OpenRPCInfo struct {
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
	Version     string `json:"version"`
}

// OpenRPCMethod is one method of the document. X holds what toolbus
// knows beyond OpenRPC: worker count, timeout, idempotency, whether it runs
// as a job, the tool's version and the whole params schema.
type OpenRPCMethod struct {
	Name           string              `json:"name"`
	Description    string              `json:"description,omitempty"`
	ParamStructure string              `json:"paramStructure,omitempty"`
	Params         []ContentDescriptor `json:"params"`
	Result         ContentDescriptor   `json:"result"`
	X              OpenRPCExtension    `json:"x-toolbus"`
}

// ContentDescriptor is an OpenRPC content descriptor.
type ContentDescriptor struct {
	Name     string          `json:"name"`
	Required bool            `json:"required,omitempty"`
	Schema   json.RawMessage `json:"schema"`
}

// OpenRPCExtension is the "x-toolbus" member of a method.
type OpenRPCExtension struct {
	Workers      int             `json:"workers"`
	Pattern      bool            `json:"pattern,omitempty"`
	TimeoutMS    int64           `json:"timeout_ms,omitempty"`
	RetrySafe    bool            `json:"idempotent"`
	Version      string          `json:"version,omitempty"`
	Conflict     bool            `json:"conflict,omitempty"`
	ParamsSchema json.RawMessage `json:"params_schema,omitempty"`
}

var anySchema = json.RawMessage(`{}`)

// Scope is what one caller may see of the registry. The zero Scope sees
// no tool and no problem.
type Scope struct {
	// MayCall reports whether the caller may call every method that name,
	// a method or a pattern a worker serves, matches; nil allows none.
	// Discovery lists such names alone, for operators too: what a caller
	// may call is its patterns.
	MayCall func(name string) bool
	// AllProblems shows every problem of the registry, not only those of
	// the tools MayCall allows: an operator's view.
	AllProblems bool
}

// Everything is the Scope of a caller that sees every tool and problem:
// an operator that may call everything, or the one anonymous caller of an
// ingress without authentication.
func Everything() Scope {
	return Scope{MayCall: func(string) bool { return true }, AllProblems: true}
}

func (s Scope) mayCall(name string) bool { return s.MayCall != nil && s.MayCall(name) }

// OpenRPC returns the OpenRPC document of the registry's live tools that
// s may see: the methods, and the patterns, whose every method it may
// call, and their problems, or every problem with s.AllProblems.
func (r *Registry) OpenRPC(s Scope) OpenRPC {
	cat := r.Catalog()
	doc := OpenRPC{
		OpenRPC: OpenRPCVersion,
		Info: OpenRPCInfo{
			Title:       "toolbus",
			Description: "The live tools of a toolbus cluster, as its workers advertise them.",
			Version:     "1",
		},
		Methods:  make([]OpenRPCMethod, 0, len(cat.Tools)),
		Problems: make([]Problem, 0, len(cat.Problems)),
	}
	for _, p := range cat.Problems {
		if s.AllProblems || s.mayCall(p.Method) {
			doc.Problems = append(doc.Problems, p)
		}
	}
	for _, t := range cat.Tools {
		if !s.mayCall(t.Name) {
			continue
		}
		m := OpenRPCMethod{
			Name:        t.Name,
			Description: t.Description,
			Params:      []ContentDescriptor{},
			Result:      ContentDescriptor{Name: "result", Schema: anySchema},
			X: OpenRPCExtension{
				Workers: t.Workers, Pattern: t.IsPattern(), TimeoutMS: t.TimeoutMS, RetrySafe: t.RetrySafe,
				Version: t.Version, Conflict: t.Conflict, ParamsSchema: t.Params,
			},
		}
		if len(t.Result) > 0 {
			m.Result.Schema = t.Result
		}
		m.ParamStructure, m.Params = paramDescriptors(t.Params)
		doc.Methods = append(doc.Methods, m)
	}
	return doc
}

// paramDescriptors splits a params schema into OpenRPC content
// descriptors: one per property of an object schema (by name), one per
// prefix item of an array schema (by position). Any other schema has no
// descriptors; the whole schema is in x-toolbus.params_schema.
func paramDescriptors(raw json.RawMessage) (structure string, params []ContentDescriptor) {
	params = []ContentDescriptor{}
	if len(raw) == 0 {
		return "either", params
	}
	var s struct {
		Type        any                        `json:"type"`
		Properties  map[string]json.RawMessage `json:"properties"`
		Required    []string                   `json:"required"`
		PrefixItems []json.RawMessage          `json:"prefixItems"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "either", params
	}
	switch {
	case s.Type == "object" || len(s.Properties) > 0:
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			params = append(params, ContentDescriptor{Name: n, Required: slices.Contains(s.Required, n), Schema: s.Properties[n]})
		}
		return "by-name", params
	case s.Type == "array":
		for i, item := range s.PrefixItems {
			params = append(params, ContentDescriptor{Name: "param" + strconv.Itoa(i), Required: true, Schema: item})
		}
		return "by-position", params
	}
	return "either", params
}

// Discoverer answers rpc.discover on every transport of the ingress, as
// its extension of that name, and GET /openrpc.json as an [http.Handler],
// each with the part of the document the caller may see.
type Discoverer struct {
	// Registry holds the live tools.
	Registry *Registry
	// Scope returns what the caller of a request may see, given the
	// request's context, in which the ingress has put the caller.
	Scope func(ctx context.Context) Scope
}

var _ http.Handler = Discoverer{}

// ServeRPC answers rpc.discover, and -32601 for any longer name of the
// prefix (the ingress routes extensions by prefix).
func (d Discoverer) ServeRPC(ctx context.Context, call schema.Call) (json.RawMessage, *schema.Error) {
	if call.Method != Method {
		return nil, schema.NewError(schema.CodeMethodNotFound, "method not found: "+call.Method,
			map[string]any{"reason": schema.ReasonReserved, "method": call.Method})
	}
	b, err := json.Marshal(d.Registry.OpenRPC(d.Scope(ctx)))
	if err != nil {
		return nil, schema.NewError(schema.CodeInternal, "internal error: cannot encode the OpenRPC document", nil)
	}
	return b, nil
}

// ServeHTTP answers GET /openrpc.json.
func (d Discoverer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(d.Registry.OpenRPC(d.Scope(r.Context())))
	if err != nil {
		http.Error(w, "cannot encode the OpenRPC document", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}
