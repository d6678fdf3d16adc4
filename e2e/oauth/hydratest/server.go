package hydratest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Options configure a Hydra started by [Start]. The zero value is a Hydra
// with JWT access tokens, a one-hour access token and a fresh login/consent
// provider that signs everyone in as [DefaultSubject].
type Options struct {
	// OpaqueAccessTokens issues opaque access tokens (Hydra's default)
	// instead of JWTs. JWT access tokens carry iss, sub, aud, scp, client_id
	// and exp and verify against Hydra's JWKS; opaque ones only introspect.
	OpaqueAccessTokens bool
	// AccessTokenTTL, RefreshTokenTTL and IDTokenTTL are the token lifetimes
	// (Hydra's defaults: 1h, 720h, 1h).
	AccessTokenTTL, RefreshTokenTTL, IDTokenTTL time.Duration
	// TokenHookURL is oauth2.token_hook: Hydra POSTs every token request to
	// it and adds the claims it answers (see [TokenHook]).
	TokenHookURL string
	// TopLevelClaims are oauth2.allowed_top_level_claims: extra access token
	// claims (from the consent session or the token hook) that JWT access
	// tokens carry at their top level, not only under "ext".
	TopLevelClaims []string
	// Provider is the login/consent provider. Default: a new [Provider].
	Provider *Provider
	// LoginApp, when set, is the base URL of another login and consent app
	// (its /login, /consent, /logout and /error) used instead of Provider,
	// e.g. `toolfleet dev hydra-login`'s pages.
	LoginApp string
	// StartTimeout bounds the start, health included. Default 2 minutes
	// (a cold build of the binary comes first and has its own bound).
	StartTimeout time.Duration
}

// Server is a running Hydra: `hydra serve all --dev` on loopback ports with
// an in-memory SQLite database and a fresh system secret, and its
// login/consent provider.
type Server struct {
	// Issuer is the public URL (http://127.0.0.1:PORT/), the iss of every
	// token and the base of /.well-known/openid-configuration.
	Issuer string
	// PublicURL is Issuer without the trailing slash; AdminURL is the admin
	// API's base URL (clients, introspection, login and consent requests).
	PublicURL, AdminURL string
	// Provider decides logins and consents.
	Provider *Provider

	admin *http.Client
}

// JWKSURL is the URL of the keys that sign ID tokens and JWT access tokens.
func (s *Server) JWKSURL() string { return s.PublicURL + "/.well-known/jwks.json" }

// AuthURL and TokenURL are the OAuth 2.0 endpoints; RevokeURL revokes.
func (s *Server) AuthURL() string   { return s.PublicURL + "/oauth2/auth" }
func (s *Server) TokenURL() string  { return s.PublicURL + "/oauth2/token" }
func (s *Server) RevokeURL() string { return s.PublicURL + "/oauth2/revoke" }

// Start builds (once) and starts Hydra for t and stops it when t ends. It
// fails t when Hydra cannot be built or does not become healthy in time;
// Hydra's log is printed then, and whenever t fails.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	ctx := t.Context()
	bin, err := Binary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Provider == nil {
		opts.Provider = NewProvider()
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	provider := opts.LoginApp
	if provider == "" {
		provider = serveProvider(t, opts.Provider)
	}
	var lastErr error
	for range 3 { // a free port can be taken between picking and binding it
		s, err := start(t, bin, provider, opts)
		if err == nil {
			opts.Provider.attach(s)
			return s
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	t.Fatalf("hydratest: start hydra: %v", lastErr)
	return nil
}

// start runs one hydra process; on failure it is stopped again.
func start(t testing.TB, bin, provider string, opts Options) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	s := &Server{
		Issuer:    fmt.Sprintf("http://127.0.0.1:%d/", ports[0]),
		PublicURL: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		AdminURL:  fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		Provider:  opts.Provider,
		admin:     &http.Client{Timeout: 30 * time.Second},
	}
	cfg, err := json.MarshalIndent(config(s, ports, provider, opts), "", "  ")
	if err != nil {
		return nil, err
	}
	cfgFile := filepath.Join(dir, "hydra.json")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "hydra.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "all", "--dev", "--sqa-opt-out", "--config", cfgFile)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "SQA_OPT_OUT=true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
			}
			logFile.Close()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("hydra log (%s):\n%s", logFile.Name(), tail(logFile.Name(), 8<<10))
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), opts.StartTimeout)
	defer cancel()
	if err := s.waitHealthy(ctx, exited); err != nil {
		stop()
		return nil, fmt.Errorf("%w\nhydra log:\n%s", err, tail(logFile.Name(), 4<<10))
	}
	return s, nil
}

