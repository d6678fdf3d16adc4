package hydratest

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TokenRequest is what Hydra's token hook tells about a token request.
type TokenRequest struct {
	ClientID        string
	Subject         string // "" for client_credentials
	GrantTypes      []string
	GrantedScopes   []string
	GrantedAudience []string
	// Payload is what Hydra passes on of the token request's form: for a
	// jwt-bearer grant, the (verified) "assertion".
	Payload map[string][]string
	// Extra are the access token's extra claims so far (from the consent).
	Extra map[string]any
}

// hookBody is Hydra's token hook request (oauth2.TokenHookRequest).
type hookBody struct {
	Session struct {
		IDToken struct {
			Subject string `json:"subject"`
			Claims  struct {
				Subject string         `json:"sub"`
				Extra   map[string]any `json:"ext"`
			} `json:"id_token_claims"`
		} `json:"id_token"`
		Extra map[string]any `json:"extra"`
	} `json:"session"`
	Request struct {
		ClientID        string              `json:"client_id"`
		GrantedScopes   []string            `json:"granted_scopes"`
		GrantedAudience []string            `json:"granted_audience"`
		GrantTypes      []string            `json:"grant_types"`
		Payload         map[string][]string `json:"payload"`
	} `json:"request"`
}

// ServeTokenHook serves a token hook on loopback until t ends and returns
// its URL for [Options.TokenHookURL]. For each token request (every grant:
// code, refresh, client_credentials, jwt-bearer) f returns claims to add to
// the access token (nil: none); JWT access tokens carry those named in
// [Options.TopLevelClaims] at their top level and all of them under "ext",
// and introspection shows them under "ext". f must not block.
func ServeTokenHook(t testing.TB, f func(TokenRequest) map[string]any) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b hookBody
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sub := b.Session.IDToken.Subject
		if sub == "" {
			sub = b.Session.IDToken.Claims.Subject
		}
		add := f(TokenRequest{ClientID: b.Request.ClientID, Subject: sub, GrantTypes: b.Request.GrantTypes,
			GrantedScopes: b.Request.GrantedScopes, GrantedAudience: b.Request.GrantedAudience,
			Payload: b.Request.Payload, Extra: b.Session.Extra})
		if add == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		// Hydra replaces the extra claims of both tokens with the answer's:
		// keep the ID token's and the access token's so far.
		extra := map[string]any{}
		maps.Copy(extra, b.Session.Extra)
		maps.Copy(extra, add)
		idToken := b.Session.IDToken.Claims.Extra
		if idToken == nil {
			idToken = map[string]any{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"session": map[string]any{"access_token": extra, "id_token": idToken}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
