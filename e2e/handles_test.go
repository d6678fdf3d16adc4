package e2e_test

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// tokenFor mints a fleet token for subject.
func tokenFor(t *testing.T, subject string, scopes ...string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": subject,
		"scope": strings.Join(scopes, " "), "exp": time.Now().Add(10 * time.Minute).Unix()}).SignedString([]byte(e2e.Secret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustInput(t *testing.T, in any) *structpb.Struct {
	t.Helper()
	s, err := client.InputOf(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestResultHandles: with WithResultHandles a result over the tool's limit
// (SchemaTest.Types: 4096 bytes) comes back as Result.Handle, and
// FetchResult/FetchResultBytes read it for its owner only, over gRPC and Connect.
func TestResultHandles(t *testing.T) {
	t.Parallel()
	fleet := e2e.Start(t, e2e.Options{NATS: true, Auth: true})
	scopes := []string{"tools:call", "tools:approve", "schematest:read"}
	big := strings.Repeat("0123456789abcdef", 20<<10) // 320 KiB
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			owner := newClient(t, fleet.Addr, append([]client.Option{client.WithToken(tokenFor(t, "ana", scopes...)), client.WithResultHandles()}, p.opts...)...)
			other := newClient(t, fleet.Addr, append([]client.Option{client.WithToken(tokenFor(t, "bo", scopes...))}, p.opts...)...)
			res, err := owner.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Types",
				Input: mustInput(t, map[string]any{"s": big}), Approval: &toolfleetv1.Approval{Approver: "ana"}})
			if err != nil || !res.Success || res.Handle == nil || res.Value != nil {
				t.Fatalf("call: %+v %v: want a success with a handle", res, err)
			}
			id := res.Handle.GetId()
			b, err := owner.FetchResultBytes(t.Context(), id, res.Handle.GetSizeBytes())
			if err != nil {
				t.Fatal(err)
			}
			var v struct{ Echo struct{ S string } }
			if err := json.Unmarshal(b, &v); err != nil || v.Echo.S != big {
				t.Fatalf("fetched %d bytes (%v), not the tool's result", len(b), err)
			}
			if _, err := owner.FetchResultBytes(t.Context(), id, res.Handle.GetSizeBytes()-1); !errors.Is(err, client.ErrResultTooLarge) {
				t.Fatalf("over the bound: %v, want ErrResultTooLarge", err)
			}
			// A reader closed midway releases the stream.
			r, err := owner.FetchResult(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(r, make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			_ = r.Close()

			var se *client.ServerError
			if _, err := other.FetchResult(t.Context(), id); !errors.As(err, &se) || se.Code != codes.NotFound {
				t.Fatalf("another principal: %v, want NotFound", err)
			}
			if _, err := owner.FetchResult(t.Context(), "not-an-id"); !errors.As(err, &se) || se.Code != codes.InvalidArgument {
				t.Fatalf("malformed id: %v, want InvalidArgument", err)
			}
			// Without the opt-in the result over the limit is an execution error, as ever.
			res, err = other.CallTool(t.Context(), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Types",
				Input: mustInput(t, map[string]any{"s": big}), Approval: &toolfleetv1.Approval{Approver: "bo"}})
			if err != nil || res.Success || res.Handle != nil {
				t.Fatalf("without the opt-in: %+v %v", res, err)
			}
		})
	}
}
