package agent

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

func TestKeyReferences(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	t.Setenv("TOOLFLEET_MODEL_KEY_LOCAL", "sk-local")
	t.Setenv("HOME_SECRET", "do-not-leak")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "anthropic"), []byte("sk-ant\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Resolver{KeyDir: dir}
	tests := []struct {
		name    string
		spec    ModelSpec
		want    string
		wantErr string
	}{
		{"provider default", ModelSpec{Spec: llm.Spec{Provider: "openai"}}, "sk-openai", ""},
		{"explicit provider var", ModelSpec{Spec: llm.Spec{Provider: "openai", KeyRef: "env:OPENAI_API_KEY"}}, "sk-openai", ""},
		{"toolfleet var", ModelSpec{Spec: llm.Spec{Provider: "openai-compatible", BaseURL: "http://127.0.0.1:1", KeyRef: "env:TOOLFLEET_MODEL_KEY_LOCAL"}}, "sk-local", ""},
		{"file in the key folder", ModelSpec{Spec: llm.Spec{Provider: "anthropic", KeyRef: "file:anthropic"}}, "sk-ant", ""},
		{"local server without key", ModelSpec{Spec: llm.Spec{Provider: "openai-compatible", BaseURL: "http://127.0.0.1:1"}}, "", ""},
		{"any env var", ModelSpec{Spec: llm.Spec{Provider: "openai", KeyRef: "env:HOME_SECRET"}}, "", "only OPENAI_API_KEY"},
		{"provider key to a custom base URL", ModelSpec{Spec: llm.Spec{Provider: "openai", BaseURL: "https://evil.example", KeyRef: "env:OPENAI_API_KEY"}}, "", "only OPENAI_API_KEY"},
		{"default key to a custom base URL", ModelSpec{Spec: llm.Spec{Provider: "openai", BaseURL: "https://evil.example"}}, "", "explicit key reference"},
		{"file outside the key folder", ModelSpec{Spec: llm.Spec{Provider: "anthropic", KeyRef: "file:../../etc/passwd"}}, "", "escapes"},
		{"empty key", ModelSpec{Spec: llm.Spec{Provider: "gemini"}}, "", "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := r.key(tt.spec, providerEnv[tt.spec.Provider])
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("key = %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("key = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestResolverOpensModels drives the models the Resolver opens against a
// loopback provider and checks which credential reached it.
func TestResolverOpensModels(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	t.Setenv("TOOLFLEET_MODEL_KEY_LOCAL", "sk-local")
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}]}`)
	}))
	t.Cleanup(srv.Close)
	r := NewResolver()
	eps, err := ParseEndpoints("env:TOOLFLEET_MODEL_KEY_LOCAL=" + srv.URL + "/v1;none=" + srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	r.Endpoints = eps
	tests := []struct {
		name     string
		spec     ModelSpec
		wantAuth string
	}{
		{"explicit toolfleet key to a local server", ModelSpec{Spec: llm.Spec{Provider: "openai-compatible", Name: "llama", BaseURL: srv.URL + "/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_LOCAL"}}, "Bearer sk-local"},
		{"local server without key gets no OpenAI key", ModelSpec{Spec: llm.Spec{Provider: "openai-compatible", Name: "llama", BaseURL: srv.URL}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := r.Model(t.Context(), tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			msg, err := m.Complete(t.Context(), &llm.Request{Messages: []*toolfleetv1.Message{llm.User("hello")}})
			if err != nil {
				t.Fatal(err)
			}
			if got := llm.MessageText(msg); got != "hi" {
				t.Fatalf("reply %q, want hi", got)
			}
			mu.Lock()
			got := seen[len(seen)-1]
			mu.Unlock()
			if strings.TrimSpace(strings.TrimPrefix(got, "Bearer")) != strings.TrimSpace(strings.TrimPrefix(tt.wantAuth, "Bearer")) {
				t.Fatalf("server saw Authorization %q, want %q", got, tt.wantAuth)
			}
		})
	}
}

func TestResolverScripted(t *testing.T) {
	t.Parallel()
	r := NewResolver()
	m, err := r.Model(t.Context(), ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "demo"}})
	if err != nil {
		t.Fatal(err)
	}
	req := &llm.Request{Messages: []*toolfleetv1.Message{llm.User("add 2 and 3")},
		Tools: []*toolfleetv1.ToolDefinition{{ModelName: "Calculator_Add"}}}
	msg, err := m.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if calls := llm.ToolCalls(msg); len(calls) != 1 || calls[0].GetName() != "Calculator_Add" {
		t.Fatalf("demo's first turn = %v, want one Calculator_Add call", calls)
	}
	if _, err := r.Model(t.Context(), ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "nope"}}); !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("scripted:nope: err = %v, want ErrUnknownModel", err)
	}
	if _, err := r.Model(t.Context(), ModelSpec{Spec: llm.Spec{Provider: "openai", Name: "gpt", BaseURL: "https://evil.example"}}); err == nil {
		t.Fatal("a custom base URL without a key reference was accepted")
	}
}

// TestResolverRefusesUnboundEndpoints is the attack of issue 21 §3: a run
// names its own server as base URL and hopes the orchestrator sends it a key
// (or calls an internal URL for it). Nothing may reach the server.
func TestResolverRefusesUnboundEndpoints(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-openai")
	t.Setenv("TOOLFLEET_MODEL_KEY_LOCAL", "sk-local")
	t.Setenv("TOOLFLEET_MODEL_KEY_OTHER", "sk-other")
	var mu sync.Mutex
	hits := 0
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
	}))
	t.Cleanup(evil.Close)
	r := NewResolver()
	eps, err := ParseEndpoints("env:TOOLFLEET_MODEL_KEY_LOCAL=https://vllm.internal/v1")
	if err != nil {
		t.Fatal(err)
	}
	r.Endpoints = eps
	for _, spec := range []llm.Spec{
		{Provider: "openai-compatible", Name: "m", BaseURL: evil.URL, KeyRef: "env:TOOLFLEET_MODEL_KEY_LOCAL"},
		{Provider: "openai-compatible", Name: "m", BaseURL: evil.URL, KeyRef: "env:TOOLFLEET_MODEL_KEY_OTHER"},
		{Provider: "openai-compatible", Name: "m", BaseURL: evil.URL},
		{Provider: "openai", Name: "m", BaseURL: evil.URL, KeyRef: "env:OPENAI_API_KEY"},
		{Provider: "openai", Name: "m", KeyRef: "env:TOOLFLEET_MODEL_KEY_LOCAL"}, // bound to vLLM, not to OpenAI
	} {
		m, err := r.Model(t.Context(), ModelSpec{Spec: spec})
		if !errors.Is(err, ErrEndpointNotAllowed) {
			t.Fatalf("%+v: Model = %v, %v; want ErrEndpointNotAllowed", spec, m, err)
		}
		if strings.Contains(err.Error(), "vllm.internal") {
			t.Fatalf("the refusal %q reveals the operator's bound URLs", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 0 {
		t.Fatalf("the unbound server got %d requests", hits)
	}
}

// TestCheckModel: the StartRun check says what Model would refuse, without
// opening a client, and names the variable a missing key needs.
func TestCheckModel(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("TOOLFLEET_MODEL_KEY_SET", "sk-set")
	r := NewResolver()
	r.Register("mine", nil)
	var err error
	if r.Endpoints, err = ParseEndpoints("env:TOOLFLEET_MODEL_KEY_SET=default", "env:TOOLFLEET_MODEL_KEY_UNSET=default", "none=http://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		spec        ModelSpec
		wantErr     string
		wantMissing bool
	}{
		{"the demo", ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "demo"}}, "", false},
		{"a registered script", ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "mine"}}, "", false},
		{"an unknown script", ModelSpec{Spec: llm.Spec{Provider: "scripted", Name: "nope"}}, "unknown model: scripted:nope", false},
		{"an unknown provider", ModelSpec{Spec: llm.Spec{Provider: "acme", Name: "x"}}, `unknown model: provider "acme"`, false},
		{"a set key", ModelSpec{Spec: llm.Spec{Provider: "openai", Name: "gpt-4o", KeyRef: "env:TOOLFLEET_MODEL_KEY_SET"}}, "", false},
		{"the provider's key unset", ModelSpec{Spec: llm.Spec{Provider: "openai", Name: "gpt-4o"}},
			"openai:gpt-4o needs OPENAI_API_KEY, which is not set where the orchestrator runs", true},
		{"a named key unset", ModelSpec{Spec: llm.Spec{Provider: "anthropic", Name: "claude", KeyRef: "env:TOOLFLEET_MODEL_KEY_UNSET"}},
			"export TOOLFLEET_MODEL_KEY_UNSET=…", true},
		{"a local server needs none", ModelSpec{Spec: llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "http://127.0.0.1:1"}}, "", false},
		{"a key not bound to the endpoint", ModelSpec{Spec: llm.Spec{Provider: "openai", Name: "m", KeyRef: "env:HOME"}}, "may not be sent", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := r.CheckModel(tt.spec)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckModel: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || errors.Is(err, ErrModelKeyMissing) != tt.wantMissing {
				t.Fatalf("CheckModel: %v, want %q (missing key: %v)", err, tt.wantErr, tt.wantMissing)
			}
		})
	}
}
