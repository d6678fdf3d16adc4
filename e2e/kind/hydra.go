package main

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/hydralogin"
)

// The addresses k8s/components/hydra configures, as a person's browser sees
// them: Hydra's public API (the issuer), the login and consent pages, and
// the gateway (the connections file's public_url), all port-forwards or
// processes on the developer's loopback.
const (
	hydraPublicAddr = "127.0.0.1:4444"
	hydraLoginAddr  = "127.0.0.1:3000"
	gatewayAddr     = "127.0.0.1:8080"
	acmeProvider    = "acme"
)

var (
	pageForm   = regexp.MustCompile(`<form method="post" action="([^"]+)">`)
	pageHidden = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)
)

// checkHydraConnect: with k8s/components/hydra deployed, a principal
// connects acme as a person would — the gateway's confirm page, Hydra, the
// login and consent pages (internal/hydralogin, run here on loopback as
// `toolfleet dev hydra-login` runs on a developer's host), the gateway's
// callback (code + PKCE, the token endpoint reached in the cluster) — then
// both gateway pods list the connection (it lives in the shared KV bucket),
// another principal lists none, and after a revoke neither pod lists it.
func (h *harness) checkHydraConnect(ctx context.Context) error {
	if _, err := h.kubectl(ctx, "get", "deployment", "hydra"); err != nil {
		if strings.Contains(err.Error(), "NotFound") {
			h.note = "skipped: the hydra component is not deployed (overlay kind-hydra deploys it)"
			return nil
		}
		return err
	}
	pub, err := h.forward(ctx, "deployment/hydra", 4444)
	if err != nil {
		return err
	}
	defer pub.close()
	adm, err := h.forward(ctx, "deployment/hydra", 4445)
	if err != nil {
		return err
	}
	defer adm.close()
	admin, err := hydralogin.NewAdmin("http://"+adm.addr(), nil)
	if err != nil {
		return err
	}
	// What `toolfleet dev hydra-login --clients` does first.
	clients, err := hydralogin.ReadClients(filepath.Join(h.cfg.repo, "k8s", "components", "hydra", "clients.json"))
	if err != nil {
		return err
	}
	for _, c := range clients {
		if err := admin.EnsureClient(ctx, c); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	pages := &http.Server{Handler: hydralogin.New(admin, nil).Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = pages.Serve(ln) }()
	defer pages.Close()

	// The browser: a cookie jar, redirects followed, and the loopback
	// addresses of the configuration dialled where this run's forwards are.
	routes := map[string]string{hydraPublicAddr: pub.addr(), hydraLoginAddr: ln.Addr().String(), gatewayAddr: h.fleet.gateway.addr()}
	jar, _ := cookiejar.New(nil) // never fails without options
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	browser := &http.Client{Jar: jar, Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to, ok := routes[addr]
			if !ok {
				return nil, fmt.Errorf("the browser was sent to %s, which is none of the addresses the hydra component configures", addr)
			}
			return dialer.DialContext(ctx, network, to)
		},
	}}

	conns := h.connections(h.fleet.gateway, h.fleet.token)
	// A connection left by an earlier run would make the list below prove nothing.
	if _, err := conns.RevokeConnection(ctx, connect.NewRequest(&toolfleetv1.RevokeConnectionRequest{Provider: acmeProvider})); err != nil {
		return fmt.Errorf("revoke an earlier acme connection: %w", err)
	}
	start, err := conns.StartConnection(ctx, connect.NewRequest(&toolfleetv1.StartConnectionRequest{Provider: acmeProvider}))
	if err != nil {
		return fmt.Errorf("StartConnection(acme): %w", err)
	}
	link := start.Msg.GetAuthorizationUrl()
	if !strings.HasPrefix(link, "http://"+gatewayAddr+"/connections/start?") {
		return fmt.Errorf("the connect link does not start at the gateway's public URL http://%s", gatewayAddr)
	}
	steps := []struct {
		at     string     // the page's address (its origin and path)
		fields url.Values // what the person types or ticks
	}{
		{at: "http://" + gatewayAddr + "/connections/start"},
		{at: "http://" + hydraLoginAddr + "/login", fields: url.Values{"subject": {"kind-acme-user"}, "action": {"accept"}}},
		{at: "http://" + hydraLoginAddr + "/consent", fields: url.Values{"scope": {"offline_access", "tickets:read"}, "action": {"accept"}}},
	}
	page, at, err := browse(ctx, browser, http.MethodGet, link, nil)
	if err != nil {
		return err
	}
	for _, s := range steps {
		if !strings.HasPrefix(at, s.at) {
			return fmt.Errorf("the browser is at %s, want the page %s: %s", redactQuery(at), s.at, clipPage(page))
		}
		form, err := formOf(at, page)
		if err != nil {
			return err
		}
		for k, v := range s.fields {
			form.fields[k] = v
		}
		if page, at, err = browse(ctx, browser, http.MethodPost, form.action, form.fields); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(at, "http://"+gatewayAddr+"/connections/callback") || !strings.Contains(page, "Connected your acme account") {
		return fmt.Errorf("the flow ended at %s: %s", redactQuery(at), clipPage(page))
	}

	// Both gateway pods list it: each reads the shared bucket.
	pods, err := h.pods(ctx, "app.kubernetes.io/name=gateway")
	if err != nil {
		return err
	}
	var names []string
	for _, p := range pods {
		if p.Metadata.DeletionTimestamp == nil && p.ready() {
			names = append(names, p.Metadata.Name)
		}
	}
	if len(names) < 2 {
		return fmt.Errorf("want 2 ready gateway pods, found %v", names)
	}
	listed := func(want bool) error {
		for _, name := range names {
			f, err := h.forward(ctx, "pod/"+name, 8080)
			if err != nil {
				return err
			}
			list, err := h.connections(f, h.fleet.token).ListConnections(ctx, connect.NewRequest(&toolfleetv1.ListConnectionsRequest{}))
			f.close()
			if err != nil {
				return fmt.Errorf("ListConnections on %s: %w", name, err)
			}
			i := slices.IndexFunc(list.Msg.GetConnections(), func(c *toolfleetv1.Connection) bool { return c.GetProvider() == acmeProvider })
			switch {
			case want && i < 0:
				return fmt.Errorf("%s does not list the acme connection (providers %v)", name, list.Msg.GetProviders())
			case want && (!slices.Contains(list.Msg.GetConnections()[i].GetScopes(), "tickets:read") || !list.Msg.GetConnections()[i].GetRefreshable()):
				return fmt.Errorf("%s lists acme with scopes %v, refreshable %v: want tickets:read and a refresh token (offline_access)",
					name, list.Msg.GetConnections()[i].GetScopes(), list.Msg.GetConnections()[i].GetRefreshable())
			case !want && i >= 0:
				return fmt.Errorf("%s still lists the acme connection after its revocation", name)
			}
		}
		return nil
	}
	if err := listed(true); err != nil {
		return err
	}
	// Another principal of the same gateways sees none of it.
	other, err := h.signToken(ctx, "kind-test-other", []string{"tools:call"})
	if err != nil {
		return err
	}
	theirs, err := h.connections(h.fleet.gateway, other).ListConnections(ctx, connect.NewRequest(&toolfleetv1.ListConnectionsRequest{}))
	if err != nil {
		return fmt.Errorf("ListConnections as another principal: %w", err)
	}
	if n := len(theirs.Msg.GetConnections()); n != 0 {
		return fmt.Errorf("another principal lists %d connection(s), want none", n)
	}
	rv, err := conns.RevokeConnection(ctx, connect.NewRequest(&toolfleetv1.RevokeConnectionRequest{Provider: acmeProvider}))
	if err != nil {
		return fmt.Errorf("RevokeConnection(acme): %w", err)
	}
	if !rv.Msg.GetRevoked() || rv.Msg.GetProviderWarning() != "" {
		return fmt.Errorf("RevokeConnection(acme): revoked %v, provider warning %q (Hydra's revocation endpoint, reached in the cluster, should confirm)",
			rv.Msg.GetRevoked(), rv.Msg.GetProviderWarning())
	}
	if err := listed(false); err != nil {
		return err
	}
	h.note = fmt.Sprintf("connected acme through Hydra, listed on %s, revoked", strings.Join(names, " and "))
	return nil
}

