package llm

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrRedirect matches the error a model client returns when its endpoint
// answered with a redirect ([RedirectError]). It is permanent: retrying
// would be redirected again.
var ErrRedirect = errors.New("llm: the model endpoint answered with a redirect")

// RedirectError says a model endpoint answered a request with a redirect,
// which [HTTPClient] does not follow. errors.Is matches [ErrRedirect] and
// [ErrPermanent].
type RedirectError struct {
	// StatusCode is the redirect's status (301, 302, 303, 307, 308).
	StatusCode int
	// Host is the redirect target's host[:port], or "" when it was not a
	// plain host name (it comes from the upstream server, so it is shown
	// only when short and made of host-name characters).
	Host string
}

func (e *RedirectError) Error() string {
	to := "another URL"
	if e.Host != "" {
		to = e.Host
	}
	return fmt.Sprintf("llm: the model endpoint answered HTTP %d with a redirect to %s; redirects are not followed (the key would go to another server)", e.StatusCode, to)
}

// Is matches ErrRedirect and ErrPermanent.
func (e *RedirectError) Is(target error) bool {
	return target == ErrRedirect || target == ErrPermanent
}

// HTTPClient returns the HTTP client every model client sends its requests
// (and so its key) with: a copy of base (nil: a zero http.Client, which uses
// http.DefaultTransport) whose redirect policy refuses every redirect, so a
// key never follows a redirect to another server, port or path. base is not
// modified; its CheckRedirect, if any, is replaced in the copy.
//
// Refusing is simpler and safer than re-checking each target against the
// endpoints the key is bound to: a bound endpoint that redirects is
// misconfigured (bind the URL it redirects to instead), and the request
// would otherwise need its credential headers (Authorization, X-Api-Key,
// X-Goog-Api-Key, and whatever a caller added) identified and stripped.
//
// The clients in sub-packages openai, anthropic and gemini, and
// sub-package models, always use it.
func HTTPClient(base *http.Client) *http.Client {
	var c http.Client
	if base != nil {
		c = *base
	}
	c.CheckRedirect = refuseRedirect
	return &c
}

// refuseRedirect is HTTPClient's CheckRedirect: req is the request the
// redirect asks for, req.Response the redirect itself.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	e := &RedirectError{}
	if req.Response != nil {
		e.StatusCode = req.Response.StatusCode
	}
	if req.URL != nil && plainHost(req.URL.Host) {
		e.Host = req.URL.Host
	}
	return e
}

// plainHost reports whether h is short and made only of characters of a
// host name, an IP address (IPv6 in brackets) and a port.
func plainHost(h string) bool {
	if h == "" || len(h) > 100 {
		return false
	}
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '.', r == '-', r == ':', r == '[', r == ']', r == '_':
		default:
			return false
		}
	}
	return true
}
