package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/toolfleet/toolfleet/internal/demo"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
	"github.com/toolfleet/toolfleet/sdk/llm/models"
)

// Models turns a run's [ModelSpec] into a model. It is called inside the
// ModelTurn activity, so key references are resolved at call time and never
// reach workflow history. The llm branch's spec resolver plugs in here.
type Models interface {
	Model(ctx context.Context, spec ModelSpec) (llm.Model, error)
}

// ErrUnknownModel means no model matches a spec.
var ErrUnknownModel = errors.New("agent: unknown model")

// Resolver is the default [Models]: sdk/llm/models.Open builds every
// provider's client, "scripted:demo" is the built-in demo model
// (internal/demo, no key, no network), "scripted:NAME.yaml" a script file
// (sdk/llm/llmtest.OpenScriptFile), and further scripted models can be
// added with Register.
//
// Key references are confined more tightly than models.Open alone would,
// because a run chooses its model's base URL and whatever key goes with it
// is sent there: "env:NAME" may only name the provider's usual variable
// (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY) or
// TOOLFLEET_MODEL_KEY_*, and "file:" only files in KeyDir. A custom base URL
// never receives a provider's usual key: it needs an explicit
// TOOLFLEET_MODEL_KEY_* or file reference. The Resolver reads the key
// itself under these rules and hands models.Open only that one value.
type Resolver struct {
	// KeyDir is the folder "file:" key references may read from; empty
	// refuses file references.
	KeyDir string
	// Endpoints binds key references to the base URLs they may be sent to
	// (nil binds nothing: only providers' usual keys, to their providers).
	Endpoints *Endpoints
	// ScriptDir is the folder "scripted:NAME.yaml" script files are read
	// from (llmtest.OpenScriptFile); empty refuses them.
	ScriptDir string

	mu       sync.RWMutex
	scripted map[string]llm.Model
}

// NewResolver returns a resolver whose only scripted model is the demo.
func NewResolver() *Resolver { return &Resolver{scripted: map[string]llm.Model{}} }

// Register makes m the model of spec {Provider: "scripted", Name: name};
// it takes precedence over the built-in demo of the same name.
func (r *Resolver) Register(name string, m llm.Model) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scripted == nil {
		r.scripted = map[string]llm.Model{}
	}
	r.scripted[name] = m
}

// providerEnv is each provider's usual key variable.
var providerEnv = map[string]string{
	llm.ProviderOpenAI: "OPENAI_API_KEY", llm.ProviderOpenAIResponses: "OPENAI_API_KEY",
	llm.ProviderOpenAICompatible: "OPENAI_API_KEY", llm.ProviderAnthropic: "ANTHROPIC_API_KEY",
	llm.ProviderGemini: "GEMINI_API_KEY",
}

// resolvedKeyVar is the name under which the Resolver hands models.Open the
// key it has already read; it is never looked up in the real environment.
const resolvedKeyVar = "TOOLFLEET_RESOLVED_MODEL_KEY"

// Model implements [Models].
func (r *Resolver) Model(ctx context.Context, spec ModelSpec) (llm.Model, error) {
	if spec.Provider == llm.ProviderScripted {
		r.mu.RLock()
		m, ok := r.scripted[spec.Name]
		r.mu.RUnlock()
		if ok {
			return m, nil
		}
		if spec.Name != llm.DemoModelName && !llm.IsScriptFile(spec.Name) {
			return nil, fmt.Errorf("%w: scripted:%s (available: scripted:%s, or scripted:NAME.yaml)", ErrUnknownModel, spec.Name, llm.DemoModelName)
		}
		if err := spec.Spec.Validate(); err != nil {
			return nil, err
		}
		if llm.IsScriptFile(spec.Name) {
			return llmtest.OpenScriptFile(r.ScriptDir, spec.Name)
		}
		return demo.New(), nil
	}
	env, ok := providerEnv[spec.Provider]
	if !ok {
		return nil, fmt.Errorf("%w: provider %q", ErrUnknownModel, spec.Provider)
	}
	if err := r.Endpoints.Check(spec.Spec); err != nil {
		return nil, err
	}
	key, err := r.key(spec, env)
	if err != nil {
		return nil, err
	}
	ls := spec.Spec
	ls.KeyRef = ""
	if key != "" {
		ls.KeyRef = "env:" + resolvedKeyVar
	}
	// Only the key read above is visible to models.Open: a spec with no key
	// reference cannot fall back to the process environment.
	lookup := func(name string) (string, bool) {
		if name == resolvedKeyVar && key != "" {
			return key, true
		}
		return "", false
	}
	m, err := models.Open(ctx, ls, models.WithLookupEnv(lookup))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return m, nil
}

// ModelChecker is a [Models] that can tell, without opening a model, whether
// a run's model would open: the AgentService asks it at StartRun, so a run
// whose key is missing is refused instead of starting and failing.
type ModelChecker interface {
	CheckModel(spec ModelSpec) error
}

// ErrModelKeyMissing means a run's model needs a key this process does not have.
var ErrModelKeyMissing = errors.New("agent: model key missing")

// CheckModel implements [ModelChecker]: the checks Model makes before it
// opens the provider's client — a known model, a key reference within the
// confinement rules, an endpoint the key is bound to, and a key that is set
// in this process (its environment or KeyDir), which is where the run's
// model turns will read it. Errors say what to do; a missing key wraps
// [ErrModelKeyMissing].
func (r *Resolver) CheckModel(spec ModelSpec) error {
	if spec.Provider == llm.ProviderScripted {
		r.mu.RLock()
		_, ok := r.scripted[spec.Name]
		r.mu.RUnlock()
		if ok {
			return nil
		}
		if spec.Name == llm.DemoModelName || llm.IsScriptFile(spec.Name) {
			return spec.Spec.Validate()
		}
		return fmt.Errorf("%w: scripted:%s (available: scripted:%s, or scripted:NAME.yaml)", ErrUnknownModel, spec.Name, llm.DemoModelName)
	}
	env, ok := providerEnv[spec.Provider]
	if !ok {
		return fmt.Errorf("%w: provider %q", ErrUnknownModel, spec.Provider)
	}
	if err := r.Endpoints.Check(spec.Spec); err != nil {
		return err
	}
	ref := spec.KeyRef
	if ref == "" && spec.BaseURL == "" {
		ref = "env:" + env
	}
	_, err := r.key(spec, env)
	if err == nil || ref == "" || !strings.HasSuffix(err.Error(), " is empty") {
		return err
	}
	if name, isEnv := strings.CutPrefix(ref, "env:"); isEnv {
		return fmt.Errorf("%w: %s:%s needs %s, which is not set where the orchestrator runs: set it there "+
			"(for toolfleet dev: export %s=… before starting it), or run with --model scripted:demo", ErrModelKeyMissing, spec.Provider, spec.Name, name, name)
	}
	return fmt.Errorf("%w: %s:%s: the key file %s is empty", ErrModelKeyMissing, spec.Provider, spec.Name, strings.TrimPrefix(ref, "file:"))
}

// key resolves a spec's key reference within the confinement rules above.
func (r *Resolver) key(spec ModelSpec, providerVar string) (string, error) {
	ref := spec.KeyRef
	if ref == "" {
		if spec.BaseURL != "" {
			if spec.Provider == "openai-compatible" {
				return "", nil // local servers (Ollama, vLLM) often need no key
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
	return ModelSpec{Spec: llm.Spec{Provider: p, Name: n}}, nil
}
