package connections_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/services/gateway/connections"
)

// TestEndpointSchemes: endpoints are https, or http on loopback; with
// http_back_channel the endpoints only the gateway calls may be http on any
// host (an in-cluster Service), never the one browsers open.
func TestEndpointSchemes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		auth, token, revoke string
		backChannel         bool
		refused             string // the endpoint named in the error; "" accepted
	}{
		{name: "https", auth: "https://idp.example/authorize", token: "https://idp.example/token"},
		{name: "loopback http", auth: "http://127.0.0.1:4444/oauth2/auth", token: "http://localhost:4444/oauth2/token"},
		{name: "cluster token endpoint refused", auth: "http://127.0.0.1:4444/oauth2/auth",
			token: "http://hydra.toolfleet.svc:4444/oauth2/token", refused: "token_url"},
		{name: "cluster revocation endpoint refused", auth: "http://127.0.0.1:4444/oauth2/auth",
			token: "https://idp.example/token", revoke: "http://hydra:4444/oauth2/revoke", refused: "revocation_url"},
		{name: "back channel over http", auth: "http://127.0.0.1:4444/oauth2/auth", backChannel: true,
			token: "http://hydra.toolfleet.svc:4444/oauth2/token", revoke: "http://hydra:4444/oauth2/revoke"},
		{name: "back channel leaves the browser's endpoint alone", auth: "http://idp.internal/oauth2/auth", backChannel: true,
			token: "http://hydra:4444/oauth2/token", refused: "authorization_url"},
		{name: "back channel is still http(s)", auth: "https://idp.example/authorize", backChannel: true,
			token: "ftp://hydra:4444/oauth2/token", refused: "token_url"},
		{name: "no host", auth: "https://idp.example/authorize", backChannel: true, token: "http:///token", refused: "token_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := connections.Provider{Name: "acme", ClientID: "toolfleet", AuthorizationURL: tt.auth,
				TokenURL: tt.token, RevocationURL: tt.revoke, HTTPBackChannel: tt.backChannel}
			err := p.Resolve(t.Context(), nil)
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.refused != "" && err == nil:
				t.Fatalf("accepted, want %s refused", tt.refused)
			case tt.refused != "" && (!errors.Is(err, connections.ErrConfig) || !strings.Contains(err.Error(), tt.refused+" ")):
				t.Fatalf("error %v, want ErrConfig naming %s", err, tt.refused)
			}
		})
	}
}
