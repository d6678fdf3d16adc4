package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// The store shares (issue 32, "a hostile tenant cannot hurt another"): mallory
// fills what she may of a store; alice still gets her entries kept, and
// mallory is refused with her own figures only. Each test fails with the
// shares off (gateway.NoStoreShare): mallory then fills the store for both.

// shareOff is set to run these tests without the shares (and see them fail):
// TOOLFLEET_TEST_SHARES_OFF=1.
func shareOff(t *testing.T) float64 {
	t.Helper()
	if v, _ := strconv.ParseBool(os.Getenv("TOOLFLEET_TEST_SHARES_OFF")); v {
		return gateway.NoStoreShare
	}
	return 0
}

// tenantCtx is a caller context with a token for subject (call, approve, and
// SchemaTest's scope).
func tenantCtx(t *testing.T, subject string) context.Context {
	t.Helper()
	bearer := signHS(t, jwt.MapClaims{"sub": subject, "scope": strings.Join(typesScopes, " "), "exp": time.Now().Add(10 * time.Minute).Unix()})
	return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+bearer)
}

// retryDelay is the RetryInfo delay of a refusal (0: none).
func retryDelay(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// checkOwnFigures: a share refusal is RESOURCE_EXHAUSTED with a retry delay,
// names the caller's own share, and no other principal.
func checkOwnFigures(t *testing.T, err error, share string, others ...string) {
	t.Helper()
	msg := status.Convert(err).Message()
	if codeOf(err) != codes.ResourceExhausted || retryDelay(err) <= 0 || !strings.Contains(msg, "this caller has used its share") || !strings.Contains(msg, share) {
		t.Fatalf("refusal %v (retry %v): want RESOURCE_EXHAUSTED with a retry delay naming the caller's share (%s)", err, retryDelay(err), share)
	}
	for _, o := range others {
		if strings.Contains(msg, o) {
			t.Fatalf("refusal %q names %s", msg, o)
		}
	}
}

// TestStoreShareCalls: mallory keeps read-only results under call_ids until
// her share of toolfleet_calls is used; her side-effecting call with a
// call_id is then refused before it runs (her repeat of a kept call_id is
// still answered), while alice's side-effecting call with a call_id runs
// and is kept.
func TestStoreShareCalls(t *testing.T) {
	t.Parallel()
	share := shareOff(t)
	srv := natstest.Start(t)
	stAddr, _ := countingSchemaTestWorker(t, "")
	adder := startPlainCalculator(t, 2, withSideEffects())
	const bucket = 256 << 10 // an eighth: 32 KiB per principal
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{stAddr, adder.addr},
		Idempotency: idempotency.Config{BucketConfig: jsassets.BucketConfig{Bucket: "shared_calls", MaxBytes: bucket, MemoryStorage: true}}, Shares: gateway.SharesConfig{Fraction: share}})
	waitTool(t, g, "SchemaTest.Types")
	waitTool(t, g, "Calculator.Add@2")
	client := grpcClient(t, g.Addr())
	mallory, alice := tenantCtx(t, "mallory"), tenantCtx(t, "alice")
	add := func(ctx context.Context, callID string) (*toolfleetv1.CallToolResponse, error) {
		return client.CallTool(ctx, &toolfleetv1.CallToolRequest{CallId: callID, ToolId: "Calculator.Add@2", Input: addInput(1, 2)})
	}
	waitFor(t, "the idempotency store", func() bool {
		r, err := add(mallory, "m-first")
		return err == nil && r.GetSuccess()
	})

	// Each kept Types result is ~3 KB: the bucket holds ~80 of them.
	echo := mustStruct(t, map[string]any{"s": bigString(3000)})
	var refusal error
	for i := range 400 {
		if _, err := client.CallTool(mallory, &toolfleetv1.CallToolRequest{CallId: "m-" + strconv.Itoa(i), ToolId: "SchemaTest.Types",
			Input: echo, Approval: testApproval}); err != nil {
			t.Fatalf("mallory's read-only call %d: %v (it runs, kept or not)", i, err)
		}
		if _, err := add(mallory, "m-add-"+strconv.Itoa(i)); err != nil {
			t.Logf("mallory refused after %d kept results: %v", i+1, err)
			refusal = err
			break
		}
	}
	if refusal == nil {
		t.Fatal("mallory was never refused")
	}
	ran := adder.adds.Load()
	r, err := add(alice, "a-1")
	if err != nil || !r.GetSuccess() {
		t.Fatalf("alice's side-effecting call with a call_id, after mallory filled what she could: %v %v; want it run and kept", r, err)
	}
	if again, err := add(alice, "a-1"); err != nil || adder.adds.Load() != ran+1 || again.GetCallId() != "a-1" {
		t.Fatalf("alice's repeat: %v %v, ran %d times; want it answered from the store", again, err, adder.adds.Load()-ran)
	}
	checkOwnFigures(t, refusal, strconv.Itoa(bucket/8)+" bytes written per 24h0m0s", "alice")
	if _, err := add(mallory, "m-first"); err != nil {
		t.Fatalf("mallory's repeat of a kept call_id: %v; want it answered from the store", err)
	}
	if _, err := add(mallory, "m-new"); codeOf(err) != codes.ResourceExhausted || adder.adds.Load() != ran+1 {
		t.Fatalf("mallory's new call_id: %v; want RESOURCE_EXHAUSTED before it runs", err)
	}
}

