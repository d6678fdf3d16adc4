package models

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/redirecttest"
)

// provider is a loopback server that answers every provider's endpoint
// with a documented response body and records the credentials it saw.
type provider struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // "path auth-header-or-key"
}

func newProvider(t *testing.T) *provider {
	t.Helper()
	p := &provider{}
	fixture := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "wire", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bodies := map[string][]byte{
		"/v1/chat/completions": fixture("openai/documented_response.json"),
		"/v1/responses":        fixture("openai-responses/documented_response.json"),
		"/v1/messages":         fixture("anthropic/documented_response.json"),
	}
	gem := fixture("gemini/documented_response.json")
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		cred := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key") + r.Header.Get("X-Goog-Api-Key")
		p.mu.Lock()
		p.seen = append(p.seen, r.URL.Path+" "+cred+" org="+r.Header.Get("OpenAI-Organization"))
		p.mu.Unlock()
		body, ok := bodies[r.URL.Path]
		if strings.HasSuffix(r.URL.Path, ":generateContent") {
			body, ok = gem, true
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		return ""
	}
	return p.seen[len(p.seen)-1]
}

func request() *llm.Request {
	def := &toolfleetv1.ToolDefinition{ModelName: "get_weather", Description: "Weather."}
	return &llm.Request{Messages: []*toolfleetv1.Message{llm.User("Weather?")}, Tools: []*toolfleetv1.ToolDefinition{def}}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "anthropic-key")
	if err := os.WriteFile(keyFile, []byte("sk-ant-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := WithLookupEnv(func(name string) (string, bool) {
		v, ok := map[string]string{"OPENAI_API_KEY": "sk-default", "TEAM_KEY": "sk-team", "GEMINI_API_KEY": "gm-key"}[name]
		return v, ok
	})
	tests := []struct {
		name     string
		spec     func(base string) llm.Spec
		wantSeen string // prefix of what the server saw
	}{
		{"openai default key", func(b string) llm.Spec { return llm.Spec{Provider: "openai", Name: "gpt-test", BaseURL: b + "/v1"} }, "/v1/chat/completions Bearer sk-default"},
		{"openai env ref", func(b string) llm.Spec {
			return llm.Spec{Provider: "openai", Name: "gpt-test", BaseURL: b + "/v1", KeyRef: "env:TEAM_KEY"}
		}, "/v1/chat/completions Bearer sk-team"},
		{"openai responses", func(b string) llm.Spec {
			return llm.Spec{Provider: "openai-responses", Name: "gpt-test", BaseURL: b + "/v1"}
		}, "/v1/responses Bearer sk-default"},
		{"ollama without key", func(b string) llm.Spec {
			return llm.Spec{Provider: "openai-compatible", Name: "llama3.2", BaseURL: b + "/v1"}
		}, "/v1/chat/completions "},
		{"anthropic file ref", func(b string) llm.Spec {
			return llm.Spec{Provider: "anthropic", Name: "claude-test", BaseURL: b, KeyRef: "file:" + keyFile}
		}, "/v1/messages sk-ant-file"},
		{"gemini", func(b string) llm.Spec { return llm.Spec{Provider: "gemini", Name: "gemini-test", BaseURL: b} }, "/v1beta/models/gemini-test:generateContent gm-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t)
			m, err := Open(t.Context(), tt.spec(p.srv.URL), env)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := m.Complete(t.Context(), request())
			if err != nil {
				t.Fatal(err)
			}
			if len(llm.ToolCalls(msg)) == 0 {
				t.Error("no tool calls parsed")
			}
			if got := p.last(); !strings.HasPrefix(got, tt.wantSeen) {
				t.Errorf("server saw %q, want prefix %q", got, tt.wantSeen)
			}
		})
	}
}

