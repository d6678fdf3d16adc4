package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{"provider default", ModelSpec{Provider: "openai"}, "sk-openai", ""},
		{"explicit provider var", ModelSpec{Provider: "openai", KeyRef: "env:OPENAI_API_KEY"}, "sk-openai", ""},
		{"toolfleet var", ModelSpec{Provider: "openai-compatible", BaseURL: "http://127.0.0.1:1", KeyRef: "env:TOOLFLEET_MODEL_KEY_LOCAL"}, "sk-local", ""},
		{"file in the key folder", ModelSpec{Provider: "anthropic", KeyRef: "file:anthropic"}, "sk-ant", ""},
		{"local server without key", ModelSpec{Provider: "openai-compatible", BaseURL: "http://127.0.0.1:1"}, "none", ""},
		{"any env var", ModelSpec{Provider: "openai", KeyRef: "env:HOME_SECRET"}, "", "only OPENAI_API_KEY"},
		{"provider key to a custom base URL", ModelSpec{Provider: "openai", BaseURL: "https://evil.example", KeyRef: "env:OPENAI_API_KEY"}, "", "only OPENAI_API_KEY"},
		{"default key to a custom base URL", ModelSpec{Provider: "openai", BaseURL: "https://evil.example"}, "", "explicit key reference"},
		{"file outside the key folder", ModelSpec{Provider: "anthropic", KeyRef: "file:../../etc/passwd"}, "", "escapes"},
		{"empty key", ModelSpec{Provider: "gemini"}, "", "empty"},
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
