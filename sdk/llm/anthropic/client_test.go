package anthropic

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/option"

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

// server answers like the Messages API after checking the request is a
// valid Messages body sent with Anthropic's headers.
func server(t *testing.T, status int, header http.Header, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		if r.Header.Get("X-Api-Key") != "test-key" || r.Header.Get("Anthropic-Version") == "" {
			http.Error(w, "bad headers", http.StatusUnauthorized)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		req, err := wire.Anthropic{}.ParseRequest(raw)
		if err != nil || req.Model != "claude-test" || req.MaxTokens == 0 || len(req.Tools) != 1 {
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
	return &llm.Request{Messages: []*toolfleetv1.Message{llm.User("Weather in SF?")}, Tools: []*toolfleetv1.ToolDefinition{def}}
}

func TestClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		stream    bool
		fixture   string
		wantCalls int
		wantText  string
		oneCall   bool // the request allows one call per turn
	}{
		{"complete", false, "anthropic/documented_response.json", 1, "I'll check the weather in San Francisco.", false},
		{"stream", true, "anthropic/stream_parallel.sse", 2, "Computing both.", false},
		{"stream one call", true, "anthropic/stream_parallel.sse", 1, "Computing both.", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, http.StatusOK, nil, testdata(t, tt.fixture))
			c := New("claude-test", option.WithBaseURL(srv.URL), option.WithAPIKey("test-key"), option.WithRequestTimeout(10*time.Second))
			var msg *toolfleetv1.Message
			var err error
			req := request()
			if tt.oneCall {
				req.ParallelToolCalls = new(false)
			}
			if tt.stream {
				msg, err = c.Stream(t.Context(), req, nil)
			} else {
				msg, err = c.Complete(t.Context(), req)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := len(llm.ToolCalls(msg)); n != tt.wantCalls {
				t.Errorf("calls = %d, want %d", n, tt.wantCalls)
			}
			if got := llm.MessageText(msg); got != tt.wantText {
				t.Errorf("text = %q, want %q", got, tt.wantText)
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	body := []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	tests := []struct {
		name       string
		status     int
		header     http.Header
		want       error
		retryAfter time.Duration
	}{
		{"529 overloaded", 529, nil, llm.ErrRetryable, 0},
		{"429 with retry-after", http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}}, llm.ErrRetryable, 7 * time.Second},
		{"409", http.StatusConflict, nil, llm.ErrRetryable, 0},
		{"413", http.StatusRequestEntityTooLarge, nil, llm.ErrPermanent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := server(t, tt.status, tt.header, body)
			c := New("claude-test", option.WithBaseURL(srv.URL), option.WithAPIKey("test-key"), option.WithRequestTimeout(10*time.Second))
			_, err := c.Stream(t.Context(), request(), nil)
			var apiErr *llm.APIError
			if !errors.Is(err, tt.want) || !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if apiErr.StatusCode != tt.status || apiErr.RetryAfter != tt.retryAfter {
				t.Errorf("status %d retry-after %v, want %d %v", apiErr.StatusCode, apiErr.RetryAfter, tt.status, tt.retryAfter)
			}
			if apiErr.Code != "overloaded_error" || apiErr.Message != "Overloaded" {
				t.Errorf("code %q message %q, want the body's error type and message", apiErr.Code, apiErr.Message)
			}
		})
	}
}

// TestClientStreamError: an error event after HTTP 200 is classified like
// an HTTP error, so the caller can retry an overloaded turn.
func TestClientStreamError(t *testing.T) {
	t.Parallel()
	sse := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-test\"}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
	srv := server(t, http.StatusOK, nil, sse)
	c := New("claude-test", option.WithBaseURL(srv.URL), option.WithAPIKey("test-key"), option.WithRequestTimeout(10*time.Second))
	_, err := c.Stream(t.Context(), request(), nil)
	var apiErr *llm.APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, llm.ErrRetryable) || apiErr.StatusCode != 529 || apiErr.Code != "overloaded_error" {
		t.Fatalf("err = %v, want a retryable 529 overloaded_error", err)
	}
}

// TestClientRefusesRedirects: an endpoint that redirects never gets the key
// sent on to the redirect target, whatever the status and target.
func TestClientRefusesRedirects(t *testing.T) {
	t.Parallel()
	redirecttest.Run(t, func(t *testing.T, base string, hc *http.Client) llm.Model {
		return New("claude-test", WithHTTPClient(hc), option.WithBaseURL(base), option.WithAPIKey(redirecttest.Key), option.WithRequestTimeout(10*time.Second))
	})
}

// TestClientErrorBodyNotQuoted: a failure whose body is not Anthropic's
// error object is classified by its status, and the body (whatever the
// server at the base URL sent) is not in the error.
func TestClientErrorBodyNotQuoted(t *testing.T) {
	t.Parallel()
	const marker = "upstream-private-marker"
	for _, body := range []string{"<html>" + marker + "</html>", `{"detail":"` + marker + `"}`} {
		srv := server(t, http.StatusBadGateway, nil, []byte(body))
		c := New("claude-test", option.WithBaseURL(srv.URL), option.WithAPIKey("test-key"), option.WithRequestTimeout(10*time.Second))
		_, err := c.Stream(t.Context(), request(), nil)
		var apiErr *llm.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway || !errors.Is(err, llm.ErrRetryable) {
			t.Fatalf("err = %v, want a retryable 502", err)
		}
		if strings.Contains(err.Error(), marker) || strings.Contains(apiErr.Message, marker) {
			t.Errorf("err = %q quotes the response body", err)
		}
	}
}
