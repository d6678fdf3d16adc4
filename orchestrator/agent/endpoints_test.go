package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/sdk/llm"
)

func TestEndpointsCheck(t *testing.T) {
	t.Parallel()
	eps, err := ParseEndpoints(
		"env:TOOLFLEET_MODEL_KEY_VLLM=https://vllm.internal:8000/v1, https://vllm-b.internal/v1",
		"file:anthropic-team=default; none=http://127.0.0.1:*,http://ollama:11434/v1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec llm.Spec
		ok   bool
	}{
		{"scripted", llm.Spec{Provider: "scripted", Name: "demo"}, true},
		{"usual key to its provider", llm.Spec{Provider: "openai", Name: "gpt"}, true},
		{"usual key named, to its provider", llm.Spec{Provider: "anthropic", Name: "c", KeyRef: "env:ANTHROPIC_API_KEY"}, true},
		{"usual key to a custom URL", llm.Spec{Provider: "openai", Name: "gpt", BaseURL: "https://vllm.internal:8000/v1", KeyRef: "env:OPENAI_API_KEY"}, false},
		{"no key ref with a custom URL (not openai-compatible)", llm.Spec{Provider: "openai", Name: "gpt", BaseURL: "https://vllm.internal:8000/v1"}, false},
		{"bound key, bound URL", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:8000/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, true},
		{"bound key, path under the bound one", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:8000/v1/", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, true},
		{"bound key, second URL, default port", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm-b.internal:443/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, true},
		{"bound key, other port", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:9000/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, false},
		{"bound key, http instead of https", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "http://vllm.internal:8000/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, false},
		{"bound key, sibling path", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:8000/v10", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, false},
		{"bound key, path escaping with ..", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:8000/v1/../admin", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, false},
		{"bound key, userinfo trick", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:8000@evil.example/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, false},
		{"bound key, host suffix trick", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal.evil.example:8000/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, false},
		{"bound key, provider endpoint", llm.Spec{Provider: "openai", Name: "gpt", KeyRef: "env:TOOLFLEET_MODEL_KEY_VLLM"}, false},
		{"unbound key", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "https://vllm.internal:8000/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_OTHER"}, false},
		{"file key to its provider", llm.Spec{Provider: "anthropic", Name: "c", KeyRef: "file:anthropic-team"}, true},
		{"file key to a custom URL", llm.Spec{Provider: "anthropic", Name: "c", BaseURL: "https://proxy.example", KeyRef: "file:anthropic-team"}, false},
		{"keyless to loopback any port", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "http://127.0.0.1:11434/v1"}, true},
		{"keyless to a bound internal host", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "http://ollama:11434/v1"}, true},
		{"keyless to an internal URL", llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "http://169.254.169.254/latest"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := eps.Check(tt.spec)
			if tt.ok && err != nil {
				t.Fatalf("Check = %v, want allowed", err)
			}
			if !tt.ok && !errors.Is(err, ErrEndpointNotAllowed) {
				t.Fatalf("Check = %v, want ErrEndpointNotAllowed", err)
			}
		})
	}
	// The zero value binds nothing.
	var none *Endpoints
	if err := none.Check(llm.Spec{Provider: "openai-compatible", Name: "m", BaseURL: "http://127.0.0.1:1"}); err == nil {
		t.Fatal("nil Endpoints allowed a keyless custom URL")
	}
	if err := none.Check(llm.Spec{Provider: "gemini", Name: "g"}); err != nil {
		t.Fatalf("nil Endpoints refused the provider's usual key: %v", err)
	}
}

func TestParseEndpointsErrors(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"env:X",                    // no URLs
		"OPENAI_API_KEY=default",   // not a key reference
		"env:X=ftp://h/",           // scheme
		"env:X=https://u:p@h/v1",   // credentials
		"env:X=https://h/v1?k=1",   // query
		"none=default",             // a keyless provider endpoint
		"env:X=vllm.internal:8000", // no scheme
	} {
		if _, err := ParseEndpoints(bad); err == nil {
			t.Errorf("ParseEndpoints(%q) accepted it", bad)
		} else if strings.Contains(err.Error(), "p@h") {
			t.Errorf("the error %q repeats credentials", err)
		}
	}
}
