package main

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
)

// TestConsoleSessionsAcrossReplicas: two gateway binaries on one NATS with
// the same --console-session-key-file are two replicas behind a load
// balancer without affinity: a browser signs in on one and goes on on the
// other; signing out on the other ends the session on the first too.
func TestConsoleSessionsAcrossReplicas(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "replicas-share-this-hs256-secret-of-32+"
	secretFile, keyFile := write("hs256", secret), write("session-key", "a-session-secret-every-replica-is-given-0123")
	replica := func() string {
		cfg, err := parse([]string{"--listen", "127.0.0.1:0", "--log-level", "error", "--nats-url", ns.URL(),
			"--jwt-hs256-secret-file", secretFile, "--console", "--console-session-key-file", keyFile})
		if err != nil {
			t.Fatal(err)
		}
		return "http://" + startServe(t, cfg).Addr()
	}
	a, b := replica(), replica()
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "scope": "runs:read",
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	// The jar keys cookies by host: both replicas are 127.0.0.1, as behind one name.
	get := func(base, path string) (int, string) {
		t.Helper()
		res, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := res.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return res.StatusCode, sb.String()
	}
	post := func(base, path string, form url.Values) int {
		t.Helper()
		res, err := client.PostForm(base+path, form)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	_, page := get(a, "/console/signin")
	m := csrf.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no sign-in form on a:\n%s", page)
	}
	// The form from a, posted to b (the balancer chose another replica).
	if code := post(b, "/console/signin", url.Values{"csrf": {m[1]}, "token": {token}}); code != http.StatusSeeOther {
		t.Fatalf("sign-in on b: %d", code)
	}
	signedIn := func(base string) (bool, string) {
		code, body := get(base, "/console/runs")
		return code != http.StatusSeeOther && strings.Contains(body, ">alice<"), body
	}
	for _, r := range []string{a, b} {
		if ok, body := signedIn(r); !ok {
			t.Fatalf("the session does not serve on %s:\n%.2000s", r, body)
		}
	}
	_, page = get(a, "/console/runs")
	m = csrf.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no sign-out form:\n%.2000s", page)
	}
	u, _ := url.Parse(b + "/console/")
	old := jar.Cookies(u)
	if code := post(a, "/console/signout", url.Values{"csrf": {m[1]}}); code != http.StatusSeeOther {
		t.Fatalf("sign-out on a: %d", code)
	}
	// The old cookie, presented to b (a browser that kept it, or a thief), is refused.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b+"/console/runs", nil)
	for _, c := range old {
		req.AddCookie(c)
	}
	res, err := (&http.Client{Timeout: 20 * time.Second, CheckRedirect: client.CheckRedirect}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if len(old) == 0 || res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/console/signin" {
		t.Errorf("b after sign-out on a, with the old cookie %v: %d %s", old, res.StatusCode, res.Header.Get("Location"))
	}
}
