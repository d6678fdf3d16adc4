package tokenendpoint

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPost: the client's authentication goes where the style says, the
// answer is read whatever form its scope takes, an error answer is an
// answer, and a body that is not JSON is ErrUnreadable without its text.
func TestPost(t *testing.T) {
	var last *http.Request
	var lastForm url.Values
	answer := `{"access_token":"at","token_type":"bearer","expires_in":60,"refresh_token":"rt","scope":"a b"}`
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		last, lastForm = r, r.PostForm
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	c := Client{HTTP: srv.Client(), TokenURL: srv.URL, ClientID: "id:1", Secret: "s&2"}

	a, err := c.Post(t.Context(), url.Values{"grant_type": {"refresh_token"}})
	if err != nil || !a.OK() || a.AccessToken != "at" || a.RefreshToken != "rt" || !slices.Equal(a.Scopes(), []string{"a", "b"}) {
		t.Fatalf("Post = %+v, %v", a, err)
	}
	if id, secret, ok := last.BasicAuth(); !ok || id != url.QueryEscape("id:1") || secret != url.QueryEscape("s&2") {
		t.Errorf("basic auth %q %q %v, want the form-encoded id and secret (RFC 6749 §2.3.1)", id, secret, ok)
	}
	if lastForm.Has("client_secret") {
		t.Error("the secret went in the form with basic auth")
	}
	now := time.Unix(1000, 0)
	if got := a.Expiry(now); !got.Equal(now.Add(time.Minute)) {
		t.Errorf("Expiry = %v", got)
	}

	c.PostAuth = true
	answer = `{"access_token":"at","scope":["x","y"]}`
	a, err = c.Post(t.Context(), url.Values{"grant_type": {"refresh_token"}})
	if err != nil || !slices.Equal(a.Scopes(), []string{"x", "y"}) || !a.Expiry(now).IsZero() {
		t.Fatalf("array scope: %+v, %v", a, err)
	}
	if _, _, ok := last.BasicAuth(); ok || lastForm.Get("client_id") != "id:1" || lastForm.Get("client_secret") != "s&2" {
		t.Errorf("post auth: basic %v, form %v", ok, lastForm)
	}

	status, answer = http.StatusBadRequest, `{"error":"invalid_grant","error_description":"the token abc is expired"}`
	a, err = c.Post(t.Context(), url.Values{})
	if err != nil || a.OK() || a.Error != "invalid_grant" || a.Status != http.StatusBadRequest {
		t.Fatalf("error answer: %+v, %v", a, err)
	}
	if b, _ := json.Marshal(a); strings.Contains(string(b), "abc") {
		t.Error("the error description is kept")
	}

	status, answer = http.StatusBadGateway, `<html>secret-looking page</html>`
	if _, err = c.Post(t.Context(), url.Values{}); !errors.Is(err, ErrUnreadable) || strings.Contains(err.Error(), "secret") {
		t.Errorf("HTML answer: %v, want ErrUnreadable without the body", err)
	}

	// A transport failure keeps its cause, not the URL.
	srv.Close()
	c.TokenURL = srv.URL + "/token?tenant=x"
	if _, err = c.Post(t.Context(), url.Values{}); err == nil || strings.Contains(err.Error(), "tenant") || strings.Contains(err.Error(), srv.URL) {
		t.Errorf("transport failure: %v, want the cause without the URL", err)
	}
}
