package gemini

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

	"google.golang.org/genai"

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

// server answers like the Gemini API after checking the request is a valid
// generateContent body for the right model.
func server(t *testing.T, status int, header http.Header, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stream := r.URL.Path == "/v1beta/models/gemini-test:streamGenerateContent"
		if r.Method != http.MethodPost || (!stream && r.URL.Path != "/v1beta/models/gemini-test:generateContent") {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		if r.Header.Get("X-Goog-Api-Key") != "test-key" {
			http.Error(w, "bad headers", http.StatusUnauthorized)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		req, err := wire.Gemini{}.ParseRequest(raw)
		if err != nil || len(req.Tools) != 1 || len(req.Messages) < 2 {
			http.Error(w, "bad body: "+string(raw), http.StatusBadRequest)
			return
		}
		// History sent through the SDK keeps call ids and thought signatures.
		for _, m := range req.Messages {
			for _, c := range llm.ToolCalls(m) {
				if c.GetId() != "schedule_meeting_1" || string(c.GetSignature()) != "opaque-signature" {
					http.Error(w, "call lost its id or signature: "+string(raw), http.StatusBadRequest)
					return
				}
			}
		}
		for k, v := range header {
			w.Header()[k] = v
		}
		if stream {
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
	def := &toolfleetv1.ToolDefinition{ModelName: "schedule_meeting", Description: "Schedule."}
	return &llm.Request{Messages: []*toolfleetv1.Message{llm.System("Be brief."), llm.User("Book it.")}, Tools: []*toolfleetv1.ToolDefinition{def}, MaxTokens: 100}
}

// followUp is request plus a signed call and its result, as the next turn sends them.
func followUp() *llm.Request {
	req := request()
	call := llm.CallPart("schedule_meeting_1", "schedule_meeting", map[string]any{"topic": "Q3"})
	call.GetToolCall().Signature = []byte("opaque-signature")
	req.Messages = append(req.Messages,
		llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, call),
		llm.NewMessage(toolfleetv1.Role_ROLE_TOOL, llm.ResultPart("schedule_meeting_1", "schedule_meeting", "booked", false)))
	return req
}

func client(t *testing.T, srv *httptest.Server) *Client {
	t.Helper()
	timeout := 10 * time.Second
	c, err := New(t.Context(), "gemini-test", &genai.ClientConfig{APIKey: "test-key", Backend: genai.BackendGeminiAPI, HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL, Timeout: &timeout}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClient(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		stream    bool
		fixture   string
		wantCalls []string
	}{
		{"complete", false, "gemini/documented_response.json", []string{"schedule_meeting"}},
		{"stream", true, "gemini/stream_parallel.sse", []string{"Calculator_Add", "Calculator_Mul"}},
		{"follow-up keeps signatures", false, "gemini/documented_response.json", []string{"schedule_meeting"}},
		{"stream one call", true, "gemini/stream_parallel.sse", []string{"Calculator_Add"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := client(t, server(t, http.StatusOK, nil, testdata(t, tt.fixture)))
			var msg *toolfleetv1.Message
			var err error
			req := request()
			if tt.name == "follow-up keeps signatures" {
				req = followUp()
			}
			if tt.name == "stream one call" {
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
			calls := llm.ToolCalls(msg)
			if len(calls) != len(tt.wantCalls) {
				t.Fatalf("calls = %v, want %v", calls, tt.wantCalls)
			}
			for i, c := range calls {
				if c.GetName() != tt.wantCalls[i] {
					t.Errorf("call %d = %s, want %s", i, c.GetName(), tt.wantCalls[i])
				}
			}
			if len(calls[0].GetSignature()) == 0 {
				t.Error("thought signature lost through the SDK")
			}
		})
	}
}

func TestClientErrors(t *testing.T) {
	t.Parallel()
	body := []byte(`{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}`)
	tests := []struct {
		name       string
		status     int
		header     http.Header
		want       error
		retryAfter time.Duration
	}{
		{"429 with retry-after", http.StatusTooManyRequests, http.Header{"Retry-After": {"2"}}, llm.ErrRetryable, 2 * time.Second},
		{"500", http.StatusInternalServerError, nil, llm.ErrRetryable, 0},
		{"404", http.StatusNotFound, nil, llm.ErrPermanent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := client(t, server(t, tt.status, tt.header, body))
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
// sent on to the redirect target, whatever the status and target.
func TestClientRefusesRedirects(t *testing.T) {
	t.Parallel()
	redirecttest.Run(t, func(t *testing.T, base string, hc *http.Client) llm.Model {
		timeout := 10 * time.Second
		c, err := New(t.Context(), "gemini-test", &genai.ClientConfig{HTTPClient: hc, APIKey: redirecttest.Key, Backend: genai.BackendGeminiAPI, HTTPOptions: genai.HTTPOptions{BaseURL: base, Timeout: &timeout}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// TestClientErrorBodyNotQuoted: a failure whose body is not Google's error
// object is classified by its status, and the body (whatever the server at
// the base URL sent, which the SDK keeps whole) is not in the error.
func TestClientErrorBodyNotQuoted(t *testing.T) {
	t.Parallel()
	const marker = "upstream-private-marker"
	for _, body := range []string{"<html>" + marker + "</html>", `{"detail":"` + marker + `"}`} {
		c := client(t, server(t, http.StatusBadRequest, nil, []byte(body)))
		_, err := c.Complete(t.Context(), request())
		var apiErr *llm.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !errors.Is(err, llm.ErrPermanent) {
			t.Fatalf("err = %v, want a permanent 400", err)
		}
		if strings.Contains(err.Error(), marker) || strings.Contains(apiErr.Message, marker) || strings.Contains(apiErr.Code, marker) {
			t.Errorf("err = %q (code %q) quotes the response body", err, apiErr.Code)
		}
	}
}

// TestClientUndecodableBodyNotQuoted: a 200 whose body is not the Gemini
// API's fails as llm.ErrMalformed, without the body the SDK quotes in its
// own errors.
func TestClientUndecodableBodyNotQuoted(t *testing.T) {
	t.Parallel()
	const marker = "upstream-private-marker"
	for _, stream := range []bool{false, true} {
		body := "<html>" + marker + "</html>"
		if stream {
			body = "data: <html>" + marker + "</html>\n\n"
		}
		c := client(t, server(t, http.StatusOK, nil, []byte(body)))
		var err error
		if stream {
			_, err = c.Stream(t.Context(), request(), nil)
		} else {
			_, err = c.Complete(t.Context(), request())
		}
		if !errors.Is(err, llm.ErrMalformed) {
			t.Fatalf("stream=%v: err = %v, want ErrMalformed", stream, err)
		}
		if strings.Contains(err.Error(), marker) {
			t.Errorf("stream=%v: err = %q quotes the response body", stream, err)
		}
	}
}
