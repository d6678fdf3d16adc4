package main

import (
	"context"
	"errors"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/internal/syncbuf"
	"github.com/toolfleet/toolfleet/services/console"
)

// hostileScript is a scripted model whose text is an attack on the page:
// it must reach the console as text.
const hostileScript = `turns:
  - text: 'Adding. <script>alert("turn")</script> <a href="javascript:alert(1)">click</a> <img src=x onerror=alert(2)>'
    calls:
      - tool: Calculator.Add
        id: sum
        args: {a: 2, b: 3}
  - text: 'The sum is ${sum.result}. <script>alert("answer")</script><img src=x onerror=alert(3)> <a href="javascript:alert(4)">more</a>'
`

// TestConsole drives the console of `toolfleet dev --gateway-jwt-secret`
// over HTTP as two people would: sign-in, the runs list, a run page and
// its live stream, the inbox and an approval, CSRF refusals, the security
// headers, hostile model text kept as text, and a second principal who
// can neither see nor act on the first one's run.
func TestConsole(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hostile.yaml"), []byte(hostileScript), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := devConfig{Host: "127.0.0.1", JWTSecret: "console-test-secret-console-test-secret", ScriptDir: dir}
	svc, err := startDevServices(ctx, stack, cfg, devServiceOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.stop() })
	base := "http://" + svc.fleet.Gateway.Addr()

	alice := newConsoleBrowser(t, base)
	// Signed out: every page leads to the sign-in, with the security headers.
	res, body := alice.get("/console/runs")
	if !strings.HasSuffix(res.Request.URL.Path, "/console/signin") || !strings.Contains(body, `name="subject"`) {
		t.Fatalf("a signed-out visit did not lead to the sign-in page: %s\n%s", res.Request.URL, body)
	}
	for k, want := range map[string]string{"Content-Security-Policy": console.ContentSecurityPolicy,
		"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(console.ContentSecurityPolicy, want) {
			t.Errorf("the CSP lacks %s", want)
		}
	}
	// A sign-in without the form's CSRF token changes nothing.
	if res, _ := alice.postRaw("/console/signin", url.Values{"subject": {"alice"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("a sign-in without its CSRF token: %d, want 403", res.StatusCode)
	}
	alice.signIn("alice")
	var session *http.Cookie
	for _, c := range alice.cookies {
		if c.Name == console.CookieName {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Secure {
		t.Errorf("the session cookie is %+v, want HttpOnly, SameSite=Strict, not Secure on loopback", session)
	}

	// A run whose first call needs approval, started from the runs page.
	res, body = alice.post("/console/runs", url.Values{"model": {"scripted:hostile.yaml"}, "tools": {"Calculator.*"},
		"approve": {"Calculator.*"}, "prompt": {"add 2 and 3"}})
	m := regexp.MustCompile(`/console/runs/(run-[a-z0-9]+)$`).FindStringSubmatch(res.Request.URL.Path)
	if m == nil {
		t.Fatalf("starting a run did not open its page: %d %s\n%s", res.StatusCode, res.Request.URL, body)
	}
	runID := m[1]
	callID := runID + "/1/0"
	waitFor(ctx, t, "the run to wait for approval", func() bool {
		_, body := alice.get("/console/runs")
		return strings.Contains(body, runID) && strings.Contains(body, ">waiting approval<")
	})

	// The live stream so far: hostile text stays text.
	stream := alice.events(ctx, runID, 3*time.Second)
	for _, want := range []string{"event: entry", "Calculator.Add", "&lt;script&gt;alert(&#34;turn&#34;)&lt;/script&gt;", "event: summary"} {
		if !strings.Contains(stream, want) {
			t.Errorf("the run's stream lacks %q:\n%s", want, stream)
		}
	}
	assertInert(t, "the run's stream", stream)

	// CSRF: a decision without the token is refused and nothing changes.
	if res, _ := alice.postRaw("/console/runs/"+runID+"/decide", url.Values{"call_id": {callID}, "decision": {"approve"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("a decision without a CSRF token: %d, want 403", res.StatusCode)
	}
	if res, _ := alice.postRaw("/console/runs/"+runID+"/decide", url.Values{"call_id": {callID}, "decision": {"approve"}, "csrf": {"forged"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("a decision with a forged CSRF token: %d, want 403", res.StatusCode)
	}

	// A second principal sees none of it and can act on none of it.
	bob := newConsoleBrowser(t, base)
	bob.signIn("bob")
	if res, body := bob.get("/console/runs/" + runID); res.StatusCode != http.StatusNotFound || strings.Contains(body, "Calculator.Add") {
		t.Errorf("bob opened alice's run page: %d\n%s", res.StatusCode, body)
	}
	if res, _ := bob.get("/console/runs/" + runID + "/events"); res.StatusCode != http.StatusNotFound {
		t.Errorf("bob watched alice's run: %d", res.StatusCode)
	}
	if _, body := bob.get("/console/runs"); strings.Contains(body, runID) {
		t.Errorf("bob's runs list shows alice's run")
	}
	if _, body := bob.get("/console/inbox"); strings.Contains(body, runID) {
		t.Errorf("bob's inbox shows alice's call")
	}
	for _, path := range []string{"/decide", "/cancel", "/message"} {
		res, _ := bob.post("/console/runs/"+runID+path, url.Values{"call_id": {callID}, "decision": {"approve"}, "text": {"hi"}})
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("bob's POST %s on alice's run: %d, want 404", path, res.StatusCode)
		}
	}

	// Alice's inbox lists the call (and the header counts it); she approves it there.
	_, body = alice.get("/console/inbox")
	if !strings.Contains(body, callID) || !regexp.MustCompile(`id="inbox-count">1<`).MatchString(body) {
		t.Fatalf("alice's inbox does not show the call %s with a count of 1:\n%s", callID, body)
	}
	res, body = alice.post("/console/runs/"+runID+"/decide", url.Values{"call_id": {callID}, "decision": {"approve"}, "reason": {"fine"}, "back": {"inbox"}})
	if res.StatusCode != http.StatusOK || !strings.HasSuffix(res.Request.URL.Path, "/console/inbox") || strings.Contains(body, callID) {
		t.Fatalf("approving from the inbox: %d %s\n%s", res.StatusCode, res.Request.URL, body)
	}
	waitFor(ctx, t, "the run to complete", func() bool {
		_, body := alice.get("/console/runs/" + runID)
		return strings.Contains(body, `id="run-status">completed<`)
	})
	_, body = alice.get("/console/runs/" + runID)
	if !strings.Contains(body, "The sum is 5.") || !strings.Contains(body, "&lt;script&gt;alert(&#34;answer&#34;)&lt;/script&gt;") {
		t.Errorf("the finished run's page lacks its escaped answer:\n%s", body)
	}
	assertInert(t, "the run page", body)
	// The run page's calls (from history): the approved call, its attempts; the budgets; continuing a finished run.
	for _, want := range []string{`id="run-calls"`, callID, "approved by alice", "1 attempt", `id="run-budgets"`, "Continue the run"} {
		if !strings.Contains(body, want) {
			t.Errorf("the finished run's page lacks %q", want)
		}
	}
	stream = alice.events(ctx, runID, 10*time.Second)
	for _, want := range []string{"approved by alice", "event: end", "data: completed"} {
		if !strings.Contains(stream, want) {
			t.Errorf("the finished run's stream lacks %q:\n%s", want, stream)
		}
	}
	assertInert(t, "the finished run's stream", stream)

	// The live inbox: a call that starts waiting reaches the open stream (the
	// header's count and the list) without a reload; bob's stream never shows it.
	aliceLive := alice.stream(ctx, "/console/inbox/events")
	bobLive := bob.stream(ctx, "/console/inbox/events")
	waitFor(ctx, t, "the live inbox's first count", func() bool { return strings.Contains(aliceLive.String(), "event: count\ndata: 0\n") })
	res, _ = alice.post("/console/runs", url.Values{"model": {"scripted:hostile.yaml"}, "tools": {"Calculator.*"},
		"approve": {"Calculator.*"}, "prompt": {"add 2 and 3"}})
	m = regexp.MustCompile(`/console/runs/(run-[a-z0-9]+)$`).FindStringSubmatch(res.Request.URL.Path)
	if m == nil {
		t.Fatalf("starting a second run did not open its page: %s", res.Request.URL)
	}
	second := m[1] + "/1/0"
	waitFor(ctx, t, "the live inbox to show the second run's call", func() bool {
		live := aliceLive.String()
		return strings.Contains(live, "event: count\ndata: 1\n") && strings.Contains(live, second)
	})
	if res, _ := alice.post("/console/runs/"+m[1]+"/decide", url.Values{"call_id": {second}, "decision": {"deny"}, "reason": {"not now"}, "back": {"inbox"}}); res.StatusCode != http.StatusOK {
		t.Errorf("denying from the inbox: %d", res.StatusCode)
	}
	waitFor(ctx, t, "the live inbox to drop the denied call", func() bool {
		live := aliceLive.String()
		return strings.Count(live, "event: count\ndata: 0\n") >= 2
	})
	if live := bobLive.String(); strings.Contains(live, second) || strings.Contains(live, "data: 1\n") || !strings.Contains(live, "event: count\ndata: 0\n") {
		t.Errorf("bob's live inbox:\n%s", live)
	}

	// Filters: the runs list asks the API (server-side, from visibility).
	waitFor(ctx, t, "the run to be listed as completed with its tool", func() bool {
		_, body := alice.get("/console/runs?status=completed&tool=Calculator.Add&model=scripted%3Ahostile.yaml")
		return strings.Contains(body, runID)
	})
	for _, q := range []string{"status=running", "model=scripted%3Aother", "tool=KV.Delete", "from=2099-01-01T00%3A00"} {
		if res, body := alice.get("/console/runs?" + q); res.StatusCode != http.StatusOK || strings.Contains(body, runID) || !strings.Contains(body, "No runs match") {
			t.Errorf("runs?%s: %d, want no match\n%s", q, res.StatusCode, body)
		}
	}
	// A hostile filter value is refused in words, and never widens the list.
	res, body = alice.get("/console/runs?started_by=" + url.QueryEscape("x' OR ToolfleetPrincipal != '"))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "quotes, backslashes") || strings.Contains(body, runID) {
		t.Errorf("a hostile filter: %d\n%s", res.StatusCode, body)
	}
	if _, body := bob.get("/console/runs?started_by=alice"); strings.Contains(body, runID) {
		t.Errorf("bob's filter on alice's runs shows her run")
	}

	// Programs: alice's program, its page with source, calls and limits; bob sees none of it.
	progs := toolfleetv1connect.NewProgramServiceClient(http.DefaultClient, base)
	preq := connect.NewRequest(&toolfleetv1.RunProgramRequest{ProgramId: "console-prog", Tools: []string{"Calculator.*"}, Wait: true,
		Source: "r = Calculator_Add(a=40, b=2)\nresult = {'sum': r.value['result'], 'note': '<script>alert(5)</script><img src=x onerror=alert(6)>'}\n"})
	preq.Header().Set("Authorization", "Bearer "+tenantToken(t, cfg.JWTSecret, "alice", "programs:run", "programs:read", "tools:call", "calculator:use"))
	if pr, err := progs.RunProgram(ctx, preq); err != nil || pr.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED {
		t.Fatalf("RunProgram: %v %v", pr, err)
	}
	if _, body := alice.get("/console/programs"); !strings.Contains(body, "console-prog") {
		t.Errorf("alice's programs list lacks her program:\n%s", body)
	}
	res, body = alice.get("/console/programs/console-prog")
	for _, want := range []string{"Calculator_Add(a=40, b=2)", "console-prog/1", `&#34;a&#34;: 40`, "Tool calls", `id="program-status">completed<`,
		"&lt;script&gt;alert(5)&lt;/script&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("the program page lacks %q (%d):\n%s", want, res.StatusCode, body)
		}
	}
	assertInert(t, "the program page", body)
	if res, body := bob.get("/console/programs/console-prog"); res.StatusCode != http.StatusNotFound || strings.Contains(body, "Calculator_Add") {
		t.Errorf("bob opened alice's program page: %d", res.StatusCode)
	}
	if _, body := bob.get("/console/programs"); strings.Contains(body, "console-prog") {
		t.Errorf("bob's programs list shows alice's program")
	}
	// Without --connections-file the connections page says so.
	if res, body := alice.get("/console/connections"); res.StatusCode != http.StatusOK || !strings.Contains(body, "no delegated credentials configured") {
		t.Errorf("the connections page without connections: %d\n%s", res.StatusCode, body)
	}
	// The programs list filters like the runs list, through the API.
	waitFor(ctx, t, "the program to be listed as completed with its tool", func() bool {
		_, body := alice.get("/console/programs?status=completed&tool=Calculator.Add")
		return strings.Contains(body, "console-prog") && strings.Contains(body, `id="program-filters"`)
	})
	for _, q := range []string{"status=running", "tool=KV.Delete", "started_by=bob", "from=2099-01-01T00%3A00"} {
		if res, body := alice.get("/console/programs?" + q); res.StatusCode != http.StatusOK || strings.Contains(body, "console-prog") || !strings.Contains(body, "No programs match") {
			t.Errorf("programs?%s: %d, want no match\n%s", q, res.StatusCode, body)
		}
	}
	res, body = alice.get("/console/programs?tool=" + url.QueryEscape("x' OR WorkflowType != '"))
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "quotes, backslashes") || strings.Contains(body, "console-prog") {
		t.Errorf("a hostile program filter: %d\n%s", res.StatusCode, body)
	}
	if _, body := bob.get("/console/programs?started_by=alice"); strings.Contains(body, "console-prog") {
		t.Errorf("bob's filter on alice's programs shows her program")
	}

	// Tools: the catalog, a tool's page with a form from its schema, a call
	// through the gateway, and a validation error worded as the gateway words it.
	if _, body := alice.get("/console/tools"); !strings.Contains(body, "Calculator.Add") || !strings.Contains(body, "KV.Delete") {
		t.Errorf("the tools page lacks Calculator.Add or KV.Delete:\n%s", body)
	}
	addURL := "/console/tools/Calculator.Add"
	if _, body := alice.get(addURL); !strings.Contains(body, `name="in.a"`) || !strings.Contains(body, `name="in.b"`) {
		t.Errorf("the Calculator.Add page has no form fields a and b:\n%s", body)
	}
	if res, _ := alice.postRaw(addURL, url.Values{"in.a": {"1"}, "in.b": {"2"}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("try-it without a CSRF token: %d, want 403", res.StatusCode)
	}
	if res, body := alice.post(addURL, url.Values{"in.a": {"40"}, "in.b": {"2"}}); res.StatusCode != http.StatusOK || !regexp.MustCompile(`id="outcome-value">[^<]*42`).MatchString(body) {
		t.Errorf("try-it 40+2: %d\n%s", res.StatusCode, body)
	}
	gw := toolfleetv1connect.NewToolGatewayServiceClient(http.DefaultClient, base)
	bad, _ := structpb.NewStruct(map[string]any{"a": "forty", "b": 2})
	creq := connect.NewRequest(&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: bad})
	creq.Header().Set("Authorization", "Bearer "+tenantToken(t, cfg.JWTSecret, "alice", "tools:call"))
	_, callErr := gw.CallTool(ctx, creq)
	var ce *connect.Error
	if !errors.As(callErr, &ce) || connect.CodeOf(callErr) != connect.CodeInvalidArgument {
		t.Fatalf("the gateway took a=forty: %v", callErr)
	}
	var gatewayWords string
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ve, ok := v.(*toolfleetv1.ValidationError); ok {
				gatewayWords = ve.GetMessage()
			}
		}
	}
	res, body = alice.post(addURL, url.Values{"in.a": {"forty"}, "in.b": {"2"}})
	if gatewayWords == "" || res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, html.EscapeString(gatewayWords)) || !strings.Contains(body, `id="field-errors"`) {
		t.Errorf("try-it a=forty: %d, want the gateway's words %q and the field's error\n%s", res.StatusCode, gatewayWords, body)
	}
	if res, body := alice.post("/console/tools/KV.Delete", url.Values{"in.key": {"x"}}); res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "asks a person to approve each call") {
		t.Errorf("try-it of a tool needing approval: %d, want it refused in words\n%s", res.StatusCode, body)
	}

	// Paging: a page token from the API round-trips through the link.
	if res, _ := alice.get("/console/runs?page=!!!"); res.StatusCode != http.StatusBadRequest {
		t.Errorf("a damaged page link: %d, want 400", res.StatusCode)
	}
	// Sign-out ends the session, and with it the live views still open: the
	// inbox's and a waiting run's streams end with "signed out".
	res, _ = alice.post("/console/runs", url.Values{"model": {"scripted:hostile.yaml"}, "tools": {"Calculator.*"},
		"approve": {"Calculator.*"}, "prompt": {"add 2 and 3"}})
	m = regexp.MustCompile(`/console/runs/(run-[a-z0-9]+)$`).FindStringSubmatch(res.Request.URL.Path)
	if m == nil {
		t.Fatalf("starting a run to watch did not open its page: %s", res.Request.URL)
	}
	inboxLive := alice.stream(ctx, "/console/inbox/events")
	runLive := alice.stream(ctx, "/console/runs/"+m[1]+"/events")
	waitFor(ctx, t, "the run's live view to start", func() bool { return strings.Contains(runLive.String(), "event: entry") })
	alice.post("/console/signout", nil)
	if res, _ := alice.get("/console/runs"); !strings.HasSuffix(res.Request.URL.Path, "/signin") {
		t.Errorf("after sign-out the runs page did not lead to the sign-in: %s", res.Request.URL)
	}
	for what, live := range map[string]*syncbuf.Buffer{"inbox": inboxLive, "run": runLive} {
		waitFor(ctx, t, "the "+what+"'s live view to end at sign-out", func() bool {
			return strings.Contains(live.String(), "event: end\ndata: signed out\n")
		})
	}
}

