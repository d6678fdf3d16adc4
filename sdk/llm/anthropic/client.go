// Package anthropic implements llm.Model on the official Anthropic Go SDK
// (github.com/anthropics/anthropic-sdk-go) for the Messages API.
//
// Bodies are rendered and parsed by wire.Anthropic; the SDK carries them
// (auth, anthropic-version header, base URL, timeouts) and its errors are
// classified into *llm.APIError.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

// DefaultTimeout bounds one request, streamed body included, when the
// caller passes no option.WithRequestTimeout.
const DefaultTimeout = 10 * time.Minute

// Client is an llm.Model on the Anthropic Messages API.
type Client struct {
	sdk   anthropic.Client
	model string
}

// New returns a client that uses model when a request names none. opts are
// the SDK's options (option.WithAPIKey, option.WithBaseURL, …). The SDK's
// own retries are off by default so llm.WithRetry is the one retry policy.
//
// Requests go through llm.HTTPClient, which follows no redirect (the key
// would go to another server); give your own HTTP client with this
// package's WithHTTPClient, which keeps that policy. The SDK's
// option.WithHTTPClient replaces the client as given.
func New(model string, opts ...option.RequestOption) *Client {
	return &Client{sdk: anthropic.NewClient(append([]option.RequestOption{option.WithHTTPClient(llm.HTTPClient(nil)), option.WithMaxRetries(0), option.WithRequestTimeout(DefaultTimeout)}, opts...)...), model: model}
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
	return wire.Anthropic{}.RenderRequest(&r)
}

// Complete implements llm.Model.
func (c *Client) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	body, err := c.body(req, false)
	if err != nil {
		return nil, err
	}
	var raw []byte
	if err := c.sdk.Post(ctx, "v1/messages", body, &raw); err != nil {
		return nil, classify(err)
	}
	msg, err := wire.Anthropic{}.ParseResponse(raw)
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
	if err := c.sdk.Post(ctx, "v1/messages", body, &resp); err != nil {
		return nil, classify(err)
	}
	defer resp.Body.Close()
	msg, err := wire.DecodeStream(ctx, wire.Anthropic{}, resp.Body, llm.FirstCallDeltas(req, onDelta))
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, msg), nil
}

// classify turns an SDK HTTP error into *llm.APIError with the type and
// message of Anthropic's error body; a body of any other shape is not
// quoted (the status text stands in), as it is whatever the server at the
// base URL chose to send. A refused redirect is returned as its
// *llm.RedirectError; other errors (transport, context) pass through.
func classify(err error) error {
	var re *llm.RedirectError
	if errors.As(err, &re) {
		return re // without the *url.Error around it, which repeats the URL
	}
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		return err
	}
	var header http.Header
	if apiErr.Response != nil {
		header = apiErr.Response.Header
	}
	msg := http.StatusText(apiErr.StatusCode)
	var code string
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if raw := apiErr.RawJSON(); raw != "" && json.Unmarshal([]byte(raw), &body) == nil && body.Error.Type != "" {
		code = body.Error.Type
		if body.Error.Message != "" {
			msg = body.Error.Message
		}
	}
	if msg == "" {
		msg = "error response"
	}
	out := llm.NewAPIError("anthropic", apiErr.StatusCode, header, msg, err)
	out.Code = code
	return out
}
