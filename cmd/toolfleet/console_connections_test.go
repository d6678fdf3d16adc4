package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
)

// TestConsoleConnections drives the console's connections page against a
// dev fleet with delegated credentials: the configured providers are
// offered; Connect starts the gateway's connect flow as the signed-in
// principal (the gateway's page names them, and its form sends the browser
// on to the provider, which this test does not follow off loopback);
// Revoke asks to confirm first; neither form works without the CSRF token.
func TestConsoleConnections(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("keys", "k1:"+base64.StdEncoding.EncodeToString(key)+"\n")
	write("secret", "client-secret\n")
	file, _ := json.Marshal(map[string]any{"public_url": "http://127.0.0.1:" + strconv.Itoa(port), "key_ring_file": "keys",
		"providers": []map[string]any{{"name": "github", "authorization_url": "https://github.example/login/oauth/authorize",
			"token_url": "https://github.example/login/oauth/access_token", "client_id": "Iv1.test", "client_secret_file": "secret"}}})
	cfg := devConfig{Host: "127.0.0.1", GatewayPort: port, JWTSecret: "console-connections-secret-console-connections",
		ConnectionsFile: write("connections.json", string(file))}
	svc, err := startDevServices(ctx, stack, cfg, devServiceOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.stop() })
	base := "http://" + svc.fleet.Gateway.Addr()

	alice := newConsoleBrowser(t, base)
	alice.signIn("alice")
	res, body := alice.get("/console/connections")
	for _, want := range []string{"No connections yet.", `id="providers"`, `name="provider" value="github"`, "Connect github"} {
		if !strings.Contains(body, want) {
			t.Errorf("the connections page (%d) lacks %s:\n%s", res.StatusCode, want, body)
		}
	}

	// Without the CSRF token neither form does anything.
	for _, path := range []string{"/console/connections/connect", "/console/connections/revoke"} {
		if res, _ := alice.postRaw(path, url.Values{"provider": {"github"}, "confirm": {"yes"}}); res.StatusCode != http.StatusForbidden {
			t.Errorf("%s without CSRF: %d, want 403", path, res.StatusCode)
		}
	}
	alice.get("/console/connections")

	// Connect: the console sends the browser to the gateway's connect page.
	stay := *alice.client
	stay.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	// With the scopes a waiting call's tool needs (the inbox's Connect button).
	form := url.Values{"provider": {"github"}, "csrf": {alice.csrf}, "scope": {"repo:read"}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/console/connections/connect", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err = stay.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	start := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(start, base+"/connections/start?state=") {
		t.Fatalf("connect: %d to %q, want 303 to the gateway's connect page", res.StatusCode, start)
	}
	res, err = stay.Get(start)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	state := regexp.MustCompile(`name="state" value="([^"]+)"`).FindSubmatch(page)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(page), "alice") || !strings.Contains(string(page), "github") || state == nil {
		t.Fatalf("the gateway's connect page: %d\n%s", res.StatusCode, page)
	}
	res, err = stay.PostForm(base+"/connections/start", url.Values{"state": {string(state[1])}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	to, _ := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != http.StatusFound || to == nil || to.Host != "github.example" || to.Query().Get("code_challenge") == "" {
		t.Errorf("the connect flow's redirect: %d to %v, want the provider with a PKCE challenge", res.StatusCode, to)
	} else if !strings.Contains(to.Query().Get("scope"), "repo:read") {
		t.Errorf("the connect flow asks for scope %q, want the form's repo:read in it", to.Query().Get("scope"))
	}

	// Revoke asks first, then says what it did (alice had no connection yet).
	res, body = alice.post("/console/connections/revoke", url.Values{"provider": {"github"}})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `id="confirm-revoke"`) || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Errorf("revoke without confirming: %d\n%s", res.StatusCode, body)
	}
	res, body = alice.post("/console/connections/revoke", url.Values{"provider": {"github"}, "confirm": {"yes"}})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "You had no github connection.") {
		t.Errorf("revoke confirmed: %d\n%s", res.StatusCode, body)
	}
	// An unknown provider is refused in words, on the page.
	res, body = alice.post("/console/connections/connect", url.Values{"provider": {"nope"}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Connecting nope") {
		t.Errorf("connect to an unknown provider: %d\n%s", res.StatusCode, body)
	}
}