// assertInert fails when page holds markup that a payload could have made live.
func assertInert(t *testing.T, what, page string) {
	t.Helper()
	for _, bad := range []string{`<script>alert`, `href="javascript:`, `<img src=x`, `<a href="javascript`} {
		if strings.Contains(page, bad) {
			t.Errorf("%s holds live hostile markup %q", what, bad)
		}
	}
	if m := liveHandler.FindString(page); m != "" {
		t.Errorf("%s holds an element with an event handler: %s", what, m)
	}
	if !strings.Contains(page, "onerror=alert") {
		t.Errorf("%s lacks the hostile text itself (escaped)", what)
	}
	if n := strings.Count(page, "<script"); n > 1 {
		t.Errorf("%s holds %d script elements, want at most the console's own", what, n)
	}
}

// liveHandler is a tag with an on…= attribute.
var liveHandler = regexp.MustCompile(`<[a-zA-Z][^<>]*\son[a-z]+=`)

func waitFor(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// consoleBrowser is an HTTP client with a cookie jar, as a browser is.
type consoleBrowser struct {
	t       *testing.T
	base    string
	client  *http.Client
	csrf    string
	cookies []*http.Cookie
}

func newConsoleBrowser(t *testing.T, base string) *consoleBrowser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &consoleBrowser{t: t, base: base}
	b.client = &http.Client{Jar: jar, Timeout: 30 * time.Second}
	return b
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *consoleBrowser) do(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	res, err := b.client.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, c := range res.Cookies() {
		b.cookies = append(b.cookies, c)
	}
	if m := csrfInput.FindSubmatch(body); m != nil {
		b.csrf = string(m[1])
	}
	return res, string(body)
}

