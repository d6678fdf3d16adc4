package wire

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/sdk/llm"
)

// TestProviderErrorsClassified: errors a provider sends in a body or in
// the middle of a stream become *APIError with the status its docs give
// the error type, so retryable and permanent failures can be told apart.
func TestProviderErrorsClassified(t *testing.T) {
	t.Parallel()
	sse := func(f Format, events string) func() error {
		return func() error {
			_, err := DecodeStream(t.Context(), f, strings.NewReader(events), nil)
			return err
		}
	}
	body := func(f Format, b string) func() error {
		return func() error {
			_, err := f.ParseResponse([]byte(b))
			return err
		}
	}
	tests := []struct {
		name       string
		run        func() error
		wantStatus int
		wantCode   string
		retryable  bool
	}{
		{"anthropic overloaded mid-stream", sse(Anthropic{}, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"), 529, "overloaded_error", true},
		{"anthropic error body", body(Anthropic{}, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}`), 400, "invalid_request_error", false},
		{"openai chat error chunk", sse(OpenAIChat{}, "data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\",\"code\":null}}\n\n"), 500, "server_error", true},
		{"openai exhausted quota", body(OpenAIChat{}, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`), 429, "insufficient_quota", false},
		{"openai responses error event", sse(OpenAIResponses{}, "event: error\ndata: {\"type\":\"error\",\"code\":\"rate_limit_exceeded\",\"message\":\"Slow down\",\"param\":null}\n\n"), 429, "rate_limit_exceeded", true},
		{"openai responses failed", sse(OpenAIResponses{}, "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"r\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"Something went wrong\"},\"output\":[]}}\n\n"), 500, "server_error", true},
		{"openai responses unknown failure", sse(OpenAIResponses{}, "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"r\",\"status\":\"failed\",\"output\":[]}}\n\n"), 500, "", true},
		{"bedrock throttling event", func() error {
			_, err := Bedrock{}.NewStreamDecoder().Decode("throttlingException", []byte(`{"message":"Too many requests"}`))
			return err
		}, 429, "throttlingException", true},
		{"bedrock validation event", func() error {
			_, err := Bedrock{}.NewStreamDecoder().Decode("validationException", []byte(`{"message":"bad"}`))
			return err
		}, 400, "validationException", false},
		{"bedrock model stream error", func() error {
			_, err := Bedrock{}.NewStreamDecoder().Decode("modelStreamErrorException", []byte(`{"message":"retry"}`))
			return err
		}, 424, "modelStreamErrorException", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.run()
			var apiErr *llm.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want an *APIError", err)
			}
			if apiErr.StatusCode != tt.wantStatus || apiErr.Code != tt.wantCode {
				t.Errorf("status %d code %q, want %d %q", apiErr.StatusCode, apiErr.Code, tt.wantStatus, tt.wantCode)
			}
			if errors.Is(err, llm.ErrRetryable) != tt.retryable || errors.Is(err, llm.ErrPermanent) == tt.retryable {
				t.Errorf("retryable = %v, want %v", errors.Is(err, llm.ErrRetryable), tt.retryable)
			}
			if retry, _ := llm.Retryable(t.Context(), err); retry != tt.retryable {
				t.Errorf("Retryable = %v, want %v", retry, tt.retryable)
			}
		})
	}
}
