package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

// sharedPair is two consoles (two gateway replicas) on one NATS, sealing
// with one key; b calls a gateway that does not answer.
func sharedPair(t *testing.T) (a, b *Server, kv jetstream.KeyValue) {
	t.Helper()
	nc, err := nats.Connect(natstest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	shared := &SharedSessions{JetStream: js, Bucket: SessionBucket(jsassets.Config{Profile: jsassets.ProfileDev}),
		Key: SessionKey([]byte("a secret every replica is given"))}
	for _, s := range []**Server{&a, &b} {
		if *s, err = New(Config{DevSecret: []byte("secret"), Sessions: shared}); err != nil {
			t.Fatal(err)
		}
	}
	b.Connect("http://127.0.0.1:1")
	if kv, err = jsassets.EnsureKeyValue(t.Context(), js, shared.Bucket); err != nil {
		t.Fatal(err)
	}
	return a, b, kv
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// do sends a request to s with cookie c (if any) and returns the answer.
func do(s *Server, method, path string, c *http.Cookie, form url.Values) *httptest.ResponseRecorder {
	var req *http.Request
	if form != nil {
		req = httptest.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req = httptest.NewRequest(method, "http://127.0.0.1"+path, nil)
	}
	if c != nil {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func sessionCookie(t *testing.T, rec *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	var got *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == CookieName && c.Value != "" {
			got = c
		}
	}
	if got == nil {
		t.Fatalf("no session cookie in %v", rec.Result().Cookies())
	}
	return got
}

// signedInAs reports whether s takes c as a session signed in as subject
// (the page then gets past the session, to the API: 503 before Connect,
// 502 with a gateway that does not answer), not the sign-in redirect.
func signedInAs(s *Server, c *http.Cookie, subject string) bool {
	rec := do(s, http.MethodGet, "/console/runs", c, nil)
	return rec.Code != http.StatusSeeOther && strings.Contains(rec.Body.String(), ">"+subject+"<")
}

// TestSharedSessions: a session made on one replica serves on the other;
// signing out on the other ends it on the first; the bucket holds neither
// the token nor the cookie's id.
func TestSharedSessions(t *testing.T) {
	t.Parallel()
	a, b, kv := sharedPair(t)
	page := do(a, http.MethodGet, "/console/signin", nil, nil)
	pre := sessionCookie(t, page)
	csrf := csrfRe.FindStringSubmatch(page.Body.String())[1]
	// The sign-in form posted to the other replica: its CSRF token holds there too.
	in := do(b, http.MethodPost, "/console/signin", pre, url.Values{"csrf": {csrf}, "subject": {"alice"}, "scope": {"runs:read"}})
	if in.Code != http.StatusSeeOther {
		t.Fatalf("sign-in on b: %d\n%s", in.Code, in.Body)
	}
	c := sessionCookie(t, in)
	if !signedInAs(a, c, "alice") || !signedInAs(b, c, "alice") {
		t.Fatal("the session made on b does not serve on both replicas")
	}
	keys, err := kv.Keys(t.Context())
	if err != nil || len(keys) != 1 {
		t.Fatalf("bucket keys %v, %v", keys, err)
	}
	e, err := kv.Get(t.Context(), keys[0])
	if err != nil {
		t.Fatal(err)
	}
	ss, err := a.sessions.byID(t.Context(), c.Value)
	if err != nil || ss == nil || ss.token == "" {
		t.Fatalf("session %+v, %v", ss, err)
	}
	for _, secret := range []string{ss.token, "alice", c.Value} {
		if strings.Contains(string(e.Value()), secret) || strings.Contains(keys[0], secret) {
			t.Errorf("the bucket shows %q", secret)
		}
	}
	// Sign out on a; b refuses the cookie at once.
	out := do(a, http.MethodPost, "/console/signout", c, url.Values{"csrf": {ss.csrf}})
	if out.Code != http.StatusServiceUnavailable { // a is not connected: the POST stops before signing out
		t.Fatalf("sign-out on the unconnected a: %d", out.Code)
	}
	out = do(b, http.MethodPost, "/console/signout", c, url.Values{"csrf": {ss.csrf}})
	if out.Code != http.StatusSeeOther {
		t.Fatalf("sign-out on b: %d\n%s", out.Code, out.Body)
	}
	if rec := do(a, http.MethodGet, "/console/runs", c, nil); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/console/signin" {
		t.Errorf("a after sign-out on b: %d %s", rec.Code, rec.Header().Get("Location"))
	}
	if keys, err := kv.Keys(t.Context()); err == nil && len(keys) != 0 {
		t.Errorf("the bucket still holds %v", keys)
	}
}

// TestSharedSessionsOtherKey: a replica given another key, or a forged
// cookie, finds no session.
func TestSharedSessionsOtherKey(t *testing.T) {
	t.Parallel()
	a, _, _ := sharedPair(t)
	ss, err := a.sessions.start(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil),
		func(n *session) { n.subject, n.token = "bob", "tok" })
	if err != nil {
		t.Fatal(err)
	}
	kvs := a.sessions.store.(*kvSessions)
	other, err := newKVSessions(SharedSessions{JetStream: kvs.js, Bucket: kvs.kc, Key: SessionKey([]byte("another secret"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.load(t.Context(), ss.id); err != errNoSession {
		t.Errorf("another key opened the session: %v", err)
	}
	for _, forged := range []string{"x", strings.Repeat("A", 43), strings.Repeat("A", 4096)} {
		if signedInAs(a, &http.Cookie{Name: CookieName, Value: forged}, "bob") {
			t.Errorf("forged cookie %.10q… signed in", forged)
		}
	}
}

// TestRenewalClaimedOnce: replicas that read one session whose token is
// due both try to claim its renewal; exactly one wins (compare-and-swap on
// the revision), the other sees the claim and renews nothing.
func TestRenewalClaimedOnce(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]func(t *testing.T) *Server{
		"kv": func(t *testing.T) *Server { a, _, _ := sharedPair(t); return a },
		"memory": func(t *testing.T) *Server {
			s, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := store(t)
			ctx := t.Context()
			made, err := s.sessions.start(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil),
				func(n *session) {
					n.subject, n.token, n.oidc, n.refresh, n.tokenExpiry = "carol", "old", true, "refresh-1", time.Now().Add(time.Second)
				})
			if err != nil {
				t.Fatal(err)
			}
			const replicas = 4
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				wins int
			)
			reads := make([]*session, replicas)
			for i := range reads { // every replica reads the same revision first
				if reads[i], err = s.sessions.byID(ctx, made.id); err != nil || reads[i] == nil {
					t.Fatal(err)
				}
			}
			for i := range replicas {
				wg.Go(func() {
					cur, ok := s.claimRenewal(context.WithoutCancel(ctx), reads[i])
					mu.Lock()
					defer mu.Unlock()
					if ok {
						wins++
						return
					}
					if cur == nil || !time.Now().Before(cur.renewing) {
						t.Errorf("a replica that lost the claim sees %+v", cur)
					}
				})
			}
			wg.Wait()
			if wins != 1 {
				t.Errorf("%d replicas claimed the renewal, want 1", wins)
			}
			cur, _ := s.sessions.byID(ctx, made.id)
			if cur == nil || cur.token != "old" {
				t.Fatalf("after the claim: %+v", cur)
			}
			// A request that reads the claimed session goes on with its token.
			if got := s.renew(ctx, cur); got == nil || got.token != "old" || got.rev != cur.rev {
				t.Errorf("renew during another's claim: %+v", got)
			}
		})
	}
}
