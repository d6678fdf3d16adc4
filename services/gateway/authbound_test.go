package gateway_test

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
)

// stalledBody sends its head, then blocks until it is closed or the test ends:
// a request body that is never finished.
type stalledBody struct {
	head   []byte
	done   <-chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (b *stalledBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	select {
	case <-b.done:
	case <-b.closed:
	}
	return 0, io.EOF
}

// TestLongAuthorizationRefusedBeforeBody: a 500 KB bearer token is refused as
// soon as the headers are in, on every surface, while the request's body is
// still unfinished (a gateway that read the body first would never answer).
func TestLongAuthorizationRefusedBeforeBody(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{})
	long := "Bearer " + strings.Repeat("a", 500_000)
	grpcHead := make([]byte, 5)
	binary.BigEndian.PutUint32(grpcHead[1:], 1000) // a 1000-byte message, never sent

	rows := []struct {
		name, path, contentType string
		head                    []byte
		h2                      bool
		check                   func(t *testing.T, resp *http.Response, body string)
	}{
		{"oxp", "/tools/call", "application/json", []byte(`{"request": {"tool_id": "Calculator.Add", "input": {`), false,
			func(t *testing.T, resp *http.Response, body string) {
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"code":"UNAUTHENTICATED"`) ||
					resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("got %d %s, want 401 UNAUTHENTICATED with a challenge", resp.StatusCode, body)
				}
			}},
		{"mcp", "/mcp", "application/json", []byte(`{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {`), false,
			func(t *testing.T, resp *http.Response, body string) {
				if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("got %d %s, want 401 with a challenge", resp.StatusCode, body)
				}
			}},
		{"connect", "/toolfleet.v1.ToolGatewayService/CallTool", "application/json", []byte(`{"toolId": "Calculator.Add", "input": {`), true,
			func(t *testing.T, resp *http.Response, body string) {
				if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthenticated"`) {
					t.Errorf("got %d %s, want 401 unauthenticated", resp.StatusCode, body)
				}
			}},
		{"grpc-web", "/toolfleet.v1.ToolGatewayService/CallTool", "application/grpc-web+proto", grpcHead, true,
			func(t *testing.T, resp *http.Response, body string) {
				if got := resp.Header.Get("Grpc-Status"); got != "16" {
					t.Errorf("grpc-status %q (HTTP %d, %s), want 16 (UNAUTHENTICATED)", got, resp.StatusCode, body)
				}
			}},
		{"grpc", "/toolfleet.v1.ToolGatewayService/CallTool", "application/grpc", grpcHead, true,
			func(t *testing.T, resp *http.Response, body string) {
				st := resp.Header.Get("Grpc-Status") // a trailers-only response
				if st == "" {
					st = resp.Trailer.Get("Grpc-Status")
				}
				if st != "16" {
					t.Errorf("grpc-status %q (HTTP %d), want 16 (UNAUTHENTICATED)", st, resp.StatusCode)
				}
			}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			done := make(chan struct{})
			defer close(done)
			body := &stalledBody{head: r.head, done: done, closed: make(chan struct{})}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.Addr()+r.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", r.contentType)
			req.Header.Set("Authorization", long)
			client := http.DefaultClient
			if r.h2 {
				client = h2c()
			}
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("no answer while the body is unfinished (after %v): %v", time.Since(start), err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body) // a trailers-only gRPC answer ends here too
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("answered after %v", took)
			}
			r.check(t, resp, string(b))
			if strings.Contains(string(b), "aaaaaaaa") {
				t.Errorf("the answer echoes the token")
			}
		})
	}

	// A gRPC client's own call gets UNAUTHENTICATED with the gateway's
	// ServerError detail.
	t.Run("grpc client", func(t *testing.T) {
		t.Parallel()
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", long)
		_, err := grpcClient(t, g.Addr()).CallTool(ctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add"})
		st := status.Convert(err)
		if st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), "over 16 KiB") {
			t.Fatalf("got %v, want UNAUTHENTICATED over 16 KiB", err)
		}
		if len(st.Details()) != 1 {
			t.Errorf("details %v, want a ServerError", st.Details())
		}
	})

	// In process (mounts use it), and a token just within the bound is judged
	// as a token.
	t.Run("authenticate", func(t *testing.T) {
		t.Parallel()
		if _, err := g.Authenticate(t.Context(), long); err == nil || !strings.Contains(err.Error(), "over 16 KiB") {
			t.Errorf("Authenticate(500 KB) = %v", err)
		}
		within := "Bearer " + strings.Repeat("a", auth.MaxAuthorizationBytes-len("Bearer "))
		if _, err := g.Authenticate(t.Context(), within); err == nil || strings.Contains(err.Error(), "over 16 KiB") {
			t.Errorf("Authenticate(16 KiB) = %v, want a token that is not valid", err)
		}
	})
}
