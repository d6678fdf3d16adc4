package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
	"github.com/toolfleet/toolfleet/workers/calculator/calculator"
)

// The least NATS permissions of a gateway and a worker with the default stream
// and bucket names. docs/operations.md lists the same; keep them in step.
var (
	gatewayPublish = []string{
		"toolfleet.registry.discover",
		"toolfleet.journal.alive.*",
		"toolfleet.events.call.>",
		"$JS.API.INFO",
		"$JS.API.STREAM.INFO.TOOLFLEET_CALL_EVENTS",
		"$JS.API.STREAM.CREATE.TOOLFLEET_CALL_EVENTS",
		"$KV.toolfleet_calls.>",
		"$JS.API.STREAM.INFO.KV_toolfleet_calls",
		"$JS.API.STREAM.CREATE.KV_toolfleet_calls",
		"$JS.API.STREAM.UPDATE.KV_toolfleet_calls",
		"$JS.API.DIRECT.GET.KV_toolfleet_calls.>",
		"$JS.API.CONSUMER.CREATE.KV_toolfleet_calls.>",
		"$JS.API.CONSUMER.DELETE.KV_toolfleet_calls.>",
		"$JS.FC.KV_toolfleet_calls.>",
		"$O.toolfleet_results.>",
		"$JS.API.STREAM.INFO.OBJ_toolfleet_results",
		"$JS.API.STREAM.CREATE.OBJ_toolfleet_results",
		"$JS.API.STREAM.UPDATE.OBJ_toolfleet_results",
		"$JS.API.DIRECT.GET.OBJ_toolfleet_results.>",
		"$JS.API.CONSUMER.CREATE.OBJ_toolfleet_results.>",
		"$JS.API.CONSUMER.DELETE.OBJ_toolfleet_results.>",
		"$JS.API.CONSUMER.MSG.NEXT.OBJ_toolfleet_results.>", // pulling a result's chunks
		"$KV.toolfleet_input_key.>",
		"$JS.API.STREAM.INFO.KV_toolfleet_input_key",
		"$JS.API.STREAM.CREATE.KV_toolfleet_input_key",
		"$JS.API.DIRECT.GET.KV_toolfleet_input_key.>",
		// The store shares' byte counters (on unless --store-share none),
		// and the operator's rate limits and quotas (--limits-file).
		"$KV.toolfleet_limits.>",
		"$JS.API.STREAM.INFO.KV_toolfleet_limits",
		"$JS.API.STREAM.CREATE.KV_toolfleet_limits",
		"$JS.API.STREAM.UPDATE.KV_toolfleet_limits",
		"$JS.API.DIRECT.GET.KV_toolfleet_limits.>",
	}
	gatewaySubscribe = []string{"toolfleet.registry.announce", "_INBOX.>"}
	// A worker also records the calls it is handed in the call journal, the
	// idempotency bucket's entries of its own toolkits, and reads the replies.
	workerPublish   = []string{"toolfleet.registry.announce", "$KV.toolfleet_calls.Calculator.>", "$KV.toolfleet_calls.SchemaTest.>"}
	workerSubscribe = []string{"toolfleet.registry.discover", "_INBOX.>", "toolfleet.journal.alive.*"}
)

