// Package openai implements llm.Model on the official OpenAI Go SDK
// (github.com/openai/openai-go/v3), for the Chat Completions and the
// Responses APIs of OpenAI and of any OpenAI-compatible server (Ollama,
// vLLM, LM Studio, …) through option.WithBaseURL.
//
// Request and response bodies are rendered and parsed by wire.OpenAIChat and
// wire.OpenAIResponses; the SDK carries them (auth, base URL, headers,
// timeouts) and its errors are classified into *llm.APIError.
package openai

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

// DefaultTimeout bounds one request, streamed body included, when the
// caller passes no option.WithRequestTimeout.
const DefaultTimeout = 10 * time.Minute

// API selects the OpenAI endpoint a Client speaks.
type API int

const (
	// ChatCompletions is POST /chat/completions.
	ChatCompletions API = iota
	// Responses is POST /responses.
	Responses
)

// Client is an llm.Model on one OpenAI API.
type Client struct {
	sdk    openai.Client
	format wire.Format
	path   string
	model  string
}

// New returns a client for api that uses model when a request names none.
// opts are the SDK's options (option.WithAPIKey, option.WithBaseURL, …).
// The SDK's own retries are off by default (option.WithMaxRetries(0)) so
// that llm.WithRetry is the one retry policy; pass option.WithMaxRetries to
// change that.
//
// Requests go through llm.HTTPClient, which follows no redirect (the key
// would go to another server); give your own HTTP client with this
// package's WithHTTPClient, which keeps that policy. The SDK's
// option.WithHTTPClient replaces the client as given.
func New(api API, model string, opts ...option.RequestOption) *Client {
	c := &Client{sdk: openai.NewClient(append([]option.RequestOption{option.WithHTTPClient(llm.HTTPClient(nil)), option.WithMaxRetries(0), option.WithRequestTimeout(DefaultTimeout)}, opts...)...), model: model}
	switch api {
	case Responses:
		c.format, c.path = wire.OpenAIResponses{}, "responses"
	default:
		c.format, c.path = wire.OpenAIChat{}, "chat/completions"
	}
	return c
}

// WithHTTPClient sends requests with a copy of hc that follows no
// redirect (llm.HTTPClient); hc itself is not changed.
func WithHTTPClient(hc *http.Client) option.RequestOption {
	return option.WithHTTPClient(llm.HTTPClient(hc))
}

func (c *Client) body(req *llm.Request, stream bool) ([]byte, error) {
	r := *req
	if r.Model == "" {
		r.Model = c.model
	}
	r.Stream = stream
	return c.format.RenderRequest(&r)
}

// Complete implements llm.Model.
func (c *Client) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	body, err := c.body(req, false)
	if err != nil {
		return nil, err
	}
	var raw []byte
	if err := c.sdk.Post(ctx, c.path, body, &raw); err != nil {
		return nil, classify(err)
	}
	msg, err := c.format.ParseResponse(raw)
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, msg), nil
}

// Stream implements llm.Model.
func (c *Client) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	body, err := c.body(req, true)
	if err != nil {
		return nil, err
	}
	var resp *http.Response
	if err := c.sdk.Post(ctx, c.path, body, &resp); err != nil {
		return nil, classify(err)
	}
	defer resp.Body.Close()
	msg, err := wire.DecodeStream(ctx, c.format, resp.Body, llm.FirstCallDeltas(req, onDelta))
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, msg), nil
}

// classify turns an SDK HTTP error into *llm.APIError; other errors
// (transport, context) pass through unchanged.
func classify(err error) error {
	var re *llm.RedirectError
	if errors.As(err, &re) {
		return re // without the *url.Error around it, which repeats the URL
	}
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		return err
	}
	var header http.Header
	if apiErr.Response != nil {
		header = apiErr.Response.Header
	}
	msg := apiErr.Message
	if msg == "" {
		msg = http.StatusText(apiErr.StatusCode)
	}
	out := llm.NewAPIError("openai", apiErr.StatusCode, header, msg, err)
	out.Code = apiErr.Code // "insufficient_quota" is a 429 no retry fixes
	if out.Code == "" {
		out.Code = apiErr.Type
	}
	return out
}
