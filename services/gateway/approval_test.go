package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
)

// kvFleet runs the KV worker over an embedded NATS and a gateway with auth on.
func kvFleet(t *testing.T) (*gateway.Gateway, jetstream.KeyValue, string) {
	t.Helper()
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	bucket, err := kv.OpenBucket(ctx, js, kv.BucketConfig{})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := startWorker(t, "", func(w *tool.Worker) { kvv1.RegisterKVServiceServer(w, kv.New(bucket)) })
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{w.Addr()}})
	waitTool(t, g, "KV.Delete")
	return g, bucket, srv.URL()
}

// TestApprovals: KV.Delete requires approval. Without one, or from a caller that
// may not approve, it is FailedPrecondition and nothing is deleted; with one it
// runs and its event names the approver. A delegate (the orchestrator) calls on
// behalf of a principal with that principal's scopes, and the event keeps both.
func TestApprovals(t *testing.T) {
	t.Parallel()
	g, bucket, natsURL := kvFleet(t)
	gc := grpcClient(t, g.Addr())
	signed := func(sub string, scopes ...string) string {
		return signHS(t, map[string]any{"sub": sub, "scope": strings.Join(scopes, " "), "exp": time.Now().Add(time.Minute).Unix()})
	}
	approval := &toolfleetv1.Approval{Approver: "ana@example.com"}
	rows := []struct {
		name      string
		key       string
		bearer    string
		onBehalf  []string // subject, scopes
		approval  *toolfleetv1.Approval
		code      codes.Code
		user, via string
	}{
		{"no approval", "k.none", signed("bo", "tools:call", gateway.ScopeApprove), nil, nil, codes.FailedPrecondition, "", ""},
		{"approval without the approve scope", "k.noscope", signed("bo", "tools:call"), nil, approval, codes.FailedPrecondition, "", ""},
		{"approval from an approver", "k.ok", signed("bo", "tools:call", gateway.ScopeApprove), nil, approval, codes.OK, "bo", ""},
		{"delegation without the delegate scope", "k.nodelegate", signed("orch", "tools:call", gateway.ScopeApprove),
			[]string{"ana", "tools:call"}, approval, codes.PermissionDenied, "", ""},
		{"delegated principal lacks the call scope", "k.noscope2", signed("orch", gateway.ScopeDelegate, gateway.ScopeApprove, "tools:call"),
			[]string{"ana", "profile"}, approval, codes.PermissionDenied, "", ""},
		{"delegated and approved", "k.delegated", signed("orch", gateway.ScopeDelegate, gateway.ScopeApprove),
			[]string{"ana", "tools:call"}, approval, codes.OK, "ana", "orch"},
	}
	for _, r := range rows {
		if _, err := bucket.PutString(t.Context(), r.key, "v"); err != nil {
			t.Fatal(err)
		}
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+r.bearer)
		if r.onBehalf != nil {
			ctx = metadata.AppendToOutgoingContext(ctx, gateway.HeaderOnBehalfOf, r.onBehalf[0], gateway.HeaderOnBehalfScopes, r.onBehalf[1])
		}
		resp, err := gc.CallTool(ctx, &toolfleetv1.CallToolRequest{CallId: r.key, ToolId: "KV.Delete",
			Input: mustStruct(t, map[string]any{"key": r.key}), Approval: r.approval})
		if status.Code(err) != r.code {
			t.Fatalf("%s: err = %v, want %v", r.name, err, r.code)
		}
		_, getErr := bucket.Get(t.Context(), r.key)
		if deleted := getErr != nil; deleted != (r.code == codes.OK) {
			t.Fatalf("%s: deleted = %v (%v), want %v", r.name, deleted, getErr, r.code == codes.OK)
		}
		if r.code == codes.OK && !resp.GetSuccess() {
			t.Fatalf("%s: %v", r.name, resp)
		}
	}
	// Events of the two approved calls, in order: started, succeeded for each.
	byCall := map[string]*toolfleetv1.CallEvent{}
	for _, m := range streamEventsOn(t, natsURL, "toolfleet.events.call.KV.Delete.succeeded", 2) {
		var ev toolfleetv1.CallEvent
		if err := protojson.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		byCall[ev.GetCallId()] = &ev
	}
	for _, r := range rows {
		if r.code != codes.OK {
			continue
		}
		ev := byCall[r.key]
		if ev.GetApprover() != approval.GetApprover() || ev.GetApprovedAt() == nil || ev.GetUserId() != r.user || ev.GetVia() != r.via {
			t.Errorf("%s: event %v, want approver %s with a time, user %q via %q", r.name, ev, approval.GetApprover(), r.user, r.via)
		}
	}
}

// streamEventsOn waits for want events on subject in the call event stream.
func streamEventsOn(t *testing.T, url, subject string, want int) []*nats.Msg {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*nats.Msg
	waitFor(t, "events on "+subject, func() bool {
		msgs = nil
		s, err := js.Stream(t.Context(), gateway.DefaultEventStream)
		if err != nil {
			return false
		}
		for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
			m, err := s.GetMsg(t.Context(), seq)
			if err == nil && m.Subject == subject {
				msgs = append(msgs, &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header})
			}
		}
		return len(msgs) >= want
	})
	return msgs
}

// TestIdempotencyConflictOverHTTP: the same call_id with other input is 409 over
// OXP HTTP and runs nothing.
func TestIdempotencyConflictOverHTTP(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	calc, calcAddr, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calcAddr}})
	waitTool(t, g, "Calculator.Add")
	waitStore(t, g)
	bearer := token(t, "tools:call")
	post := func(a, b float64) int {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"request": map[string]any{"call_id": "step-1", "tool_id": "Calculator.Add", "input": map[string]any{"a": a, "b": b}}})
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+g.Addr()+"/tools/call", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(1, 2); code != http.StatusOK {
		t.Fatalf("first: %d", code)
	}
	before := calc.adds.Load()
	if code := post(50, 50); code != http.StatusConflict {
		t.Fatalf("other input: %d, want 409", code)
	}
	if code := post(1, 2); code != http.StatusOK {
		t.Fatalf("repeat: %d, want 200", code)
	}
	if n := calc.adds.Load() - before; n != 0 {
		t.Fatalf("tool ran %d times, want 0", n)
	}
}
