package console

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The flows themselves run against a real provider (Ory Hydra) in
// e2e/oauth/signin; these tests cover what needs none.

func TestOIDCConfigChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []OIDCConfig{
		{ClientID: "console"},
		{Issuer: "https://idp.example"},
		{Issuer: "idp.example", ClientID: "console"},
		{Issuer: "ftp://idp.example", ClientID: "console"},
	} {
		if _, err := New(Config{OIDC: &c}); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	o, err := newOIDCSignin(OIDCConfig{Issuer: "https://idp.example", ClientID: "console", Scopes: []string{"runs:read"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.cfg.Scopes[0] != "openid" {
		t.Errorf("scopes %v: openid not added", o.cfg.Scopes)
	}
}

func TestSealer(t *testing.T) {
	t.Parallel()
	a, _ := newSealer()
	b, _ := newSealer()
	in := flow{State: "s", Nonce: "n", Verifier: "v", Redirect: "http://127.0.0.1/console/oidc/callback"}
	sealed, err := a.seal(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "callback") {
		t.Errorf("the sealed value shows its content: %s", sealed)
	}
	var out flow
	if err := a.open(sealed, &out); err != nil || out != in {
		t.Fatalf("open: %+v, %v", out, err)
	}
	flip := []byte(sealed)
	flip[len(flip)/2] ^= 1
	for name, v := range map[string]string{
		"changed": string(flip), "empty": "", "not base64": "%%%", "short": "AAAA",
		"huge": strings.Repeat("A", maxSealed+1),
	} {
		if err := a.open(v, &out); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	if err := b.open(sealed, &out); err == nil {
		t.Error("another process's sealer opened it")
	}
}

// TestOIDCPages: the sign-in page links to the provider; a callback without
// the flow cookie, or with one that was not sealed here, signs nobody in;
// an unreachable provider is a clear 502, not a hang.
func TestOIDCPages(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() // nothing answers once closed
	l.Close()
	s, err := New(Config{OIDC: &OIDCConfig{Issuer: down, ClientID: "console"}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1"+path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec
	}
	if rec := get("/console/signin"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `href="/console/oidc/start"`) {
		t.Errorf("sign-in page: %d\n%s", rec.Code, rec.Body)
	}
	forged := &http.Cookie{Name: flowCookie, Value: "bm90IHNlYWxlZA"}
	for _, rec := range []*httptest.ResponseRecorder{get("/console/oidc/callback?code=c&state=s"), get("/console/oidc/callback?code=c&state=s", forged)} {
		if rec.Code != http.StatusBadRequest || len(rec.Result().Cookies()) != 1 || rec.Result().Cookies()[0].MaxAge >= 0 {
			t.Errorf("callback without a sealed flow: %d, cookies %v", rec.Code, rec.Result().Cookies())
		}
	}
	if rec := get("/console/oidc/start"); rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "not answering") {
		t.Errorf("start with the provider down: %d\n%s", rec.Code, rec.Body)
	}
	if rec := get("/console/runs"); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/console/signin" {
		t.Errorf("runs without a session: %d %s", rec.Code, rec.Header().Get("Location"))
	}
}