func (b *consoleBrowser) get(path string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.do(req)
}

// post submits a form with the CSRF token of the last page.
func (b *consoleBrowser) post(path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", b.csrf)
	return b.postRaw(path, form)
}

func (b *consoleBrowser) postRaw(path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

func (b *consoleBrowser) signIn(subject string) {
	b.t.Helper()
	b.get("/console/signin")
	res, body := b.post("/console/signin", url.Values{"subject": {subject}, "scope": {"runs:start", "runs:read",
		"runs:approve", "runs:cancel", "programs:read", "programs:approve", "tools:call"}})
	if res.StatusCode != http.StatusOK || !strings.HasSuffix(res.Request.URL.Path, "/console/runs") || !strings.Contains(body, ">"+subject+"<") {
		b.t.Fatalf("sign-in as %s: %d %s\n%s", subject, res.StatusCode, res.Request.URL, body)
	}
}

// events reads a run's SSE stream for up to d (it ends by itself once the run ended).
// stream reads the SSE stream at path into a buffer until the test ends.
func (b *consoleBrowser) stream(ctx context.Context, path string) *syncbuf.Buffer {
	b.t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	c := *b.client
	c.Timeout = 0
	res, err := c.Do(req)
	if err != nil || res.Header.Get("Content-Type") != "text/event-stream" {
		b.t.Fatalf("stream %s: %v %v", path, res, err)
	}
	var buf syncbuf.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(&buf, res.Body)
	}()
	b.t.Cleanup(func() {
		cancel()
		res.Body.Close()
		<-done
	})
	return &buf
}

func (b *consoleBrowser) events(ctx context.Context, runID string, d time.Duration) string {
	b.t.Helper()
	return b.eventsAt(ctx, "/console/runs/"+runID+"/events", d)
}

// eventsAt reads the SSE stream at path until it ends or d passes.
func (b *consoleBrowser) eventsAt(ctx context.Context, path string, d time.Duration) string {
	b.t.Helper()
	runID := path
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	c := *b.client
	c.Timeout = 0
	res, err := c.Do(req)
	if err != nil {
		b.t.Fatalf("watch %s: %v", runID, err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		b.t.Fatalf("the events of %s: %d %s", runID, res.StatusCode, ct)
	}
	body, _ := io.ReadAll(res.Body) // until the run's end or d
	return string(body)
}
