package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// handleCaller is one principal calling a gateway with result handles.
type handleCaller struct {
	t      *testing.T
	g      *gateway.Gateway
	bearer string
}

// typesScopes are what SchemaTest.Types needs (its contract requires an approval).
var typesScopes = []string{gateway.ScopeCall, gateway.ScopeApprove, "schematest:read"}

func newHandleCaller(t *testing.T, g *gateway.Gateway, subject string) handleCaller {
	t.Helper()
	return handleCaller{t: t, g: g, bearer: signHS(t, jwt.MapClaims{"sub": subject,
		"scope": strings.Join(typesScopes, " "), "exp": time.Now().Add(10 * time.Minute).Unix()})}
}

func (c handleCaller) ctx() context.Context {
	return metadata.AppendToOutgoingContext(c.t.Context(), "authorization", "Bearer "+c.bearer)
}

// echo calls SchemaTest.Types (limit 4096 bytes) with a string of n bytes.
func (c handleCaller) echo(callID string, n int, allow bool) (*toolfleetv1.CallToolResponse, error) {
	c.t.Helper()
	return grpcClient(c.t, c.g.Addr()).CallTool(c.ctx(), &toolfleetv1.CallToolRequest{CallId: callID, ToolId: "SchemaTest.Types",
		Input: mustStruct(c.t, map[string]any{"s": bigString(n)}), Approval: testApproval, AllowResultHandle: allow})
}

// fetch reads a result over gRPC.
func (c handleCaller) fetch(id string) ([]byte, error) {
	c.t.Helper()
	stream, err := grpcClient(c.t, c.g.Addr()).FetchResult(c.ctx(), &toolfleetv1.FetchResultRequest{Id: id})
	if err != nil {
		return nil, err
	}
	var out []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m.GetChunk()...)
	}
}

// fetchConnect reads a result over Connect.
func (c handleCaller) fetchConnect(id string) ([]byte, error) {
	c.t.Helper()
	req := connect.NewRequest(&toolfleetv1.FetchResultRequest{Id: id})
	req.Header().Set("Authorization", "Bearer "+c.bearer)
	stream, err := connectClient(c.g.Addr()).FetchResult(c.t.Context(), req)
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var out []byte
	for stream.Receive() {
		out = append(out, stream.Msg().GetChunk()...)
	}
	return out, stream.Err()
}

// fetchOXP reads a result with GET /results/{id}; bearer "" sends none.
func fetchOXP(t *testing.T, g *gateway.Gateway, id, bearer string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+g.Addr()+"/results/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

// bigString is n bytes of varied text (not one repeated byte, so a chunk
// out of order would show).
func bigString(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 1+i%7))
	}
	return b.String()[:n]
}

// echoed is the "s" a Types result holds.
func echoed(t *testing.T, result []byte) string {
	t.Helper()
	var v struct {
		Echo struct {
			S string `json:"s"`
		} `json:"echo"`
	}
	if err := json.Unmarshal(result, &v); err != nil {
		t.Fatalf("the result is not the tool's JSON: %v", err)
	}
	return v.Echo.S
}

// waitHandle calls until the gateway's result store is ready and answers with a handle.
func waitHandle(t *testing.T, c handleCaller, n int) *toolfleetv1.CallToolResponse {
	t.Helper()
	var resp *toolfleetv1.CallToolResponse
	waitFor(t, "a result handle", func() bool {
		r, err := c.echo("", n, true)
		if err != nil {
			t.Fatalf("call: %v", err)
		}
		resp = r
		return r.GetResultHandle() != nil
	})
	return resp
}

func codeOf(err error) codes.Code { return status.Code(err) }

