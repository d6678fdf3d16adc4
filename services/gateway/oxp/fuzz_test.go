package oxp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/jsonsize"
	"github.com/toolfleet/toolfleet/services/gateway/oxp"
)

var errFake = errors.New("fake backend")

// echo is a Backend that records the request of the last call.
type echo struct{ last *toolfleetv1.CallToolRequest }

func (*echo) ToolCount() int { return 0 }
func (*echo) Serving() bool  { return true }
func (*echo) ListTools(context.Context, http.Header, *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return nil, errFake
}
func (e *echo) CallTool(_ context.Context, _ http.Header, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	e.last = req
	return &toolfleetv1.CallToolResponse{}, nil
}
func (*echo) OpenResult(context.Context, http.Header, string) (*oxp.Result, error) {
	return nil, errFake
}
func (*echo) Failure(error) *toolfleetv1.CallFailure { return &toolfleetv1.CallFailure{} }

// FuzzCallToolBody posts any body to POST /tools/call. Properties: the answer
// is 200 exactly when the backend was called, any other answer is a 4xx with
// a JSON body, and the backend only ever sees a request whose JSON was within
// the value limit.
func FuzzCallToolBody(f *testing.F) {
	for _, s := range []string{
		`{"request":{"tool_id":"Calculator.Add@1.0.0","input":{"a":1,"b":2}}}`,
		`{"$schema":"urn:oxp:1.0","request":{"toolId":"Calculator.Add","input":{}}}`,
		`{"request":{"tool_id":"X.Y","input":{"a":[1,2,3,4,5,6,7,8,9,10]}}}`,
		`{"request":null}`, `{"request":{"tool_id":1}}`, `{"request":{"unknown":true}}`, `[]`, `{}`, ``, `{"request":"x"}`,
		`{"request":{"input":{"s":"\ud800"}}}`,
	} {
		f.Add([]byte(s))
	}
	const maxValues = 16
	f.Fuzz(func(t *testing.T, body []byte) {
		be := &echo{}
		mux := http.NewServeMux()
		oxp.New(be, oxp.Options{MaxRequestBytes: 4096, MaxInputValues: maxValues}).Register(mux)
		req := httptest.NewRequest(http.MethodPost, "/tools/call", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%q: answer %d is not JSON: %q", body, rec.Code, rec.Body.Bytes())
		}
		if (rec.Code == http.StatusOK) != (be.last != nil) {
			t.Fatalf("%q: status %d, backend called: %v", body, rec.Code, be.last != nil)
		}
		if be.last == nil {
			if rec.Code < 400 || rec.Code > 499 {
				t.Fatalf("%q: status %d, want a 4xx refusal", body, rec.Code)
			}
			return
		}
		var env struct{ Request json.RawMessage }
		if err := json.Unmarshal(body, &env); err != nil || jsonsize.Values(env.Request, 0) > maxValues {
			t.Fatalf("%q: backend called with a body past the checks (%v)", body, err)
		}
		if _, err := proto.Marshal(be.last); err != nil {
			t.Fatalf("%q: decoded request does not marshal: %v", body, err)
		}
	})
}
