package gateway

import (
	"net/http"
	"strings"

	"github.com/toolfleet/toolfleet/services/gateway/oxp"
)

// OAuth 2.0 Protected Resource Metadata (RFC 9728), so an MCP client that is
// answered 401 can discover where to get a token:
//
//   - GET /.well-known/oauth-protected-resource describes the gateway (its
//     origin), GET /.well-known/oauth-protected-resource/mcp the MCP endpoint;
//   - authorization_servers names Config.Auth.Issuer (omitted when no issuer
//     is configured: tokens are then minted out of band);
//   - a 401 of /mcp carries WWW-Authenticate: Bearer resource_metadata="…".
//
// With auth off there is no protected resource: both paths answer 404.

// wellKnownResource is the RFC 9728 well-known path.
const wellKnownResource = "/.well-known/oauth-protected-resource"

// resourceMetadata serves the metadata documents.
func (g *Gateway) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	suffix := strings.TrimPrefix(r.URL.Path, wellKnownResource)
	if g.cfg.Auth.Disabled || (suffix != "" && suffix != "/mcp") {
		oxp.WriteJSON(w, http.StatusNotFound, map[string]any{"$schema": oxp.Schema, "code": "NOT_FOUND",
			"message": "no protected resource metadata here: " + notFoundReason(g.cfg.Auth.Disabled)})
		return
	}
	doc := map[string]any{
		"resource":                 g.origin(r) + suffix,
		"bearer_methods_supported": []string{"header"},
		"scopes_supported":         []string{ScopeCall, ScopeApprove, ScopeDelegate},
		"resource_name":            "toolfleet gateway",
		"resource_documentation":   "https://github.com/toolfleet/toolfleet/blob/main/docs/mcp.md",
	}
	if iss := g.cfg.Auth.Issuer; iss != "" {
		doc["authorization_servers"] = []string{iss}
	}
	w.Header().Set("Cache-Control", "max-age=300")
	oxp.WriteJSON(w, http.StatusOK, doc)
}

func notFoundReason(disabled bool) string {
	if disabled {
		return "authentication is off on this gateway"
	}
	return "known paths are " + wellKnownResource + " and " + wellKnownResource + "/mcp"
}

// bearerChallenge is the WWW-Authenticate value of a 401 on path (RFC 6750,
// with RFC 9728's resource_metadata).
func (g *Gateway) bearerChallenge(r *http.Request, path string) string {
	return `Bearer realm="toolfleet", resource_metadata="` + g.origin(r) + wellKnownResource + path + `"`
}

// origin is the gateway's origin as the client addressed it: Config.PublicURL
// when set, else the request's scheme and Host.
func (g *Gateway) origin(r *http.Request) string {
	if u := strings.TrimRight(g.cfg.PublicURL, "/"); u != "" {
		return u
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	host := r.Host
	if strings.ContainsAny(host, "\"\\ \t\r\n") { // never reflect a header-breaking Host
		host = "localhost"
	}
	return scheme + "://" + host
}