// TestResultHandles: a caller that allows a handle gets a result over the
// tool's limit as a handle, fetches the same bytes over gRPC, Connect and OXP
// HTTP, and nobody else can; a repeat of the call_id answers the same handle;
// without the opt-in the call fails as before.
func TestResultHandles(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	stAddr, st := countingSchemaTestWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{stAddr}, Results: memResults})
	waitTool(t, g, "SchemaTest.Types")
	alice, bob := newHandleCaller(t, g, "alice"), newHandleCaller(t, g, "bob")
	const n = 300 << 10 // several object store chunks and FetchResult messages
	resp := waitHandle(t, alice, n)
	h := resp.GetResultHandle()

	t.Run("the handle", func(t *testing.T) {
		if !resp.GetSuccess() || resp.GetValue() != nil || resp.GetError() != nil {
			t.Fatalf("response %v: want success with only a handle", resp)
		}
		if len(h.GetId()) != 32 || h.GetContentType() != "application/json" || h.GetSizeBytes() <= n ||
			!h.GetExpiresAt().AsTime().After(time.Now()) || len(h.GetPreview()) == 0 || len(h.GetPreview()) > 256 {
			t.Fatalf("handle %v", h)
		}
	})
	var stored []byte
	t.Run("fetch over gRPC", func(t *testing.T) {
		b, err := alice.fetch(h.GetId())
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != h.GetSizeBytes() || !bytes.HasPrefix(b, []byte(h.GetPreview())) || echoed(t, b) != bigString(n) {
			t.Fatalf("fetched %d bytes (handle says %d), starting %.40q", len(b), h.GetSizeBytes(), b)
		}
		stored = b
	})
	t.Run("fetch over Connect", func(t *testing.T) {
		b, err := alice.fetchConnect(h.GetId())
		if err != nil || !bytes.Equal(b, stored) {
			t.Fatalf("Connect fetched %d bytes, %v; want the %d bytes fetched over gRPC", len(b), err, len(stored))
		}
	})
	t.Run("fetch over OXP HTTP", func(t *testing.T) {
		code, ct, b := fetchOXP(t, g, h.GetId(), alice.bearer)
		if code != http.StatusOK || ct != "application/json" || !bytes.Equal(b, stored) {
			t.Fatalf("GET /results: %d %s, %d bytes; want 200 and the %d bytes fetched over gRPC", code, ct, len(b), len(stored))
		}
		for _, c := range []struct {
			name, id, bearer string
			want             int
		}{
			{"another principal", h.GetId(), bob.bearer, http.StatusNotFound},
			{"unknown id", strings.Repeat("0", 32), alice.bearer, http.StatusNotFound},
			{"malformed id", strings.ToUpper(h.GetId()), alice.bearer, http.StatusBadRequest},
			{"no token", h.GetId(), "", http.StatusUnauthorized},
		} {
			if code, _, b := fetchOXP(t, g, c.id, c.bearer); code != c.want || bytes.Contains(b, stored[:64]) {
				t.Errorf("%s: GET /results: %d %s, want %d", c.name, code, b, c.want)
			}
		}
	})
	t.Run("another principal gets NotFound, as for an unknown id", func(t *testing.T) {
		_, errBob := bob.fetch(h.GetId())
		_, errUnknown := alice.fetch(strings.Repeat("ab", 16))
		if codeOf(errBob) != codes.NotFound || codeOf(errUnknown) != codes.NotFound {
			t.Fatalf("another principal: %v; unknown id: %v; want NotFound for both", errBob, errUnknown)
		}
		if _, err := bob.fetchConnect(h.GetId()); connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("another principal over Connect: %v", err)
		}
		// Same words but for the id: nothing tells an existing id from an unknown one.
		strip := func(err error, id string) string { return strings.ReplaceAll(status.Convert(err).Message(), id, "ID") }
		if strip(errBob, h.GetId()) != strip(errUnknown, strings.Repeat("ab", 16)) {
			t.Fatalf("messages differ: %q vs %q", status.Convert(errBob).Message(), status.Convert(errUnknown).Message())
		}
	})
	t.Run("malformed ids are InvalidArgument", func(t *testing.T) {
		for _, id := range []string{"", strings.ToUpper(h.GetId()), h.GetId()[:31], h.GetId() + "0", "../" + h.GetId()[3:],
			strings.Repeat("g", 32), h.GetId()[:31] + "*", h.GetId()[:16] + " " + h.GetId()[17:]} {
			if _, err := alice.fetch(id); codeOf(err) != codes.InvalidArgument {
				t.Errorf("id %q: %v, want InvalidArgument", id, err)
			}
		}
	})
	t.Run("a repeat of the call_id answers the same handle", func(t *testing.T) {
		before := st.types.Load()
		r1, err := alice.echo("handle-repeat", n, true)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := alice.echo("handle-repeat", n, true)
		if err != nil {
			t.Fatal(err)
		}
		if r1.GetResultHandle().GetId() == "" || r2.GetResultHandle().GetId() != r1.GetResultHandle().GetId() {
			t.Fatalf("handles %v and %v, want one", r1.GetResultHandle(), r2.GetResultHandle())
		}
		if ran := st.types.Load() - before; ran != 1 {
			t.Fatalf("the tool ran %d times for one call_id", ran)
		}
		if b, err := alice.fetch(r2.GetResultHandle().GetId()); err != nil || echoed(t, b) != bigString(n) {
			t.Fatalf("fetch the repeat's handle: %v", err)
		}
	})
	t.Run("without the opt-in the call fails as before", func(t *testing.T) {
		r, err := alice.echo("", n, false)
		if err != nil || r.GetSuccess() || r.GetResultHandle() != nil || !strings.Contains(r.GetError().GetMessage(), "limit is 4096") {
			t.Fatalf("%v %v: want an execution error over the limit", r, err)
		}
	})
	t.Run("a result within the limit stays inline", func(t *testing.T) {
		r, err := alice.echo("", 10, true)
		if err != nil || !r.GetSuccess() || r.GetResultHandle() != nil || r.GetValue() == nil {
			t.Fatalf("%v %v: want an inline value", r, err)
		}
	})
	t.Run("CallTools", func(t *testing.T) {
		in := mustStruct(t, map[string]any{"s": bigString(n)})
		out, err := grpcClient(t, g.Addr()).CallTools(alice.ctx(), &toolfleetv1.CallToolsRequest{Calls: []*toolfleetv1.CallToolRequest{
			{ToolId: "SchemaTest.Types", Input: in, Approval: testApproval, AllowResultHandle: true},
			{ToolId: "SchemaTest.Types", Input: in, Approval: testApproval},
		}})
		if err != nil {
			t.Fatal(err)
		}
		o := out.GetOutcomes()
		if o[0].GetResponse().GetResultHandle() == nil || o[1].GetResponse().GetSuccess() {
			t.Fatalf("outcomes %v: want a handle, then an execution error", o)
		}
	})
	t.Run("OXP POST /tools/call renders the handle", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"request": map[string]any{"tool_id": "SchemaTest.Types", "allow_result_handle": true,
			"input": map[string]any{"s": bigString(n)}, "approval": map[string]any{"approver": "tester"}}})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+g.Addr()+"/tools/call", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+alice.bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Result struct {
				Success      bool            `json:"success"`
				Value        json.RawMessage `json:"value"`
				ResultHandle struct {
					ID string `json:"id"`
				} `json:"result_handle"`
			} `json:"result"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /tools/call: %d %v", resp.StatusCode, err)
		}
		if !out.Result.Success || out.Result.Value != nil || len(out.Result.ResultHandle.ID) != 32 {
			t.Fatalf("result %+v: want success with a handle", out.Result)
		}
		if code, _, b := fetchOXP(t, g, out.Result.ResultHandle.ID, alice.bearer); code != http.StatusOK || echoed(t, b) != bigString(n) {
			t.Fatalf("GET /results: %d", code)
		}
	})
}

// TestResultHandleExpiry: a result is gone after its TTL, from the gateway
// (NotFound) and from the bucket.
func TestResultHandleExpiry(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	stAddr := schemaTestWorker(t, "")
	const ttl = 2 * time.Second
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{stAddr},
		Results: results.Config{BucketConfig: jsassets.BucketConfig{Bucket: "expiring_results", TTL: ttl, MemoryStorage: true}}})
	waitTool(t, g, "SchemaTest.Types")
	alice := newHandleCaller(t, g, "alice")
	h := waitHandle(t, alice, 10<<10).GetResultHandle()
	expires := h.GetExpiresAt().AsTime()
	if expires.After(time.Now().Add(ttl)) {
		t.Fatalf("expires at %v, later than the TTL allows", expires)
	}
	// Whether a fetch comes before the expiry depends on the machine's speed:
	// only one that does is checked.
	if b, err := alice.fetch(h.GetId()); time.Now().Before(expires) && (err != nil || int64(len(b)) != h.GetSizeBytes()) {
		t.Fatalf("fetch before the expiry: %d bytes, %v", len(b), err)
	}
	waitFor(t, "the expiry", func() bool { return time.Now().After(expires) })
	if _, err := alice.fetch(h.GetId()); codeOf(err) != codes.NotFound {
		t.Fatalf("fetch after the expiry: %v, want NotFound", err)
	}
	if code, _, _ := fetchOXP(t, g, h.GetId(), alice.bearer); code != http.StatusNotFound {
		t.Fatalf("GET /results after the expiry: %d, want 404", code)
	}
	// The bucket itself dropped it (its TTL), not only the gateway's check.
	nc, err := natsgo.Connect(nats.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(t.Context(), "expiring_results")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bucket to drop the result", func() bool {
		_, err := obs.GetInfo(t.Context(), h.GetId())
		return errors.Is(err, jetstream.ErrObjectNotFound)
	})
}

// TestResultHandlesWithoutNATS: a gateway without NATS keeps no results; an
// opt-in call over the limit fails as before, saying why.
func TestResultHandlesWithoutNATS(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gateway.Config{Workers: []string{schemaTestWorker(t, "")}})
	waitTool(t, g, "SchemaTest.Types")
	alice := newHandleCaller(t, g, "alice")
	r, err := alice.echo("", 10<<10, true)
	if err != nil || r.GetSuccess() || r.GetResultHandle() != nil || !strings.Contains(r.GetError().GetMessage(), "result handles need a gateway with NATS") {
		t.Fatalf("%v %v: want an execution error saying handles need NATS", r, err)
	}
	if _, err := alice.fetch(strings.Repeat("0", 32)); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("fetch: %v, want FailedPrecondition", err)
	}
}

// TestResultHandleCallsBounded: at most ResultHandles.Calls calls that allow a
// handle run at once; one past the bound waits ResultHandles.Wait for a slot,
// then is refused before it runs (ResourceExhausted); a call that allows no
// handle is not held up; once the slot is free the call runs.
func TestResultHandleCallsBounded(t *testing.T) {
	t.Parallel()
	nats := natstest.Start(t)
	stAddr, st := countingSchemaTestWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: nats.URL(), Workers: []string{stAddr}, Results: memResults,
		ResultHandles: gateway.ResultHandlesConfig{Calls: 1, Wait: 100 * time.Millisecond}})
	waitTool(t, g, "SchemaTest.Types")
	waitTool(t, g, "SchemaTest.Sleep")
	alice := newHandleCaller(t, g, "alice")
	waitHandle(t, alice, 8<<10) // the store is ready
	holding := make(chan error, 1)
	go func() { // holds the only slot for three seconds
		_, err := grpcClient(t, g.Addr()).CallTool(alice.ctx(), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Sleep",
			Input: mustStruct(t, map[string]any{"duration": "3s"}), AllowResultHandle: true})
		holding <- err
	}()
	var refused error
	waitFor(t, "a call refused for want of a slot", func() bool {
		_, refused = alice.echo("", 8<<10, true)
		return refused != nil
	})
	before := st.types.Load()
	if _, err := alice.echo("", 8<<10, true); codeOf(err) != codes.ResourceExhausted || st.types.Load() != before {
		t.Fatalf("a second call while the slot is taken: %v (Types ran %d times), want a refusal that runs nothing", err, st.types.Load()-before)
	}
	if codeOf(refused) != codes.ResourceExhausted || !strings.Contains(refused.Error(), "as many calls that allow a result handle as it takes at once (1)") {
		t.Fatalf("refusal %v: want ResourceExhausted naming the bound", refused)
	}
	if r, err := alice.echo("", 10, false); err != nil || !r.GetSuccess() {
		t.Fatalf("a call without a handle while the slot is taken: %v %v, want it to run", r, err)
	}
	if err := <-holding; err != nil {
		t.Fatal(err)
	}
	if r, err := alice.echo("", 8<<10, true); err != nil || r.GetResultHandle() == nil {
		t.Fatalf("after the slot was freed: %v %v, want a handle", r, err)
	}
}
