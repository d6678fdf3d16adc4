package hydratest

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Introspection is Hydra's answer about a token (RFC 7662, admin API).
type Introspection struct {
	Active    bool           `json:"active"`
	Subject   string         `json:"sub"`
	ClientID  string         `json:"client_id"`
	Scope     string         `json:"scope"`
	Audience  []string       `json:"aud"`
	Issuer    string         `json:"iss"`
	ExpiresAt int64          `json:"exp"`
	TokenUse  string         `json:"token_use"` // access_token or refresh_token
	Ext       map[string]any `json:"ext"`
}

// Scopes are the token's granted scopes.
func (i Introspection) Scopes() []string { return strings.Fields(i.Scope) }

// Introspect asks Hydra's admin API about token. An inactive token (expired,
// revoked, unknown, forged) is not an error: Active is false.
func (s *Server) Introspect(ctx context.Context, token string) (Introspection, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.AdminURL+"/admin/oauth2/introspect",
		strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		return Introspection{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var out Introspection
	err = s.do(req, &out)
	return out, err
}

// introspectionKey is the context key of a [Resource]'s accepted token.
type introspectionKey struct{}

// TokenFrom is the introspection of the token a [Resource] accepted for r.
func TokenFrom(r *http.Request) (Introspection, bool) {
	i, ok := r.Context().Value(introspectionKey{}).(Introspection)
	return i, ok
}

// Resource wraps a test resource API: it accepts only requests whose bearer
// token Hydra introspects as an active access token for audience with every
// one of scopes; else 401 (invalid_token) or 403 (insufficient_scope) with
// a WWW-Authenticate header (RFC 6750), and next is not called.
func (s *Server) Resource(audience string, scopes []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			refuse(w, http.StatusUnauthorized, `Bearer error="invalid_token", error_description="no bearer token"`)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		in, err := s.Introspect(ctx, token)
		if err != nil {
			http.Error(w, "introspection failed", http.StatusBadGateway)
			return
		}
		if !in.Active || in.TokenUse != "access_token" || !slices.Contains(in.Audience, audience) {
			refuse(w, http.StatusUnauthorized, `Bearer error="invalid_token", error_description="the token is not an active access token for this audience"`)
			return
		}
		for _, sc := range scopes {
			if !slices.Contains(in.Scopes(), sc) {
				refuse(w, http.StatusForbidden, `Bearer error="insufficient_scope", scope="`+strings.Join(scopes, " ")+`"`)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), introspectionKey{}, in)))
	})
}

func refuse(w http.ResponseWriter, status int, challenge string) {
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, http.StatusText(status), status)
}
