package hydratest

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Trust is a trust relationship of Hydra's RFC 7523 jwt-bearer grant: Hydra
// accepts assertions that Issuer signs with Key, for Subject (or any subject
// with AnySubject), asking for at most Scopes. The assertion's client must
// also be registered with the jwt-bearer grant type and those scopes.
type Trust struct {
	Issuer     string
	Subject    string
	AnySubject bool
	Scopes     []string
	// Key is the public JWK (kty, crv, x, y or n, e; kid; alg; use "sig").
	Key map[string]any
	// ExpiresAt ends the relationship.
	ExpiresAt time.Time
}

// TrustJWTBearer registers tr at Hydra's admin API and returns its id.
func (s *Server) TrustJWTBearer(ctx context.Context, tr Trust) (string, error) {
	body := map[string]any{"issuer": tr.Issuer, "allow_any_subject": tr.AnySubject, "scope": nonNil(tr.Scopes),
		"jwk": tr.Key, "expires_at": tr.ExpiresAt.UTC().Format(time.RFC3339)}
	if tr.Subject != "" {
		body["subject"] = tr.Subject
	}
	var out struct {
		ID string `json:"id"`
	}
	err := s.adminJSON(ctx, http.MethodPost, "/admin/trust/grants/jwt-bearer/issuers", body, &out)
	return out.ID, err
}

// DistrustJWTBearer deletes the trust relationship id: Hydra refuses the
// issuer's assertions from then on.
func (s *Server) DistrustJWTBearer(ctx context.Context, id string) error {
	return s.adminJSON(ctx, http.MethodDelete, "/admin/trust/grants/jwt-bearer/issuers/"+url.PathEscape(id), nil, nil)
}
