package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/services/console"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestDevOIDCFlags: the identity provider flags of `toolfleet dev` are
// checked together, and what they configure.
func TestDevOIDCFlags(t *testing.T) {
	t.Parallel()
	const idp, jwks = "http://127.0.0.1:4444/", "http://127.0.0.1:4444/.well-known/jwks.json"
	for _, tc := range []struct {
		name   string
		o      devOIDC
		secret string
		want   string // a part of the error; "" = valid
	}{
		{"nothing", devOIDC{}, "", ""},
		{"console sign-in", devOIDC{Console: console.OIDCFlags{Issuer: idp, ClientID: "c"}, JWKSURL: jwks}, "s", ""},
		{"no client id", devOIDC{Console: console.OIDCFlags{Issuer: idp}, JWKSURL: jwks}, "s", "--console-oidc-client-id"},
		{"no JWKS for the console's tokens", devOIDC{Console: console.OIDCFlags{Issuer: idp, ClientID: "c"}}, "s", "--gateway-jwks-url"},
		{"JWKS without the dev secret", devOIDC{JWKSURL: jwks}, "", "--gateway-jwt-secret"},
		{"plain http off loopback", devOIDC{JWKSURL: "http://idp.example/jwks.json"}, "s", "https only"},
		{"console issuer over plain http off loopback", devOIDC{Console: console.OIDCFlags{Issuer: "http://idp.example/", ClientID: "c"}, JWKSURL: "https://idp.example/jwks"}, "s", "https only"},
		{"console flags without an issuer", devOIDC{Console: console.OIDCFlags{ClientID: "c"}}, "s", "--console-oidc-issuer"},
		{"rules without a JWKS", devOIDC{Audience: "toolfleet"}, "s", "--gateway-jwks-url"},
	} {
		err := tc.o.validate(tc.secret)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}

	var auth gateway.AuthConfig
	devOIDC{Console: console.OIDCFlags{Issuer: idp}, JWKSURL: jwks, Audience: "toolfleet"}.apply(&auth)
	if auth.JWKSURL != jwks || auth.Issuer != idp || auth.Audience != "toolfleet" {
		t.Errorf("gateway auth %+v: want the JWKS, the console's issuer and the audience", auth)
	}

	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("  s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := devOIDC{Console: console.OIDCFlags{Issuer: idp, ClientID: "c", ClientSecretFile: file}}.console()
	if err != nil || c.ClientSecret != "s3cret" || c.Issuer != idp {
		t.Errorf("console config %+v, %v", c, err)
	}
	if err := os.WriteFile(file, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (devOIDC{Console: console.OIDCFlags{Issuer: idp, ClientID: "c", ClientSecretFile: file}}).console(); err == nil {
		t.Error("an empty secret file was accepted")
	}
}