// TestStoreShareResults: mallory keeps results behind handles until her
// share of toolfleet_results is used; her next call allowing a handle is
// refused before it runs, while alice still gets a handle.
func TestStoreShareResults(t *testing.T) {
	t.Parallel()
	share := shareOff(t)
	srv := natstest.Start(t)
	stAddr, _ := countingSchemaTestWorker(t, "")
	const store = 512 << 10 // an eighth: 64 KiB per principal
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{stAddr},
		Results: results.Config{BucketConfig: jsassets.BucketConfig{MaxBytes: store, MemoryStorage: true}, MaxResultBytes: 64 << 10}, Shares: gateway.SharesConfig{Fraction: share}})
	waitTool(t, g, "SchemaTest.Types")
	mallory, alice := newHandleCaller(t, g, "mallory"), newHandleCaller(t, g, "alice")
	const n = 20 << 10 // over the tool's 4096-byte limit: kept behind a handle
	waitHandle(t, mallory, n)
	var refusal error
	for i := range 100 {
		r, err := mallory.echo("", n, true)
		if err != nil || r.GetResultHandle() == nil {
			t.Logf("mallory refused after %d more handles: %v %v", i, r.GetError().GetMessage(), err)
		}
		if err != nil {
			refusal = err
			break
		}
		if r.GetResultHandle() == nil {
			refusal = errors.New(r.GetError().GetMessage()) // the store is full (shares off)
			break
		}
	}
	if refusal == nil {
		t.Fatal("mallory was never refused")
	}
	r, err := alice.echo("", n, true)
	if err != nil || r.GetResultHandle() == nil {
		t.Fatalf("alice's call after mallory filled what she could: %v %v; want a handle", r, err)
	}
	if b, err := alice.fetch(r.GetResultHandle().GetId()); err != nil || echoed(t, b) != bigString(n) {
		t.Fatalf("alice's fetch: %v", err)
	}
	checkOwnFigures(t, refusal, strconv.Itoa(store/8)+" bytes written per 1h0m0s", "alice")
	if !strings.Contains(refusal.Error(), "allow_result_handle") {
		t.Fatalf("refusal %v: want it to say what else the caller may do", refusal)
	}
}

// TestStoreShareEvents: mallory's flood of calls fills her share of the
// event stream, and her events past it are not stored, so alice's events
// stay in a stream that drops its oldest when full.
func TestStoreShareEvents(t *testing.T) {
	t.Parallel()
	share := shareOff(t)
	srv := natstest.Start(t)
	_, calcAddr, _ := calculatorWorker(t, "")
	const stream = 64 << 10 // an eighth over 7 days: ~1.2 KiB a day per principal
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calcAddr}, Shares: gateway.SharesConfig{Fraction: share},
		Assets: jsassets.Config{Overrides: gateway.DefaultEventStream + ".max-bytes=64KiB," + gateway.DefaultEventStream + ".storage=memory"}})
	waitTool(t, g, "Calculator.Add@1")
	client := grpcClient(t, g.Addr())
	mallory, alice := tenantCtx(t, "mallory"), tenantCtx(t, "alice")
	call := func(ctx context.Context, callID string) {
		t.Helper()
		if _, err := client.CallTool(ctx, &toolfleetv1.CallToolRequest{CallId: callID, ToolId: "Calculator.Add@1", Input: addInput(1, 2)}); err != nil {
			t.Fatalf("call %s: %v", callID, err)
		}
	}

	nc, err := natsgo.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// callIDs reads the call_ids of the events the stream holds.
	callIDs := func() map[string]int {
		s, err := js.Stream(t.Context(), gateway.DefaultEventStream)
		if err != nil {
			return nil
		}
		info, err := s.Info(t.Context())
		if err != nil || info.State.Msgs == 0 {
			return nil
		}
		out := map[string]int{}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(t.Context(), seq)
			if err != nil {
				continue // dropped in between
			}
			var ev struct {
				CallID string `json:"callId"`
			}
			if json.Unmarshal(m.Data, &ev) == nil {
				out[ev.CallID]++
			}
		}
		return out
	}
	call(alice, "alice-before")
	waitFor(t, "alice's first event", func() bool { return callIDs()["alice-before"] > 0 })
	// ~600 bytes an event: 300 of them are nearly three times the stream.
	for i := range 300 {
		call(mallory, "mallory-"+strconv.Itoa(i))
	}
	// The publisher keeps the order of the calls: once alice's second event
	// is in, every one of mallory's was stored or refused.
	call(alice, "alice-after")
	waitFor(t, "alice's second event", func() bool { return callIDs()["alice-after"] > 0 })
	held := callIDs()
	if held["alice-before"] == 0 {
		t.Fatalf("alice's first event is gone from the stream after mallory's flood (%d events held)", len(held))
	}
	n := 0
	for id := range held {
		if strings.HasPrefix(id, "mallory-") {
			n++
		}
	}
	t.Logf("the stream holds %d events, %d of them mallory's", len(held), n)
	if n == 0 || n > 20 {
		t.Fatalf("the stream holds %d of mallory's 300 events; want a few (her share: about 1.2 KiB)", n)
	}
}

func TestParseStoreShare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want float64
		bad  bool
	}{
		{"", 0, false},
		{"none", gateway.NoStoreShare, false},
		{"1/8", 0.125, false},
		{"0.25", 0.25, false},
		{"12.5%", 0.125, false},
		{"1", 1, false},
		{"0", 0, true},
		{"2/1", 0, true},
		{"1/0", 0, true},
		{"-0.1", 0, true},
		{"lots", 0, true},
	} {
		got, err := gateway.ParseStoreShare(c.in)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("ParseStoreShare(%q) = %v, %v; want %v (error: %v)", c.in, got, err, c.want, c.bad)
		}
	}
}
