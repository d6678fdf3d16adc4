// Package gemini implements llm.Model on the official Google Gen AI Go SDK
// (google.golang.org/genai) for the Gemini API.
//
// Requests are rendered by wire.Gemini and decoded into the SDK's types
// (whose JSON is the wire format); responses are encoded back and parsed by
// wire.Gemini, so thought signatures and call ids survive unchanged.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/genai"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

// DefaultTimeout bounds one request, streamed body included, when the
// configuration sets no HTTPOptions.Timeout.
const DefaultTimeout = 10 * time.Minute

// Client is an llm.Model on the Gemini API.
type Client struct {
	sdk   *genai.Client
	model string
}

// New returns a client that uses model when a request names none. cfg is
// the SDK's configuration (API key, backend, HTTPOptions.BaseURL, …); nil
// means the Gemini API with the key from the environment. Requests go
// through a copy of cfg.HTTPClient (nil: a default client) made by
// llm.HTTPClient, which follows no redirect (the key would go to another
// server), and whose transport reads retry-after headers, which the SDK's
// errors drop; cfg and its client are not changed.
func New(ctx context.Context, model string, cfg *genai.ClientConfig) (*Client, error) {
	if cfg == nil {
		cfg = &genai.ClientConfig{Backend: genai.BackendGeminiAPI}
	}
	c := *cfg
	if c.HTTPOptions.Timeout == nil {
		timeout := DefaultTimeout
		c.HTTPOptions.Timeout = &timeout
	}
	hc := llm.HTTPClient(c.HTTPClient) // a copy that follows no redirect
	transport := hc.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	hc.Transport = headerRecorder{next: transport}
	c.HTTPClient = hc
	sdk, err := genai.NewClient(ctx, &c)
	if err != nil {
		return nil, fmt.Errorf("gemini: new client: %w", err)
	}
	return &Client{sdk: sdk, model: model}, nil
}

// wireRequest is the request body with the fields the SDK splits into
// contents and config.
type wireRequest struct {
	Contents          []*genai.Content  `json:"contents"`
	SystemInstruction *genai.Content    `json:"systemInstruction"`
	Tools             []*genai.Tool     `json:"tools"`
	ToolConfig        *genai.ToolConfig `json:"toolConfig"`
	GenerationConfig  *struct {
		MaxOutputTokens int32 `json:"maxOutputTokens"`
	} `json:"generationConfig"`
}

func (c *Client) prepare(req *llm.Request) (string, []*genai.Content, *genai.GenerateContentConfig, error) {
	body, err := wire.Gemini{}.RenderRequest(req)
	if err != nil {
		return "", nil, nil, err
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return "", nil, nil, fmt.Errorf("gemini: request into SDK types: %w", err)
	}
	cfg := &genai.GenerateContentConfig{SystemInstruction: w.SystemInstruction, Tools: w.Tools, ToolConfig: w.ToolConfig}
	if w.GenerationConfig != nil {
		cfg.MaxOutputTokens = w.GenerationConfig.MaxOutputTokens
	}
	model := req.Model
	if model == "" {
		model = c.model
	}
	return model, w.Contents, cfg, nil
}

// Complete implements llm.Model.
func (c *Client) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	model, contents, cfg, err := c.prepare(req)
	if err != nil {
		return nil, err
	}
	box := &headerBox{}
	resp, err := c.sdk.Models.GenerateContent(withBox(ctx, box), model, contents, cfg)
	if err != nil {
		return nil, classify(err, box)
	}
	raw, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("gemini: encode response: %w", err)
	}
	msg, err := wire.Gemini{}.ParseResponse(raw)
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, msg), nil
}

