package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	anthropicopt "github.com/anthropics/anthropic-sdk-go/option"
	openaiopt "github.com/openai/openai-go/v3/option"
	"google.golang.org/genai"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/anthropic"
	"github.com/toolfleet/toolfleet/sdk/llm/gemini"
	"github.com/toolfleet/toolfleet/sdk/llm/openai"
)

// Models turns a run's [ModelSpec] into a model. It is called inside the
// ModelTurn activity, so key references are resolved at call time and never
// reach workflow history. The llm branch's spec resolver plugs in here.
type Models interface {
	Model(ctx context.Context, spec ModelSpec) (llm.Model, error)
}

// ErrUnknownModel means no model matches a spec.
var ErrUnknownModel = errors.New("agent: unknown model")

// Resolver is the default [Models]: the providers' official SDKs through
// sdk/llm, plus named scripted models registered with Register.
type Resolver struct {
	mu       sync.RWMutex
	scripted map[string]llm.Model
}

// NewResolver returns a resolver with no scripted models.
func NewResolver() *Resolver { return &Resolver{scripted: map[string]llm.Model{}} }

// Register makes m the model of spec {Provider: "scripted", Name: name}.
func (r *Resolver) Register(name string, m llm.Model) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scripted[name] = m
}

// Model implements [Models].
func (r *Resolver) Model(ctx context.Context, spec ModelSpec) (llm.Model, error) {
	switch spec.Provider {
	case "scripted":
		r.mu.RLock()
		m, ok := r.scripted[spec.Name]
		r.mu.RUnlock()
		if !ok {
			return nil, fmt.Errorf("%w: scripted:%s", ErrUnknownModel, spec.Name)
		}
		return m, nil
	case "openai", "openai-compatible":
		key, err := resolveKey(spec.KeyRef, "OPENAI_API_KEY", spec.Provider == "openai")
		if err != nil {
			return nil, err
		}
		opts := []openaiopt.RequestOption{openaiopt.WithAPIKey(key)}
		if spec.BaseURL != "" {
			opts = append(opts, openaiopt.WithBaseURL(spec.BaseURL))
		} else if spec.Provider == "openai-compatible" {
			return nil, errors.New("agent: openai-compatible models need a base URL")
		}
		return openai.New(openai.ChatCompletions, spec.Name, opts...), nil
	case "anthropic":
		key, err := resolveKey(spec.KeyRef, "ANTHROPIC_API_KEY", true)
		if err != nil {
			return nil, err
		}
		opts := []anthropicopt.RequestOption{anthropicopt.WithAPIKey(key)}
		if spec.BaseURL != "" {
			opts = append(opts, anthropicopt.WithBaseURL(spec.BaseURL))
		}
		return anthropic.New(spec.Name, opts...), nil
	case "gemini":
		key, err := resolveKey(spec.KeyRef, "GEMINI_API_KEY", true)
		if err != nil {
			return nil, err
		}
		cfg := &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI}
		if spec.BaseURL != "" {
			cfg.HTTPOptions.BaseURL = spec.BaseURL
		}
		return gemini.New(ctx, spec.Name, cfg)
	}
	return nil, fmt.Errorf("%w: provider %q", ErrUnknownModel, spec.Provider)
}

// resolveKey reads a key reference: "env:NAME", "file:/path", or empty for
// the provider's usual env var.
func resolveKey(ref, defaultEnv string, required bool) (string, error) {
	var key string
	switch {
	case ref == "":
		key = os.Getenv(defaultEnv)
		ref = "env:" + defaultEnv
	case strings.HasPrefix(ref, "env:"):
		key = os.Getenv(strings.TrimPrefix(ref, "env:"))
	case strings.HasPrefix(ref, "file:"):
		b, err := os.ReadFile(strings.TrimPrefix(ref, "file:"))
		if err != nil {
			return "", fmt.Errorf("agent: model key %s: %w", ref, err)
		}
		key = strings.TrimSpace(string(b))
	default:
		return "", fmt.Errorf("agent: model key reference %q: want env:NAME or file:/path", ref)
	}
	if key == "" && required {
		return "", fmt.Errorf("agent: model key %s is empty", ref)
	}
	return key, nil
}

// ParseModel splits "provider:name" (e.g. "openai:gpt-4o", "scripted:demo").
func ParseModel(s string) (ModelSpec, error) {
	p, n, ok := strings.Cut(s, ":")
	if !ok || p == "" || n == "" {
		return ModelSpec{}, fmt.Errorf("agent: model %q: want provider:name", s)
	}
	return ModelSpec{Provider: p, Name: n}, nil
}
