package agent

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/toolfleet/toolfleet/sdk/llm"
)

// ErrEndpointNotAllowed means a run asked to send a model key (or, with no
// key, a request) to a base URL the operator has not bound it to.
var ErrEndpointNotAllowed = errors.New("agent: model endpoint not allowed")

// NoKey is the key reference of [Endpoints] bindings for models called
// without a key (openai-compatible servers such as Ollama or vLLM).
const NoKey = "none"

// DefaultEndpoint, as a bound URL, stands for the provider's own endpoint
// (a spec without a base URL).
const DefaultEndpoint = "default"

// Endpoints binds model keys to the base URLs the operator allows for them.
// A run chooses its model's base URL, and the key it names is sent there, so
// without a binding any key the orchestrator can read could be sent to any
// server a run names (and the orchestrator made to call internal URLs).
//
// The rules, checked when a run starts and again before every model call:
//   - a provider's usual key (OPENAI_API_KEY, ANTHROPIC_API_KEY,
//     GEMINI_API_KEY) goes only to that provider's own endpoint; no binding
//     is needed for it;
//   - any other key reference (env:TOOLFLEET_MODEL_KEY_*, file:NAME) goes only
//     to the URLs bound to it, "default" meaning the provider's endpoint;
//   - a model without a key reaches only the URLs bound to "none".
//
// Only the base URL is checked: the model clients follow no redirect
// (llm.HTTPClient), so an endpoint cannot send the key on to another server.
//
// The zero value binds nothing: only providers' usual keys work.
type Endpoints struct {
	bindings map[string][]endpoint
}

// endpoint is one allowed base URL: scheme, host and port must be equal
// ("*" as port allows any), and the base URL's path must be the allowed path
// or lie under it.
type endpoint struct {
	provider bool // "default": the provider's own endpoint
	scheme   string
	host     string
	port     string
	path     string
}

// ParseEndpoints reads bindings of the form KEYREF=URL[,URL...], several per
// value separated by ";" (so one environment variable can hold them all):
//
//	env:TOOLFLEET_MODEL_KEY_VLLM=https://vllm.internal:8000/v1
//	file:anthropic-team-a=default
//	none=http://127.0.0.1:*,http://localhost:*
//
// KEYREF is env:NAME, file:NAME or none; URL is "default" or
// scheme://host[:port|:*][/path].
func ParseEndpoints(values ...string) (*Endpoints, error) {
	e := &Endpoints{bindings: map[string][]endpoint{}}
	for _, v := range values {
		for b := range strings.SplitSeq(v, ";") {
			b = strings.TrimSpace(b)
			if b == "" {
				continue
			}
			ref, urls, ok := strings.Cut(b, "=")
			ref = strings.TrimSpace(ref)
			if !ok || strings.TrimSpace(urls) == "" {
				return nil, fmt.Errorf("model endpoint binding %q: want KEYREF=URL[,URL...]", b)
			}
			if ref != NoKey && !strings.HasPrefix(ref, "env:") && !strings.HasPrefix(ref, "file:") {
				return nil, fmt.Errorf("model endpoint binding %q: the key reference is env:NAME, file:NAME or none", b)
			}
			for u := range strings.SplitSeq(urls, ",") {
				ep, err := parseEndpoint(strings.TrimSpace(u))
				if err != nil {
					return nil, fmt.Errorf("model endpoint binding for %s: %w", ref, err)
				}
				if ep.provider && ref == NoKey {
					return nil, fmt.Errorf("model endpoint binding for none: %q needs a key; bind none to the URLs of servers without keys", DefaultEndpoint)
				}
				e.bindings[ref] = append(e.bindings[ref], ep)
			}
		}
	}
	return e, nil
}

