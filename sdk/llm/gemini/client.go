// Package gemini implements llm.Model on the official Google Gen AI Go SDK
// (google.golang.org/genai) for the Gemini API.
//
// Requests are rendered by llm.Gemini and decoded into the SDK's types
// (whose JSON is the wire format); responses are encoded back and parsed by
// llm.Gemini, so thought signatures and call ids survive unchanged.
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"google.golang.org/genai"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
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
// means the Gemini API with the key from the environment. The HTTP client
// is wrapped to read retry-after headers, which the SDK's errors drop.
func New(ctx context.Context, model string, cfg *genai.ClientConfig) (*Client, error) {
	if cfg == nil {
		cfg = &genai.ClientConfig{Backend: genai.BackendGeminiAPI}
	}
	c := *cfg
	if c.HTTPOptions.Timeout == nil {
		timeout := DefaultTimeout
		c.HTTPOptions.Timeout = &timeout
	}
	base := http.DefaultClient
	if c.HTTPClient != nil {
		base = c.HTTPClient
	}
	hc := *base
	transport := hc.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	hc.Transport = headerRecorder{next: transport}
	c.HTTPClient = &hc
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
	body, err := llm.Gemini{}.RenderRequest(req)
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
	msg, err := llm.Gemini{}.ParseResponse(raw)
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
	dec := llm.Gemini{}.NewStreamDecoder()
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

func classify(err error, box *headerBox) error {
	var apiErr genai.APIError
	if !errors.As(err, &apiErr) {
		var p *genai.APIError
		if !errors.As(err, &p) {
			return err
		}
		apiErr = *p
	}
	status, header := box.get()
	if status == 0 {
		status = apiErr.Code
	}
	out := llm.NewAPIError("gemini", status, header, apiErr.Message, err)
	out.Code = apiErr.Status // e.g. "RESOURCE_EXHAUSTED"
	return out
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
