package a2a

import (
	"encoding/json"
	"net/http"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolbus/toolbus/schema"
)

// ProtocolVersion is the version of A2A the front door speaks.
const ProtocolVersion = "0.3.0"

// Names of the security schemes on the agent card.
const (
	SchemeAPIKey a2a.SecuritySchemeName = "apiKey"
	SchemeBearer a2a.SecuritySchemeName = "bearer"
)

// serveCard answers the public agent card, which A2A clients fetch
// without credentials: without authentication it lists every skill, with
// it the skills of [WithPublicSkills], the security schemes of the
// ingress, and that an authenticated extended card lists the rest.
func (s *Server) serveCard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		w.Header().Set("Access-Control-Allow-Methods", "GET, OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD, OPTIONS")
		http.Error(w, "the agent card is read with GET", http.StatusMethodNotAllowed)
		return
	}
	show := func(string) bool { return true }
	if s.auth != nil {
		show = s.isPublic
	}
	b, err := json.Marshal(s.agentCard(endpoint(r), show))
	if err != nil {
		s.log.Error("encode the agent card", "err", err)
		http.Error(w, "the agent card cannot be encoded", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

func (s *Server) isPublic(name string) bool {
	for _, p := range s.public {
		if schema.CoversPattern(p, name) {
			return true
		}
	}
	return false
}

// endpoint returns the URL of the JSON-RPC binding as the client reached
// r's host: https when the connection or a proxy's X-Forwarded-Proto says
// so.
func endpoint(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host + Path
}

// agentCard returns the card of the front door at url with the skills
// show lets through: every live tool of the registry that is a method
// (a pattern is no name to call).
func (s *Server) agentCard(url string, show func(string) bool) *a2a.AgentCard {
	card := &a2a.AgentCard{
		Name: s.name,
		Description: "toolbus cluster " + s.name + ": each skill is a tool; a message runs it as a durable job whose id is the task's. " +
			`Name the skill in a data part {"method": "NAME", "params": {...}} or in the message metadata "skill".`,
		URL:                url,
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		ProtocolVersion:    ProtocolVersion,
		Version:            "1",
		Capabilities:       a2a.AgentCapabilities{Streaming: true, PushNotifications: s.push != nil},
		DefaultInputModes:  []string{"application/json", "text/plain"},
		DefaultOutputModes: []string{"application/json"},
		Skills:             []a2a.AgentSkill{},
	}
	if s.reg != nil {
		for _, t := range s.reg.Catalog().Tools {
			if t.IsPattern() || !show(t.Name) {
				continue
			}
			desc := t.Description
			if desc == "" {
				desc = "the toolbus method " + t.Name
			}
			card.Skills = append(card.Skills, a2a.AgentSkill{ID: t.Name, Name: t.Name, Description: desc,
				Tags: []string{"toolbus"}, InputModes: []string{"application/json"}, OutputModes: []string{"application/json"}})
		}
	}
	if s.auth != nil {
		card.SupportsAuthenticatedExtendedCard = true
		card.SecuritySchemes = a2a.NamedSecuritySchemes{}
		if s.auth.APIKeyHeader != "" {
			card.SecuritySchemes[SchemeAPIKey] = a2a.APIKeySecurityScheme{In: a2a.APIKeySecuritySchemeInHeader, Name: s.auth.APIKeyHeader,
				Description: "an API key of the toolbus cluster"}
			card.Security = append(card.Security, a2a.SecurityRequirements{SchemeAPIKey: {}})
		}
		bearer := a2a.HTTPAuthSecurityScheme{Scheme: "bearer", Description: "an API key of the toolbus cluster as a bearer token"}
		if s.auth.JWT {
			bearer.BearerFormat = "JWT"
			bearer.Description = "a JSON Web Token the toolbus cluster accepts"
			if s.auth.APIKeyHeader != "" {
				bearer.Description = "an API key of the toolbus cluster, or a JSON Web Token it accepts, as a bearer token"
			}
		}
		card.SecuritySchemes[SchemeBearer] = bearer
		card.Security = append(card.Security, a2a.SecurityRequirements{SchemeBearer: {}})
	}
	return card
}