func parseEndpoint(s string) (endpoint, error) {
	if s == DefaultEndpoint {
		return endpoint{provider: true}, nil
	}
	// "host:*" allows any port; url.Parse does not take it, so cut it first.
	anyPort := false
	if i := strings.Index(s, "://"); i >= 0 {
		end := len(s)
		if j := strings.IndexByte(s[i+3:], '/'); j >= 0 {
			end = i + 3 + j
		}
		if strings.HasSuffix(s[:end], ":*") {
			s, anyPort = s[:end-2]+s[end:], true
		}
	}
	u, err := url.Parse(s)
	if err == nil && u.User != nil {
		return endpoint{}, errors.New("a URL with credentials: keys are references, never part of a URL")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return endpoint{}, fmt.Errorf("URL %q: want default or http(s)://host[:port|:*][/path], without credentials or query", s)
	}
	ep := endpoint{scheme: u.Scheme, host: strings.ToLower(u.Hostname()), port: portOf(u), path: cleanPath(u.Path)}
	if anyPort {
		ep.port = "*"
	}
	return ep, nil
}

// portOf is u's port, or its scheme's default.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	return path.Clean("/" + p)
}

// allows reports whether a spec's base URL (empty: the provider's endpoint)
// matches ep.
func (ep endpoint) allows(baseURL string) bool {
	if baseURL == "" {
		return ep.provider
	}
	if ep.provider {
		return false
	}
	u, err := url.Parse(baseURL)
	if err != nil || u.User != nil || u.Host == "" {
		return false
	}
	if u.Scheme != ep.scheme || !strings.EqualFold(u.Hostname(), ep.host) {
		return false
	}
	if ep.port != "*" && portOf(u) != ep.port {
		return false
	}
	p := cleanPath(u.Path)
	return ep.path == "/" || p == ep.path || strings.HasPrefix(p, ep.path+"/")
}

// Check reports whether the spec's key may be sent to its base URL. Scripted
// models are always allowed. The error names the key reference and the
// flag, never which URLs are bound (operators' internal addresses).
func (e *Endpoints) Check(spec llm.Spec) error {
	if spec.Provider == llm.ProviderScripted {
		return nil
	}
	ref := spec.KeyRef
	usual := providerEnv[spec.Provider]
	if ref == "" && spec.BaseURL != "" && spec.Provider == llm.ProviderOpenAICompatible {
		ref = NoKey
	}
	if ref == "" || (usual != "" && ref == "env:"+usual) {
		if spec.BaseURL == "" {
			return nil // the provider's usual key to the provider itself
		}
		return fmt.Errorf("%w: %s is sent only to %s's own endpoint; a custom base URL needs a key reference bound to it", ErrEndpointNotAllowed, orUsual(ref, usual), spec.Provider)
	}
	where := spec.BaseURL
	if where == "" {
		where = spec.Provider + "'s own endpoint"
	} else if u, err := url.Parse(where); err == nil {
		u.RawQuery, u.Fragment, u.User = "", "", nil
		where = u.String()
	}
	var bound []endpoint
	if e != nil {
		bound = e.bindings[ref]
	}
	if slices.ContainsFunc(bound, func(ep endpoint) bool { return ep.allows(spec.BaseURL) }) {
		return nil
	}
	if ref == NoKey {
		return fmt.Errorf("%w: %s is not an endpoint the operator allows without a key (orchestrator --model-endpoint 'none=URL')", ErrEndpointNotAllowed, where)
	}
	return fmt.Errorf("%w: model key %s may not be sent to %s (the operator binds keys to endpoints with the orchestrator's --model-endpoint '%s=URL')", ErrEndpointNotAllowed, ref, where, ref)
}

func orUsual(ref, usual string) string {
	if ref == "" {
		return usual
	}
	return strings.TrimPrefix(ref, "env:")
}

// LoopbackWithoutKey is the binding `toolfleet dev` starts with: keyless
// models on this machine (Ollama, vLLM, llama.cpp on any port).
const LoopbackWithoutKey = "none=http://127.0.0.1:*,http://localhost:*,http://[::1]:*"
