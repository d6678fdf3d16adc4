// Package models opens an llm.Model from an llm.Spec: the provider's client
// (sdk/llm/openai, sdk/llm/anthropic, sdk/llm/gemini), with the API key read
// from the spec's key reference at that moment. Scripted models are not
// opened here: a script file is sdk/llm/llmtest.OpenScriptFile, and the
// demo ("scripted:demo") belongs to the orchestrator's model resolver.
// A spec never holds a key, so it can be stored in workflow history and
// config; open the model where the call is made (e.g. in a Temporal
// activity), not where the spec is decided.
package models

import (
	"context"
	"fmt"
	"net/http"
	"time"

	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	openaioption "github.com/openai/openai-go/v3/option"
	"google.golang.org/genai"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/anthropic"
	"github.com/toolfleet/toolfleet/sdk/llm/gemini"
	"github.com/toolfleet/toolfleet/sdk/llm/openai"
)

// Option changes how Open builds a client.
type Option func(*options)

type options struct {
	httpClient *http.Client
	lookupEnv  func(string) (string, bool)
	timeout    time.Duration
}

// WithHTTPClient sets the HTTP client the provider SDK uses (default:
// http.DefaultClient's settings). Every client is used through a copy made
// by llm.HTTPClient, which follows no redirect, so a key is only ever sent
// to the spec's base URL; c itself is not changed.
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.httpClient = c } }

// WithLookupEnv sets how env: key references are read (default os.LookupEnv).
func WithLookupEnv(f func(string) (string, bool)) Option {
	return func(o *options) { o.lookupEnv = f }
}

// WithTimeout bounds one model request, streamed body included (default:
// each client's DefaultTimeout, 10 minutes).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Open validates s, resolves its key reference (or the provider's default,
// llm.DefaultKeyRef) and returns the model. Errors match llm.ErrSpec for a
// bad spec or an unset, unreadable or empty key; they name the variable or
// file, never a key. The clients' own retries are off: callers retry
// (llm.WithRetry, or the orchestrator's activity policy).
func Open(ctx context.Context, s llm.Spec, opts ...Option) (llm.Model, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	o := &options{}
	for _, opt := range opts {
		opt(o)
	}
	if s.Provider == llm.ProviderScripted {
		return nil, fmt.Errorf("open %s: %w: scripted models are opened by their package (sdk/llm/llmtest for script files; the demo by the orchestrator's resolver)", s, llm.ErrSpec)
	}
	ref := s.KeyRef
	if ref == "" {
		ref = llm.DefaultKeyRef(s.Provider)
	}
	var key string
	if ref != "" {
		k, err := llm.ResolveKey(ref, o.lookupEnv)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", s, err)
		}
		key = k
	}
	switch s.Provider {
	case llm.ProviderOpenAI, llm.ProviderOpenAIResponses, llm.ProviderOpenAICompatible:
		var ro []openaioption.RequestOption
		// An empty key still sets the header option so the SDK does not
		// fall back to OPENAI_API_KEY behind the spec's back.
		ro = append(ro, openaioption.WithAPIKey(key))
		if s.BaseURL != "" {
			ro = append(ro, openaioption.WithBaseURL(s.BaseURL))
		}
		if s.Provider == llm.ProviderOpenAICompatible {
			// The SDK adds these from OPENAI_ORG_ID / OPENAI_PROJECT_ID;
			// they describe an OpenAI account, not this server's.
			ro = append(ro, openaioption.WithHeaderDel("OpenAI-Organization"), openaioption.WithHeaderDel("OpenAI-Project"))
		}
		if o.httpClient != nil {
			ro = append(ro, openai.WithHTTPClient(o.httpClient))
		}
		if o.timeout > 0 {
			ro = append(ro, openaioption.WithRequestTimeout(o.timeout))
		}
		api := openai.ChatCompletions
		if s.Provider == llm.ProviderOpenAIResponses {
			api = openai.Responses
		}
		return openai.New(api, s.Name, ro...), nil
	case llm.ProviderAnthropic:
		ro := []anthropicoption.RequestOption{anthropicoption.WithAPIKey(key)}
		if s.BaseURL != "" {
			ro = append(ro, anthropicoption.WithBaseURL(s.BaseURL))
		}
		if o.httpClient != nil {
			ro = append(ro, anthropic.WithHTTPClient(o.httpClient))
		}
		if o.timeout > 0 {
			ro = append(ro, anthropicoption.WithRequestTimeout(o.timeout))
		}
		return anthropic.New(s.Name, ro...), nil
	case llm.ProviderGemini:
		cfg := &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI, HTTPClient: o.httpClient}
		if s.BaseURL != "" {
			cfg.HTTPOptions.BaseURL = s.BaseURL
		}
		if o.timeout > 0 {
			cfg.HTTPOptions.Timeout = &o.timeout
		}
		m, err := gemini.New(ctx, s.Name, cfg)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", s, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("open %s: %w: provider not supported", s, llm.ErrSpec)
}