// TestOpenCompatibleSendsNoOpenAIKey: a key for api.openai.com in the
// environment must not reach an OpenAI-compatible server the spec points at.
func TestOpenCompatibleSendsNoOpenAIKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-real-openai")
	t.Setenv("OPENAI_ORG_ID", "org-real")
	p := newProvider(t)
	m, err := Open(t.Context(), llm.Spec{Provider: "openai-compatible", Name: "llama3.2", BaseURL: p.srv.URL + "/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(t.Context(), request()); err != nil {
		t.Fatal(err)
	}
	if got := p.last(); strings.Contains(got, "sk-real-openai") || strings.Contains(got, "org-real") {
		t.Errorf("the OpenAI environment leaked to a compatible server: %q", got)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	noEnv := WithLookupEnv(func(string) (string, bool) { return "", false })
	tests := []struct {
		name    string
		spec    llm.Spec
		wantErr string
	}{
		{"default key unset", llm.Spec{Provider: "anthropic", Name: "claude"}, "environment variable ANTHROPIC_API_KEY is not set"},
		{"missing file", llm.Spec{Provider: "gemini", Name: "g", KeyRef: "file:/nonexistent/key"}, "file:/nonexistent/key: no such file"},
		{"bad spec", llm.Spec{Provider: "openai-compatible", Name: "m"}, "needs a base URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Open(t.Context(), tt.spec, noEnv)
			if !errors.Is(err, llm.ErrSpec) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want ErrSpec containing %q", err, tt.wantErr)
			}
		})
	}
}

// Scripted models (the demo, script files) are not the public SDK's to
// open: Open refuses them with ErrSpec, so it never pulls them in.
func TestOpenRefusesScripted(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"demo", "turns.yaml"} {
		spec, err := llm.ParseSpec("scripted:" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Open(t.Context(), spec, WithLookupEnv(func(string) (string, bool) { return "", false })); !errors.Is(err, llm.ErrSpec) || !strings.Contains(err.Error(), "llmtest") {
			t.Errorf("Open(%s) = %v, want ErrSpec naming llmtest", spec, err)
		}
	}
}

// countingTransport counts the requests sent through it.
type countingTransport struct {
	mu sync.Mutex
	n  int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// TestOpenRefusesRedirects: whichever provider, and whether or not the
// caller gives its own HTTP client (even one whose policy follows every
// redirect), a key never follows a redirect; the caller's client is used
// for the request but not changed.
func TestOpenRefusesRedirects(t *testing.T) {
	t.Parallel()
	const key = "secret-test-key"
	env := WithLookupEnv(func(name string) (string, bool) { return key, name == "TEAM_KEY" })
	for _, provider := range []string{"openai", "openai-responses", "openai-compatible", "anthropic", "gemini"} {
		for _, own := range []bool{false, true} {
			tc := redirecttest.Case{Status: http.StatusTemporaryRedirect, Host: "localhost"}
			t.Run(fmt.Sprintf("%s own client=%v", provider, own), func(t *testing.T) {
				t.Parallel()
				base, target := redirecttest.Start(t, tc)
				if provider != "anthropic" && provider != "gemini" {
					base += "/v1"
				}
				opts := []Option{env}
				transport := &countingTransport{}
				follow := func(*http.Request, []*http.Request) error { return nil }
				hc := &http.Client{Transport: transport, CheckRedirect: follow}
				if own {
					opts = append(opts, WithHTTPClient(hc))
				}
				m, err := Open(t.Context(), llm.Spec{Provider: provider, Name: "model-test", BaseURL: base, KeyRef: "env:TEAM_KEY"}, opts...)
				if err != nil {
					t.Fatal(err)
				}
				_, err = m.Stream(t.Context(), request(), nil)
				redirecttest.Check(t, tc, err, target, key)
				if own {
					if transport.n != 1 {
						t.Errorf("the caller's transport sent %d requests, want 1", transport.n)
					}
					if reflect.ValueOf(hc.CheckRedirect).Pointer() != reflect.ValueOf(follow).Pointer() || hc.Transport != transport {
						t.Error("the caller's client was changed")
					}
				}
			})
		}
	}
}