// connections is the ConnectionService of the gateway behind f, as the
// bearer of token.
func (h *harness) connections(f *forward, token string) toolfleetv1connect.ConnectionServiceClient {
	auth := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	})
	return toolfleetv1connect.NewConnectionServiceClient(&http.Client{Timeout: time.Minute}, "http://"+f.addr(), connect.WithInterceptors(auth))
}

// browse sends a request as a browser does (a form post names its origin)
// and follows the redirects; it returns the page it ends on and its address.
func browse(ctx context.Context, browser *http.Client, method, u string, form url.Values) (page, at string, err error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return "", "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", req.URL.Scheme+"://"+req.URL.Host)
	}
	resp, err := browser.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = fmt.Errorf("%s %s: %w", method, redactQuery(ue.URL), ue.Err)
		}
		return "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("%s ended at %s with %s: %s", method, redactQuery(resp.Request.URL.String()), resp.Status, clipPage(string(b)))
	}
	return string(b), resp.Request.URL.String(), nil
}

// htmlForm is a page's one form: where it posts and its hidden fields.
type htmlForm struct {
	action string
	fields url.Values
}

func formOf(at, page string) (htmlForm, error) {
	m := pageForm.FindStringSubmatch(page)
	if m == nil {
		return htmlForm{}, fmt.Errorf("no form on %s: %s", redactQuery(at), clipPage(page))
	}
	base, err := url.Parse(at)
	if err != nil {
		return htmlForm{}, err
	}
	action, err := base.Parse(html.UnescapeString(m[1]))
	if err != nil {
		return htmlForm{}, err
	}
	f := htmlForm{action: action.String(), fields: url.Values{}}
	for _, h := range pageHidden.FindAllStringSubmatch(page, -1) {
		f.fields.Set(h[1], html.UnescapeString(h[2]))
	}
	return f, nil
}

// redactQuery drops a URL's query: it carries states, challenges and codes.
func redactQuery(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

func clipPage(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
