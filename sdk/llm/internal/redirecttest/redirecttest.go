// Package redirecttest checks that a model client never follows a
// redirect: a local endpoint answers every request with a redirect to a
// second local server, which records whatever reaches it.
package redirecttest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// Case is one redirect: its status, and the host the Location names.
type Case struct {
	Status int
	// Host is "127.0.0.1" (the same host as the endpoint, another port) or
	// "localhost" (another host name).
	Host string
}

func (c Case) String() string {
	return strconv.Itoa(c.Status) + " to " + c.Host
}

// Cases are every redirect status to the same host on another port and to
// another host.
func Cases() []Case {
	var out []Case
	for _, s := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		for _, h := range []string{"127.0.0.1", "localhost"} {
			out = append(out, Case{Status: s, Host: h})
		}
	}
	return out
}

// Target is the server redirects point to; it records every request that
// reaches it.
type Target struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

// Requests returns the headers of every request the target received.
func (t *Target) Requests() []http.Header {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]http.Header(nil), t.seen...)
}

// Start starts the target and the endpoint that redirects to it, and
// returns the endpoint's base URL. The Location keeps the request's path and
// query, so a client that followed it would send the same request there.
func Start(t testing.TB, c Case) (baseURL string, target *Target) {
	t.Helper()
	target = &Target{}
	target.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target.mu.Lock()
		target.seen = append(target.seen, r.Header.Clone())
		target.mu.Unlock()
		http.Error(w, "the redirect target was reached", http.StatusTeapot)
	}))
	t.Cleanup(target.srv.Close)
	_, port, err := net.SplitHostPort(target.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	to := "http://" + net.JoinHostPort(c.Host, port)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, to+r.URL.RequestURI(), c.Status)
	}))
	t.Cleanup(endpoint.Close)
	return endpoint.URL, target
}

// Check fails t unless err is the refused redirect of c, classified as
// permanent, naming neither key, and nothing reached target.
func Check(t testing.TB, c Case, err error, target *Target, key string) {
	t.Helper()
	for _, h := range target.Requests() {
		leaked := ""
		for name, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, key) {
					leaked = " carrying the key in " + name
				}
			}
		}
		t.Errorf("a request reached the redirect target%s", leaked)
	}
	var re *llm.RedirectError
	if !errors.As(err, &re) || !errors.Is(err, llm.ErrRedirect) || !errors.Is(err, llm.ErrPermanent) {
		t.Fatalf("err = %v, want an llm.RedirectError", err)
	}
	if errors.Is(err, llm.ErrRetryable) {
		t.Errorf("err = %v matches ErrRetryable", err)
	}
	if retry, _ := llm.Retryable(context.Background(), err); retry {
		t.Errorf("llm.Retryable(%v) = true, want false", err)
	}
	if re.StatusCode != c.Status || !strings.HasPrefix(re.Host, c.Host+":") {
		t.Errorf("redirect status %d host %q, want %d to %s", re.StatusCode, re.Host, c.Status, c.Host)
	}
	msg := err.Error()
	if !strings.Contains(msg, "redirects are not followed") || strings.Contains(msg, key) {
		t.Errorf("err = %q, want it to say redirects are not followed, without the key", msg)
	}
}

// Key is the API key the clients under test are given: Check looks for it at
// the target.
const Key = "secret-test-key"

// Run runs, for every case, a complete and a streamed turn of the model that
// open returns for a base URL (with Key and the HTTP client hc, which the
// model client must wrap as it wraps its default), each against an endpoint
// that redirects, and checks that nothing reached the target.
//
// hc has a transport of its own: with http.DefaultTransport, the parallel
// cases' httptest servers, which close the default transport's idle
// connections when they stop, break one another's requests.
func Run(t *testing.T, open func(t *testing.T, base string, hc *http.Client) llm.Model) {
	t.Helper()
	for _, tc := range Cases() {
		for _, stream := range []bool{false, true} {
			t.Run(tc.String()+" stream="+strconv.FormatBool(stream), func(t *testing.T) {
				t.Parallel()
				base, target := Start(t, tc)
				tr := http.DefaultTransport.(*http.Transport).Clone()
				t.Cleanup(tr.CloseIdleConnections)
				m := open(t, base, &http.Client{Transport: tr})
				req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("hi")}}
				var err error
				if stream {
					_, err = m.Stream(t.Context(), req, nil)
				} else {
					_, err = m.Complete(t.Context(), req)
				}
				Check(t, tc, err, target, Key)
			})
		}
	}
}