// Stream implements llm.Model.
func (c *Client) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	model, contents, cfg, err := c.prepare(req)
	if err != nil {
		return nil, err
	}
	box := &headerBox{}
	onDelta = llm.FirstCallDeltas(req, onDelta)
	dec := wire.Gemini{}.NewStreamDecoder()
	for chunk, err := range c.sdk.Models.GenerateContentStream(withBox(ctx, box), model, contents, cfg) {
		if err != nil {
			return nil, classify(err, box)
		}
		raw, err := json.Marshal(chunk)
		if err != nil {
			return nil, fmt.Errorf("gemini: encode chunk: %w", err)
		}
		deltas, err := dec.Decode("", raw)
		if err != nil {
			return nil, err
		}
		stop := false
		for _, d := range deltas {
			if onDelta == nil {
				continue
			}
			if err := onDelta(d); errors.Is(err, llm.StopStream) {
				stop = true
				break
			} else if err != nil {
				return nil, err
			}
		}
		if stop {
			break
		}
	}
	msg, err := dec.Message()
	if err != nil {
		return nil, err
	}
	return llm.FinishTurn(req, msg), nil
}

// classify turns an SDK HTTP error into *llm.APIError with the message of
// Google's error body; a body of any other shape (which the SDK puts in
// the message whole) is not quoted: the status text stands in. A refused
// redirect is returned as its *llm.RedirectError; other errors pass
// through.
func classify(err error, box *headerBox) error {
	var re *llm.RedirectError
	if errors.As(err, &re) {
		return re // without the SDK's and *url.Error's wrapping, which repeat the URL
	}
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) {
		var p *genai.APIError
		if !errors.As(err, &p) {
			return undecodable(err)
		}
		apiErr = *p
	}
	status, header := box.get()
	if status == 0 {
		status = apiErr.Code
	}
	msg := apiErr.Message
	if !googleError(apiErr) {
		// The SDK builds the error from a body without an "error" object
		// with the HTTP status line as Status and the whole body as Message.
		msg, apiErr.Status = http.StatusText(status), ""
	}
	if msg == "" {
		msg = "error response"
	}
	out := llm.NewAPIError("gemini", status, header, msg, err)
	out.Code = apiErr.Status // e.g. "RESOURCE_EXHAUSTED"
	return out
}

// sdkDecodeErrors begin the SDK's errors for a body it could not decode
// (or, for newAPIError, read); their text holds the body, or part of it.
var sdkDecodeErrors = []string{"deserializeUnaryResponse:", "iterateResponseStream:", "mapToStruct:", "newAPIError:"}

// undecodable replaces an SDK error that quotes the response body: one the
// SDK could not decode is llm.ErrMalformed (permanent, like a body the
// other clients cannot parse), one it could not read stays retryable.
func undecodable(err error) error {
	msg := err.Error()
	for _, p := range sdkDecodeErrors {
		if !strings.Contains(msg, p) {
			continue
		}
		if p == "newAPIError:" {
			return errors.New("gemini: the error response could not be read")
		}
		return fmt.Errorf("%w: gemini: the SDK could not decode the response (not the Gemini API's shape)", llm.ErrMalformed)
	}
	return err
}

// googleError reports whether e was read from Google's error object
// ({"error": {"code", "message", "status"}}), whose status is a code such as
// "RESOURCE_EXHAUSTED", rather than made by the SDK from another body, where
// Status is the HTTP status line ("404 Not Found").
func googleError(e genai.APIError) bool {
	if e.Status == "" {
		return e.Message == ""
	}
	for _, r := range e.Status {
		if (r < 'A' || r > 'Z') && r != '_' {
			return false
		}
	}
	return true
}

// headerBox receives the status and headers of a failed response for one
// call: the SDK's error keeps only the code from the body.
type headerBox struct {
	mu     sync.Mutex
	status int
	header http.Header
}

func (b *headerBox) get() (int, http.Header) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status, b.header
}

type boxKey struct{}

func withBox(ctx context.Context, b *headerBox) context.Context {
	return context.WithValue(ctx, boxKey{}, b)
}

// headerRecorder stores the headers of error responses in the request's
// headerBox, so retry-after can be honoured.
type headerRecorder struct{ next http.RoundTripper }

func (h headerRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(req)
	if err == nil && resp.StatusCode >= 400 {
		if b, ok := req.Context().Value(boxKey{}).(*headerBox); ok {
			b.mu.Lock()
			b.status, b.header = resp.StatusCode, resp.Header.Clone()
			b.mu.Unlock()
		}
	}
	return resp, err
}
