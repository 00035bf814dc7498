package ingress

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/toolbus/toolbus/schema"
)

// DiscoverMethod is the ingress's own method that answers the OpenRPC
// document of the live tools; GET /openrpc.json serves the same document.
const DiscoverMethod = "rpc.discover"

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
	Idempotent   bool            `json:"idempotent"`
	Job          bool            `json:"job"`
	Version      string          `json:"version,omitempty"`
	Conflict     bool            `json:"conflict,omitempty"`
	ParamsSchema json.RawMessage `json:"params_schema,omitempty"`
}

var anySchema = json.RawMessage(`{}`)

// OpenRPC returns the OpenRPC document of the registry's live tools, all
// of them. rpc.discover and GET /openrpc.json answer a caller the part of
// it that the caller may see (see [Auth]).
func (r *Registry) OpenRPC() OpenRPC { return r.openRPC(view{open: true}) }

// openRPC returns the document v may see: the methods, and the patterns,
// whose every method it may call, and their problems; every problem for a
// view of all callers.
func (r *Registry) openRPC(v view) OpenRPC {
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
		if v.allCallers() || v.mayCall(p.Method) {
			doc.Problems = append(doc.Problems, p)
		}
	}
	for _, t := range cat.Tools {
		if !v.mayCall(t.Name) {
			continue
		}
		m := OpenRPCMethod{
			Name:        t.Name,
			Description: t.Description,
			Params:      []ContentDescriptor{},
			Result:      ContentDescriptor{Name: "result", Schema: anySchema},
			X: OpenRPCExtension{
				Workers: t.Workers, Pattern: t.IsPattern(), TimeoutMS: t.TimeoutMS, Idempotent: t.RetrySafe,
				Job: t.Job, Version: t.Version, Conflict: t.Conflict, ParamsSchema: t.Params,
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

// discoverer answers rpc.discover on every transport, as an extension,
// with what its caller may see. auth is nil when the ingress runs without
// authentication.
type discoverer struct {
	reg  *Registry
	auth *authenticator
}

var _ Extension = discoverer{}

// ServeRPC implements [Extension]. The caller's permissions come with ctx,
// as every transport hands on the request's context (see [Caller]); a call
// whose context has no caller while authentication is on is shown nothing.
func (d discoverer) ServeRPC(ctx context.Context, call schema.Call) (json.RawMessage, *schema.Error) {
	if call.Method != DiscoverMethod {
		return nil, schema.NewError(schema.CodeMethodNotFound, "method not found: "+call.Method,
			map[string]any{"reason": "reserved", "method": call.Method})
	}
	b, err := json.Marshal(d.reg.openRPC(d.auth.requestView(ctx)))
	if err != nil {
		return nil, schema.NewError(schema.CodeInternal, "internal error: cannot encode the OpenRPC document", nil)
	}
	return b, nil
}

// serveOpenRPC answers GET /openrpc.json.
func (s *Server) serveOpenRPC(w http.ResponseWriter, r *http.Request) {
	b, err := json.Marshal(s.cfg.registry.openRPC(s.auth.requestView(r.Context())))
	if err != nil {
		http.Error(w, "cannot encode the OpenRPC document", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}