func permissions(pub, sub []string) *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// TestLeastNATSPermissions: a gateway and a worker with only the permissions
// docs/operations.md lists find each other, run a call, answer its repeat from
// the idempotency bucket and store the call's events; a user without the
// announce permission is refused by NATS.
func TestLeastNATSPermissions(t *testing.T) {
	t.Parallel()
	// The server logs every permission violation; none may come from the gateway
	// or the worker (a missing permission can hide behind a fallback, such as
	// running a call without idempotency).
	serverLogs := &lockedBuffer{}
	t.Cleanup(func() {
		for line := range strings.SplitSeq(serverLogs.String(), "\n") {
			if strings.Contains(line, "Violation") && !strings.Contains(line, "mute") {
				t.Errorf("NATS refused the gateway or the worker: %s", line)
			}
		}
	})
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(serverLogs, nil)), Configure: func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "gateway", Password: "g", Permissions: permissions(gatewayPublish, gatewaySubscribe)},
			{Username: "worker", Password: "w", Permissions: permissions(workerPublish, workerSubscribe)},
			{Username: "mute", Password: "m", Permissions: permissions([]string{"nothing"}, workerSubscribe)},
			{Username: "admin", Password: "a"},
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)

	c := &countingCalculator{Service: calculator.New()}
	_, _ = tooltest.Start(t, tool.Config{Name: "calc", NATSURL: srv.URL(), NATS: natsconn.Options{User: "worker", Password: "w"},
		AnnounceInterval: 100 * time.Millisecond}, func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, c) })

	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), NATS: natsconn.Options{User: "gateway", Password: "g"},
		Auth: gateway.AuthConfig{Disabled: true}})
	waitTool(t, g, "Calculator.Add@1.0.0")

	// The idempotency bucket works: a repeat is answered without running the tool.
	req := &toolfleetv1.CallToolRequest{CallId: "perm-1", ToolId: "Calculator.Add@1.0.0", Input: addInput(1, 2)}
	waitFor(t, "the idempotency bucket", func() bool {
		before := c.adds.Load()
		r1, err1 := g.Call(t.Context(), anon(), req)
		r2, err2 := g.Call(t.Context(), anon(), req)
		req.CallId += "x"
		return err1 == nil && err2 == nil && r1.GetSuccess() && r2.GetSuccess() && c.adds.Load() == before+1
	})

	// A repeat of a call still running waits for it (a watch on the bucket) and
	// gets its result instead of running the tool again.
	slow := &toolfleetv1.CallToolRequest{CallId: "perm-slow", ToolId: "Calculator.Add@1.0.0", Input: addInput(slowA, 1)}
	before := c.adds.Load()
	first := make(chan error, 1)
	go func() {
		_, err := g.Call(context.WithoutCancel(t.Context()), anon(), slow)
		first <- err
	}()
	waitFor(t, "the slow call to start", func() bool { return c.adds.Load() == before+1 })
	r, err := g.Call(t.Context(), anon(), slow)
	if err != nil || r.GetValue().GetStructValue().GetFields()["result"].GetNumberValue() != slowA+1 {
		t.Fatalf("repeat of a running call: %v %v", r, err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := c.adds.Load() - before; n != 1 {
		t.Fatalf("the tool ran %d times for one call_id", n)
	}

	// A result over the tool's limit is kept behind a handle and fetched.
	_, _ = tooltest.Start(t, tool.Config{Name: "schematest", NATSURL: srv.URL(), NATS: natsconn.Options{User: "worker", Password: "w"},
		AnnounceInterval: 100 * time.Millisecond}, func(w *tool.Worker) { schematestv1.RegisterSchemaTestServiceServer(w, &schemaTest{}) })
	waitTool(t, g, "SchemaTest.Types")
	big := strings.Repeat("x", 200<<10)
	hr, err := g.Call(t.Context(), anon(), &toolfleetv1.CallToolRequest{ToolId: "SchemaTest.Types", Approval: testApproval,
		AllowResultHandle: true, Input: mustStruct(t, map[string]any{"s": big})})
	if err != nil || hr.GetResultHandle() == nil {
		t.Fatalf("call allowing a handle: %v %v", hr, err)
	}
	code, _, body := fetchOXP(t, g, hr.GetResultHandle().GetId(), "")
	if code != 200 || !strings.Contains(string(body), big) {
		t.Fatalf("GET /results: %d, %d bytes", code, len(body))
	}

	// A side-effecting call is recorded in the call journal by its worker, and
	// its repeat is answered from the record.
	sleep := &toolfleetv1.CallToolRequest{CallId: "perm-journal", ToolId: "SchemaTest.Sleep", Input: mustStruct(t, map[string]any{"duration": "0.01s"})}
	for range 2 {
		if r, err := g.Call(t.Context(), anon(), sleep); err != nil || !r.GetSuccess() {
			t.Fatalf("journaled call: %v %v", r, err)
		}
	}

	// Events reach the stream.
	admin, err := natsconn.Options{User: "admin", Password: "a"}.Connect(srv.URL(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "call events in the stream", func() bool {
		s, err := js.Stream(t.Context(), gateway.DefaultEventStream)
		if err != nil {
			return false
		}
		info, err := s.Info(t.Context())
		return err == nil && info.State.Msgs >= 2
	})

	// A user without the announce permission is refused by NATS.
	refused := make(chan error, 1)
	mute, err := natsconn.Options{User: "mute", Password: "m"}.Connect(srv.URL(), "mute",
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	if err := mute.Publish(tool.AnnounceSubject, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("publish without permission: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("NATS accepted an announcement from a user without permission")
	}
}

// TestLeastNATSPermissionsWithLimits: a gateway with rate, concurrency and
// byte limits and only the permissions docs/operations.md lists shares its
// limits through the bucket (LimitsShared) and refuses the call over the
// rate; NATS logs no permission violation.
func TestLeastNATSPermissionsWithLimits(t *testing.T) {
	t.Parallel()
	serverLogs := &lockedBuffer{}
	t.Cleanup(func() {
		for line := range strings.SplitSeq(serverLogs.String(), "\n") {
			if strings.Contains(line, "Violation") {
				t.Errorf("NATS refused the gateway: %s", line)
			}
		}
	})
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(serverLogs, nil)), Configure: func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "gateway", Password: "g", Permissions: permissions(gatewayPublish, gatewaySubscribe)},
			{Username: "worker", Password: "w", Permissions: permissions(workerPublish, workerSubscribe)},
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	_, _ = tooltest.Start(t, tool.Config{Name: "calc", NATSURL: srv.URL(), NATS: natsconn.Options{User: "worker", Password: "w"},
		AnnounceInterval: 100 * time.Millisecond}, func(w *tool.Worker) { calculatorv1.RegisterCalculatorServiceServer(w, calculator.New()) })

	// One call a minute after a burst of two: no refill while the test runs.
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), NATS: natsconn.Options{User: "gateway", Password: "g"},
		Auth: gateway.AuthConfig{Disabled: true}, Limits: ratelimit.Config{Rules: []ratelimit.Rule{
			{Name: "calc", Tool: "calculator.*", Rate: 1.0 / 60, Burst: 2, Concurrent: 4, Bytes: 1 << 20},
		}}})
	waitTool(t, g, "Calculator.Add@1.0.0")
	waitFor(t, "the limits bucket", g.LimitsShared)

	alice := &gateway.Principal{Subject: "alice", Scopes: []string{"tools:call"}}
	for i := range 2 {
		r, err := g.Call(t.Context(), alice, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)})
		if err != nil || !r.GetSuccess() {
			t.Fatalf("call %d within the burst: %v %v", i+1, r, err)
		}
	}
	_, err = g.Call(t.Context(), alice, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: addInput(1, 2)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the call over the rate: %v, want RESOURCE_EXHAUSTED", err)
	}
	if !g.LimitsShared() {
		t.Fatal("the limits stopped being shared: the gateway lost the bucket")
	}
}
