package hydratest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
)

// NewBrowser is an http.Client with a cookie jar: what the flows need of a
// browser (Hydra's login and consent CSRF cookies, an app's session cookie).
func NewBrowser() *http.Client {
	jar, _ := cookiejar.New(nil) // never fails without options
	return &http.Client{Jar: jar}
}

// maxRedirects bounds a flow's redirects.
const maxRedirects = 20

// Authorize opens authURL (an authorization request) with browser and
// follows the redirects through Hydra and the login/consent provider until
// one leads to redirectURI; it returns that callback URL (with code and
// state, or error) without opening it. browser keeps its cookies; its own
// CheckRedirect is not used.
func Authorize(ctx context.Context, browser *http.Client, authURL, redirectURI string) (*url.URL, error) {
	c := *browser
	var callback *url.URL
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirectURI) {
			callback = req.URL
			return http.ErrUseLastResponse
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("more than %d redirects", maxRedirects)
		}
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("authorize: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if callback == nil {
		return nil, fmt.Errorf("authorize: the flow ended at %s (%s) without reaching %s: %s", resp.Request.URL, resp.Status, redirectURI, body)
	}
	return callback, nil
}

// CodeFrom is the authorization code of a callback URL, or the error the
// authorization server sent there.
func CodeFrom(callback *url.URL) (code, state string, err error) {
	q := callback.Query()
	if e := q.Get("error"); e != "" {
		return "", q.Get("state"), errors.New(e + ": " + q.Get("error_description"))
	}
	if q.Get("code") == "" {
		return "", q.Get("state"), errors.New("the callback has no code")
	}
	return q.Get("code"), q.Get("state"), nil
}
