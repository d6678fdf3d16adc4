package delegation_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"
)

// tokenTap is the connections' HTTP transport in these tests: it passes
// every request on and keeps the access and refresh tokens of the token
// endpoint's answers, so the grep can look for the refresh tokens too
// (the gateway never shows them: they live sealed in its KV bucket).
type tokenTap struct {
	mu      sync.Mutex
	access  []string
	refresh []string
}

// maxTapped bounds a tapped answer (a token response is a few KiB).
const maxTapped = 1 << 20

func (tt *tokenTap) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || resp.Header.Get("Content-Type") == "" || !bytes.Contains([]byte(resp.Header.Get("Content-Type")), []byte("json")) {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTapped))
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var tok struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if json.Unmarshal(body, &tok) == nil {
		tt.mu.Lock()
		defer tt.mu.Unlock()
		if tok.AccessToken != "" {
			tt.access = append(tt.access, tok.AccessToken)
		}
		if tok.RefreshToken != "" {
			tt.refresh = append(tt.refresh, tok.RefreshToken)
		}
	}
	return resp, nil
}

// tokens are every access and refresh token the provider issued so far.
func (tt *tokenTap) tokens() (access, refresh []string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return append([]string(nil), tt.access...), append([]string(nil), tt.refresh...)
}
