package llm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Providers a Spec can name.
const (
	// ProviderOpenAI is OpenAI's Chat Completions API.
	ProviderOpenAI = "openai"
	// ProviderOpenAIResponses is OpenAI's Responses API.
	ProviderOpenAIResponses = "openai-responses"
	// ProviderOpenAICompatible is any server speaking Chat Completions at
	// Spec.BaseURL: Ollama, vLLM, LM Studio, llama.cpp, …
	ProviderOpenAICompatible = "openai-compatible"
	// ProviderAnthropic is Anthropic's Messages API.
	ProviderAnthropic = "anthropic"
	// ProviderGemini is the Gemini API.
	ProviderGemini = "gemini"
	// ProviderScripted is a built-in model that needs no network: "demo".
	ProviderScripted = "scripted"
)

// ErrSpec matches every error about a model spec or its key reference.
var ErrSpec = errors.New("llm: invalid model spec")

// Spec names a model and where its key is, never the key itself, so it can
// travel in workflow history, logs and config files. The key is read from
// KeyRef when the model is opened (sdk/llm/models.Open).
type Spec struct {
	// Provider is one of the Provider* constants.
	Provider string `json:"provider"`
	// Name is the provider's model id ("gpt-4.1", "claude-sonnet-4-5",
	// "gemini-2.5-flash", "llama3.2", "demo").
	Name string `json:"name"`
	// BaseURL overrides the provider's endpoint; required for
	// openai-compatible (e.g. "http://127.0.0.1:11434/v1" for Ollama).
	BaseURL string `json:"base_url,omitempty"`
	// KeyRef says where the API key is: "env:NAME" (an environment
	// variable) or "file:/path" (a secret file, e.g. a mounted Kubernetes
	// secret). Empty means the provider's usual variable (DefaultKeyRef);
	// openai-compatible and scripted models need no key.
	KeyRef string `json:"key_ref,omitempty"`
}

// ParseSpec reads "provider:name" ("openai:gpt-4.1", "scripted:demo",
// "openai-compatible:llama3.2") and checks the provider and name. The base
// URL and key reference are set on the result separately; Validate (which
// Open runs) checks the whole spec.
func ParseSpec(s string) (Spec, error) {
	provider, name, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return Spec{}, fmt.Errorf("%w: %q: want provider:model, e.g. openai:gpt-4.1 or scripted:demo", ErrSpec, s)
	}
	spec := Spec{Provider: provider, Name: name}
	if spec.Provider == ProviderOpenAICompatible {
		// Its base URL comes separately; check the rest with a placeholder.
		probe := spec
		probe.BaseURL = "http://base.url.comes.later"
		return spec, probe.Validate()
	}
	return spec, spec.Validate()
}

// String is "provider:name" (plus " at " and the base URL without its
// query, when set); it never contains a key.
func (s Spec) String() string {
	out := s.Provider + ":" + s.Name
	if s.BaseURL != "" {
		base := s.BaseURL
		if u, err := url.Parse(s.BaseURL); err == nil {
			u.RawQuery, u.Fragment, u.User = "", "", nil
			base = u.String()
		}
		out += " at " + base
	}
	return out
}

// Validate checks the spec without reading the key: a known provider, a
// model name, a usable base URL, a well-formed key reference.
func (s Spec) Validate() error {
	switch s.Provider {
	case ProviderOpenAI, ProviderOpenAIResponses, ProviderAnthropic, ProviderGemini:
	case ProviderOpenAICompatible:
		if s.BaseURL == "" {
			return fmt.Errorf("%w: openai-compatible needs a base URL (e.g. http://127.0.0.1:11434/v1 for Ollama)", ErrSpec)
		}
	case ProviderScripted:
		if IsScriptFile(s.Name) {
			if !filepath.IsLocal(s.Name) {
				return fmt.Errorf("%w: script file %q: want a path relative to the script folder, without ..", ErrSpec, s.Name)
			}
		} else if s.Name != DemoModelName {
			return fmt.Errorf("%w: unknown scripted model %q (available: %s, or a script file NAME.yaml)", ErrSpec, s.Name, DemoModelName)
		}
	default:
		return fmt.Errorf("%w: unknown provider %q (want openai, openai-responses, openai-compatible, anthropic, gemini or scripted)", ErrSpec, s.Provider)
	}
	if strings.TrimSpace(s.Name) == "" {
		return fmt.Errorf("%w: %s: no model name", ErrSpec, s.Provider)
	}
	if s.BaseURL != "" {
		u, err := url.Parse(s.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: base URL is not an http(s) URL with a host", ErrSpec)
		}
		if u.User != nil {
			return fmt.Errorf("%w: base URL must not carry credentials; use a key reference", ErrSpec)
		}
	}
	if s.KeyRef != "" {
		if _, _, err := parseKeyRef(s.KeyRef); err != nil {
			return err
		}
	}
	return nil
}

// DefaultKeyRef is the key reference used when a spec names none: the
// provider's customary environment variable, or "" for providers that
// need no key.
func DefaultKeyRef(provider string) string {
	switch provider {
	case ProviderOpenAI, ProviderOpenAIResponses:
		return "env:OPENAI_API_KEY"
	case ProviderAnthropic:
		return "env:ANTHROPIC_API_KEY"
	case ProviderGemini:
		return "env:GEMINI_API_KEY"
	}
	return ""
}

// maxKeyFile bounds a key file; API keys are a few hundred bytes at most.
const maxKeyFile = 64 << 10

func parseKeyRef(ref string) (kind, target string, err error) {
	kind, target, ok := strings.Cut(ref, ":")
	if ok && target != "" && (kind == "env" || kind == "file") {
		return kind, target, nil
	}
	// The text is not echoed: a key pasted where a reference belongs must
	// not end up in an error, a log or workflow history.
	return "", "", fmt.Errorf("%w: a key reference is env:NAME or file:/path (the key itself is never accepted here)", ErrSpec)
}

// ResolveKey reads the key a reference points at. lookupEnv is
// os.LookupEnv when nil. Errors name the variable or file, never a value:
// an unset or empty variable, a missing, unreadable, oversized or empty file.
func ResolveKey(ref string, lookupEnv func(string) (string, bool)) (string, error) {
	kind, target, err := parseKeyRef(ref)
	if err != nil {
		return "", err
	}
	if kind == "env" {
		if lookupEnv == nil {
			lookupEnv = os.LookupEnv
		}
		v, ok := lookupEnv(target)
		if !ok {
			return "", fmt.Errorf("%w: key reference %s: environment variable %s is not set", ErrSpec, ref, target)
		}
		if strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("%w: key reference %s: environment variable %s is empty", ErrSpec, ref, target)
		}
		return strings.TrimSpace(v), nil
	}
	f, err := os.Open(target)
	if err != nil {
		return "", fmt.Errorf("%w: key reference %s: %w", ErrSpec, ref, pathCause(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("%w: key reference %s: read: %w", ErrSpec, ref, pathCause(err))
	}
	if len(b) > maxKeyFile {
		return "", fmt.Errorf("%w: key reference %s: file is larger than %d bytes", ErrSpec, ref, maxKeyFile)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("%w: key reference %s: file is empty", ErrSpec, ref)
	}
	return key, nil
}

// pathCause drops the path an *fs.PathError repeats (the reference names it).
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// IsScriptFile reports whether a scripted model's name is a script file
// (it ends in .yaml or .yml) rather than a built-in model such as demo.
func IsScriptFile(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// DemoModelName is the scripted demo model's name: Spec{Provider:
// "scripted", Name: "demo"}, or "scripted:demo" on a command line.
const DemoModelName = "demo"
