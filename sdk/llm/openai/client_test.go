package openai

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/redirecttest"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
)

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "wire", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// server answers like OpenAI: it checks the request is a valid body in the
// API's format, then sends the fixture (JSON or SSE) or an error.
func server(t *testing.T, api API, status int, header http.Header, body []byte) *httptest.Server {
	t.Helper()
	format, path := wire.Format(wire.OpenAIChat{}), "/v1/chat/completions"
	if api == Responses {
		format, path = wire.OpenAIResponses{}, "/v1/responses"
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != path {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		if r.Header.Get("Authorization") != "Bearer test-key" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad headers", http.StatusUnauthorized)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		req, err := format.ParseRequest(raw)
		if err != nil || req.Model != "gpt-test" || len(req.Tools) != 1 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func request() *llm.Request {
	def := &toolfleetv1.ToolDefinition{ModelName: "get_weather", Description: "Weather."}
	return &llm.Request{Messages: []*toolfleetv1.Message{llm.User("Weather in Paris?")}, Tools: []*toolfleetv1.ToolDefinition{def}}
}

func TestClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		api       API
		stream    bool
		fixture   string
		wantCalls int
		oneCall   bool // the request allows one call per turn
	}{
		{"chat complete", ChatCompletions, false, "openai/documented_response.json", 2, false},
		{"chat stream", ChatCompletions, true, "openai/stream_parallel.sse", 2, false},
		{"responses complete", Responses, false, "openai-responses/documented_response.json", 1, false},
		{"responses stream", Responses, true, "openai-responses/stream_parallel.sse", 2, false},
		{"chat complete one call", ChatCompletions, false, "openai/documented_response.json", 1, true},
		{"chat stream one call", ChatCompletions, true, "openai/stream_parallel.sse", 1, true},
		{"responses stream one call", Responses, true, "openai-responses/stream_parallel.sse", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, tt.api, http.StatusOK, nil, testdata(t, tt.fixture))
			c := New(tt.api, "gpt-test", option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test-key"), option.WithRequestTimeout(10*time.Second))
			var msg *toolfleetv1.Message
			var err error
			deltas := 0
			req := request()
			if tt.oneCall {
				req.ParallelToolCalls = new(false)
			}
			streamedIDs := map[string]bool{}
			if tt.stream {
				msg, err = c.Stream(t.Context(), req, func(d llm.Delta) error {
					deltas++
					if d.ToolCall != nil && d.ToolCall.ID != "" {
						streamedIDs[d.ToolCall.ID] = true
					}
					return nil
				})
			} else {
				msg, err = c.Complete(t.Context(), req)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := len(llm.ToolCalls(msg)); n != tt.wantCalls {
				t.Errorf("calls = %d, want %d", n, tt.wantCalls)
			}
			if tt.stream && deltas == 0 {
				t.Error("no deltas streamed")
			}
			if tt.stream && len(streamedIDs) != tt.wantCalls {
				t.Errorf("streamed fragments of %d calls, want %d", len(streamedIDs), tt.wantCalls)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	body := []byte(`{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	tests := []struct {
		name       string
		status     int
		header     http.Header
		want       error
		retryAfter time.Duration
	}{
		{"429 with retry-after", http.StatusTooManyRequests, http.Header{"Retry-After": {"3"}}, llm.ErrRetryable, 3 * time.Second},
		{"503", http.StatusServiceUnavailable, nil, llm.ErrRetryable, 0},
		{"408", http.StatusRequestTimeout, http.Header{"Retry-After-Ms": {"250"}}, llm.ErrRetryable, 250 * time.Millisecond},
		{"400", http.StatusBadRequest, nil, llm.ErrPermanent, 0},
		{"401", http.StatusUnauthorized, nil, llm.ErrPermanent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, ChatCompletions, tt.status, tt.header, body)
			c := New(ChatCompletions, "gpt-test", option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test-key"), option.WithRequestTimeout(10*time.Second))
			_, err := c.Complete(t.Context(), request())
			var apiErr *llm.APIError
			if !errors.Is(err, tt.want) || !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if apiErr.StatusCode != tt.status || apiErr.RetryAfter != tt.retryAfter {
				t.Errorf("status %d retry-after %v, want %d %v", apiErr.StatusCode, apiErr.RetryAfter, tt.status, tt.retryAfter)
			}
		})
	}
}

// TestClientRefusesRedirects: an endpoint that redirects never gets the key
// sent on to the redirect target, on either API, whatever the status and
// target.
func TestClientRefusesRedirects(t *testing.T) {
	t.Parallel()
	for _, api := range []API{ChatCompletions, Responses} {
		t.Run(fmt.Sprintf("api=%d", api), func(t *testing.T) {
			t.Parallel()
			redirecttest.Run(t, func(t *testing.T, base string, hc *http.Client) llm.Model {
				return New(api, "gpt-test", WithHTTPClient(hc), option.WithBaseURL(base+"/v1"), option.WithAPIKey(redirecttest.Key), option.WithRequestTimeout(10*time.Second))
			})
		})
	}
}

// TestClientErrorBodyNotQuoted: a failure whose body is not OpenAI's error
// object is classified by its status, and the body is not in the error.
func TestClientErrorBodyNotQuoted(t *testing.T) {
	t.Parallel()
	const marker = "upstream-private-marker"
	for _, body := range []string{"<html>" + marker + "</html>", `{"detail":"` + marker + `"}`} {
		srv := server(t, ChatCompletions, http.StatusBadRequest, nil, []byte(body))
		c := New(ChatCompletions, "gpt-test", option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test-key"), option.WithRequestTimeout(10*time.Second))
		_, err := c.Complete(t.Context(), request())
		var apiErr *llm.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !errors.Is(err, llm.ErrPermanent) {
			t.Fatalf("err = %v, want a permanent 400", err)
		}
		if strings.Contains(err.Error(), marker) || strings.Contains(apiErr.Message, marker) {
			t.Errorf("err = %q quotes the response body", err)
		}
	}
}