// config is Hydra's configuration file (JSON; see Hydra's spec/config.json).
func config(s *Server, ports []int, provider string, opts Options) map[string]any {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	ttl := map[string]any{}
	for k, d := range map[string]time.Duration{"access_token": opts.AccessTokenTTL, "refresh_token": opts.RefreshTokenTTL, "id_token": opts.IDTokenTTL} {
		if d > 0 {
			ttl[k] = d.String()
		}
	}
	strategy := "jwt"
	if opts.OpaqueAccessTokens {
		strategy = "opaque"
	}
	oauth2 := map[string]any{
		"pkce":                   map[string]any{"enforced_for_public_clients": true},
		"expose_internal_errors": true,
	}
	if opts.TokenHookURL != "" {
		oauth2["token_hook"] = opts.TokenHookURL
	}
	if len(opts.TopLevelClaims) > 0 {
		oauth2["allowed_top_level_claims"] = opts.TopLevelClaims
	}
	return map[string]any{
		"dsn": "memory",
		"log": map[string]any{"level": "warn", "leak_sensitive_values": false},
		"serve": map[string]any{
			"public": map[string]any{"host": "127.0.0.1", "port": ports[0]},
			"admin":  map[string]any{"host": "127.0.0.1", "port": ports[1]},
		},
		"urls": map[string]any{
			"self":    map[string]any{"issuer": s.Issuer, "public": s.Issuer},
			"login":   provider + "/login",
			"consent": provider + "/consent",
			"logout":  provider + "/logout",
			"error":   provider + "/error",
		},
		"secrets":    map[string]any{"system": []string{hex.EncodeToString(secret)}},
		"strategies": map[string]any{"access_token": strategy},
		"ttl":        ttl,
		"oauth2":     oauth2,
		"sqa":        map[string]any{"opt_out": true},
	}
}

// waitHealthy polls both health endpoints until they answer 200, the
// process exits, or ctx ends.
func (s *Server) waitHealthy(ctx context.Context, exited <-chan error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.ready(ctx, s.AdminURL) && s.ready(ctx, s.PublicURL) {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("hydra exited before it was ready: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("hydra not ready at %s: %w", s.AdminURL, ctx.Err())
		case <-tick.C:
		}
	}
}

func (s *Server) ready(ctx context.Context, base string) bool {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+"/health/ready", nil)
	resp, err := s.admin.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freePorts picks n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail is the last max bytes of a file.
func tail(path string, max int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	if off := st.Size() - max; off > 0 {
		_, _ = f.Seek(off, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	return string(b)
}

// adminJSON calls the admin API: method path with body (JSON) into out.
// A status other than 2xx is an error carrying Hydra's answer.
func (s *Server) adminJSON(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.AdminURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return s.do(req, out)
}

// do sends req to Hydra and decodes a 2xx answer into out (when not nil).
func (s *Server) do(req *http.Request, out any) error {
	resp, err := s.admin.Do(req)
	if err != nil {
		return fmt.Errorf("hydra %s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("hydra %s %s: %w", req.Method, req.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &APIError{Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	if out == nil || len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("hydra %s %s: decode: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// APIError is a non-2xx answer of Hydra.
type APIError struct {
	Status int
	Body   string
}

func (e *APIError) Error() string {
	return "hydra answered " + strconv.Itoa(e.Status) + ": " + e.Body
}

// IsStatus reports whether err is Hydra's answer with that status.
func IsStatus(err error, status int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == status
}
