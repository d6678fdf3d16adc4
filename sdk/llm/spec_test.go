package llm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    Spec
		wantErr string
	}{
		{in: "openai:gpt-4.1", want: Spec{Provider: "openai", Name: "gpt-4.1"}},
		{in: "anthropic:claude-sonnet-4-5", want: Spec{Provider: "anthropic", Name: "claude-sonnet-4-5"}},
		{in: "gemini:gemini-2.5-flash", want: Spec{Provider: "gemini", Name: "gemini-2.5-flash"}},
		{in: "scripted:demo", want: Spec{Provider: "scripted", Name: "demo"}},
		{in: "ollama:llama3.2", wantErr: `unknown provider "ollama"`},
		{in: "gpt-4.1", wantErr: "want provider:model"},
		{in: "openai:", wantErr: "no model name"},
		{in: "scripted:chatty", wantErr: `unknown scripted model "chatty"`},
		{in: "openai-compatible:llama3.2", want: Spec{Provider: "openai-compatible", Name: "llama3.2"}},
		{in: "openai-compatible:", wantErr: "no model name"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSpec(tt.in)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrSpec containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestSpecValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    Spec
		wantErr string
	}{
		{"ollama", Spec{Provider: "openai-compatible", Name: "llama3.2", BaseURL: "http://127.0.0.1:11434/v1"}, ""},
		{"compatible without a base URL", Spec{Provider: "openai-compatible", Name: "llama3.2"}, "needs a base URL"},
		{"key file", Spec{Provider: "anthropic", Name: "claude", KeyRef: "file:/run/secrets/anthropic"}, ""},
		{"base url not http", Spec{Provider: "openai", Name: "m", BaseURL: "ftp://x"}, "not an http(s) URL"},
		{"base url with credentials", Spec{Provider: "openai", Name: "m", BaseURL: "https://u:p@x"}, "must not carry credentials"},
		{"a key instead of a reference", Spec{Provider: "openai", Name: "m", KeyRef: "sk-proj-SECRET"}, "env:NAME or file:/path"},
		{"empty env name", Spec{Provider: "openai", Name: "m", KeyRef: "env:"}, "env:NAME or file:/path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.spec.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "SECRET") || strings.Contains(tt.spec.String(), "SECRET") {
				t.Errorf("a key leaked into %q / %q", err, tt.spec.String())
			}
		})
	}
}

func TestResolveKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("key", "sk-test-123\n", 0o600)
	empty := write("empty", " \n", 0o600)
	big := write("big", strings.Repeat("k", maxKeyFile+1), 0o600)
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"MY_KEY": " sk-env-456 ", "BLANK": ""}[name]
		return v, ok
	}
	tests := []struct {
		ref, want, wantErr string
	}{
		{ref: "env:MY_KEY", want: "sk-env-456"},
		{ref: "file:" + good, want: "sk-test-123"},
		{ref: "env:MISSING", wantErr: "environment variable MISSING is not set"},
		{ref: "env:BLANK", wantErr: "environment variable BLANK is empty"},
		{ref: "file:" + filepath.Join(dir, "absent"), wantErr: "no such file or directory"},
		{ref: "file:" + dir, wantErr: "is a directory"},
		{ref: "file:" + empty, wantErr: "file is empty"},
		{ref: "file:" + big, wantErr: "larger than"},
		{ref: "sk-live-SECRET", wantErr: "env:NAME or file:/path"},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			t.Parallel()
			got, err := ResolveKey(tt.ref, env)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "SECRET") {
					t.Errorf("error echoes the value: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ResolveKey(%q) = %q, %v; want %q", tt.ref, got, err, tt.want)
			}
		})
	}
}

func TestSpecStringHidesQuery(t *testing.T) {
	t.Parallel()
	s := Spec{Provider: "openai", Name: "gpt", BaseURL: "https://x.example/v1?api-key=SECRET"}
	if got := s.String(); got != "openai:gpt at https://x.example/v1" {
		t.Errorf("String() = %q", got)
	}
}
