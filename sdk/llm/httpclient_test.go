package llm_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestHTTPClientRefusesRedirects: the default client (nil base) and a copy
// of a caller's client both refuse a redirect, and the caller's client keeps
// its own policy.
func TestHTTPClientRefusesRedirects(t *testing.T) {
	reached := false
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { reached = true }))
	defer target.Close()
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer endpoint.Close()
	mine := &http.Client{}
	for name, c := range map[string]*http.Client{"nil base": llm.HTTPClient(nil), "a caller's client": llm.HTTPClient(mine)} {
		resp, err := c.Post(endpoint.URL+"/v1/chat", "application/json", nil)
		if err == nil {
			_ = resp.Body.Close()
		}
		var re *llm.RedirectError
		if !errors.As(err, &re) || re.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("%s: err = %v, want a RedirectError for 307", name, err)
		}
	}
	if reached {
		t.Error("a request reached the redirect target")
	}
	if mine.CheckRedirect != nil {
		t.Error("HTTPClient changed the caller's client")
	}
}
