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
//
// Key references are confined, because a run chooses its model's base URL
// and whatever key goes with it is sent there: "env:NAME" may only name the
// providers' usual variables (OPENAI_API_KEY, ANTHROPIC_API_KEY,
// GEMINI_API_KEY) or TOOLFLEET_MODEL_KEY_*, and "file:" only files in
// KeyDir. A custom base URL never receives a provider's usual key: it needs
// an explicit TOOLFLEET_MODEL_KEY_* or file reference.
type Resolver struct {
	// KeyDir is the folder "file:" key references may read from; empty
	// refuses file references.
	KeyDir string

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

// providerEnv is each provider's usual key variable.
var providerEnv = map[string]string{"openai": "OPENAI_API_KEY", "openai-compatible": "OPENAI_API_KEY",
	"anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}

// Model implements [Models].
func (r *Resolver) Model(ctx context.Context, spec ModelSpec) (llm.Model, error) {
	if spec.Provider == "scripted" {
		r.mu.RLock()
		m, ok := r.scripted[spec.Name]
		r.mu.RUnlock()
		if !ok {
			return nil, fmt.Errorf("%w: scripted:%s", ErrUnknownModel, spec.Name)
		}
		return m, nil
	}
	env, ok := providerEnv[spec.Provider]
	if !ok {
		return nil, fmt.Errorf("%w: provider %q", ErrUnknownModel, spec.Provider)
	}
	key, err := r.key(spec, env)
	if err != nil {
		return nil, err
	}
	switch spec.Provider {
	case "openai", "openai-compatible":
		opts := []openaiopt.RequestOption{openaiopt.WithAPIKey(key)}
		if spec.BaseURL != "" {
			opts = append(opts, openaiopt.WithBaseURL(spec.BaseURL))
		} else if spec.Provider == "openai-compatible" {
			return nil, errors.New("agent: openai-compatible models need a base URL")
		}
		return openai.New(openai.ChatCompletions, spec.Name, opts...), nil
	case "anthropic":
		opts := []anthropicopt.RequestOption{anthropicopt.WithAPIKey(key)}
		if spec.BaseURL != "" {
			opts = append(opts, anthropicopt.WithBaseURL(spec.BaseURL))
		}
		return anthropic.New(spec.Name, opts...), nil
	default: // gemini
		cfg := &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI}
		if spec.BaseURL != "" {
			cfg.HTTPOptions.BaseURL = spec.BaseURL
		}
		return gemini.New(ctx, spec.Name, cfg)
	}
}

// key resolves a spec's key reference within the confinement rules above.
func (r *Resolver) key(spec ModelSpec, providerVar string) (string, error) {
	ref := spec.KeyRef
	if ref == "" {
		if spec.BaseURL != "" {
			if spec.Provider == "openai-compatible" {
				return "none", nil // local servers (Ollama, vLLM) often need no key
			}
			return "", errors.New("agent: a custom base URL needs an explicit key reference (env:TOOLFLEET_MODEL_KEY_… or file:)")
		}
		ref = "env:" + providerVar
	}
	var key string
	switch {
	case strings.HasPrefix(ref, "env:"):
		name := strings.TrimPrefix(ref, "env:")
		if !strings.HasPrefix(name, "TOOLFLEET_MODEL_KEY_") && (name != providerVar || spec.BaseURL != "") {
			return "", fmt.Errorf("agent: key reference %s: only %s (without a custom base URL) or TOOLFLEET_MODEL_KEY_* may be read", ref, providerVar)
		}
		key = os.Getenv(name)
	case strings.HasPrefix(ref, "file:"):
		if r.KeyDir == "" {
			return "", fmt.Errorf("agent: key reference %s: file references are off (no key folder configured)", ref)
		}
		root, err := os.OpenRoot(r.KeyDir)
		if err != nil {
			return "", fmt.Errorf("agent: key folder: %w", err)
		}
		defer root.Close()
		b, err := root.ReadFile(strings.TrimPrefix(strings.TrimPrefix(ref, "file:"), "/"))
		if err != nil {
			return "", fmt.Errorf("agent: key reference %s: %w", ref, err)
		}
		key = strings.TrimSpace(string(b))
	default:
		return "", fmt.Errorf("agent: key reference %q: want env:NAME or file:NAME", ref)
	}
	if key == "" {
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
