package agentapi_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agent/agenttest"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

// testAuth accepts "Bearer <subject>:<scope>,<scope>".
func testAuth(_ context.Context, h http.Header) (agentapi.Caller, error) {
	tok, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok {
		return agentapi.Caller{}, errors.New("no bearer token")
	}
	sub, scopes, _ := strings.Cut(tok, ":")
	return agentapi.Caller{Subject: sub, Scopes: strings.Split(scopes, ",")}, nil
}

func as(token string) connect.Option { return connect.WithInterceptors(bearer(token)) }

// bearer sets the Authorization header of every request.
type bearer string

func (s bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
		r.Header().Set("Authorization", "Bearer "+string(s))
		return next(ctx, r)
	}
}

func (s bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		c := next(ctx, spec)
		c.RequestHeader().Set("Authorization", "Bearer "+string(s))
		return c
	}
}
func (s bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func TestAgentService(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	fleet := e2e.Start(t, e2e.Options{NATSURL: stack.NATS.URL()})
	models := agent.NewResolver()
	models.Register("demo", &agenttest.ByTurn{Turns: []llmtest.ScriptTurn{
		llmtest.CallTools("Let me add.", llm.CallPart("c1", "SchemaTest_Types", map[string]any{"s": "api"})),
		llmtest.SayText("The answer is 3."),
	}})
	o, err := runner.Start(t.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "api-test", NATSURL: stack.NATS.URL(), GatewayAddress: fleet.Addr, Models: models, MemoryStorage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Stop)
	_, h := o.AgentService(testAuth).Handler()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ana := toolfleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL, as("ana:runs:start,runs:read,runs:approve,runs:cancel"))
	bo := toolfleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL, as("bo:runs:start,runs:read,runs:approve"))
	reader := toolfleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL, as("ana:runs:read"))
	ctx := t.Context()

	start := &toolfleetv1.StartRunRequest{RunId: "api-run", Model: "scripted:demo", SystemPrompt: "Be brief.",
		Messages: []*toolfleetv1.Message{llm.User("what is 1+2?")}, Tools: []string{"SchemaTest.Types"}}
	t.Run("refusals", func(t *testing.T) {
		tests := []struct {
			name string
			call func() error
			want connect.Code
		}{
			{"start without runs:start", func() error { _, err := reader.StartRun(ctx, connect.NewRequest(start)); return err }, connect.CodePermissionDenied},
			{"bad model", func() error {
				_, err := ana.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{Model: "nope", Messages: start.Messages}))
				return err
			}, connect.CodeInvalidArgument},
			{"a model key sent to a URL it is not bound to", func() error {
				_, err := ana.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{Messages: start.Messages,
					ModelSpec: &toolfleetv1.ModelSpec{Provider: "openai-compatible", Name: "m", BaseUrl: "http://169.254.169.254/v1", KeyRef: "env:TOOLFLEET_MODEL_KEY_TEAM"}}))
				return err
			}, connect.CodePermissionDenied},
			{"no user message", func() error {
				_, err := ana.StartRun(ctx, connect.NewRequest(&toolfleetv1.StartRunRequest{Model: "scripted:demo"}))
				return err
			}, connect.CodeInvalidArgument},
			{"bad run id", func() error {
				_, err := ana.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "../x"}))
				return err
			}, connect.CodeInvalidArgument},
		}
		for _, tt := range tests {
			if err := tt.call(); connect.CodeOf(err) != tt.want {
				t.Errorf("%s: %v, want %s", tt.name, err, tt.want)
			}
		}
	})

	resp, err := ana.StartRun(ctx, connect.NewRequest(start))
	if err != nil || resp.Msg.GetRunId() != "api-run" {
		t.Fatalf("StartRun: %v %v", resp, err)
	}
	again, err := ana.StartRun(ctx, connect.NewRequest(start))
	if err != nil || again.Msg.GetRunId() != "api-run" {
		t.Fatalf("StartRun again (idempotent): %v %v", again, err)
	}
	if _, err := bo.StartRun(ctx, connect.NewRequest(start)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("another caller reusing the run id: %v, want AlreadyExists", err)
	}
	if _, err := bo.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "api-run"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("another caller reading the run: %v, want NotFound", err)
	}

	stream, err := ana.WatchRun(ctx, connect.NewRequest(&toolfleetv1.WatchRunRequest{RunId: "api-run", Deltas: true}))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var lastSeq uint64
	var turn2 strings.Builder
	for stream.Receive() {
		if d := stream.Msg().GetDelta(); d != nil {
			if d.GetTurn() == 2 && d.GetAttempt() == 1 {
				turn2.WriteString(d.GetText())
			}
			continue
		}
		ev := stream.Msg().GetEvent()
		kinds = append(kinds, ev.GetKind())
		lastSeq = ev.GetSeq()
		if ev.GetKind() == toolcall.EventApprovalRequested {
			if ev.GetCallId() != "api-run/1/0" {
				t.Fatalf("approval for %q", ev.GetCallId())
			}
			got, err := ana.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "api-run"}))
			if err != nil || got.Msg.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_WAITING_APPROVAL ||
				got.Msg.GetPendingApprovals()[0].GetArguments().GetFields()["s"].GetStringValue() != "api" {
				t.Fatalf("GetRun while waiting: %v %v", got, err)
			}
			if _, err := ana.DecideApproval(ctx, connect.NewRequest(&toolfleetv1.DecideApprovalRequest{RunId: "api-run", CallId: "api-run/1/9", Approved: true})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("deciding an unknown call: %v, want FailedPrecondition", err)
			}
			if _, err := ana.DecideApproval(ctx, connect.NewRequest(&toolfleetv1.DecideApprovalRequest{RunId: "api-run", CallId: ev.GetCallId(), Approved: true})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := "started turn approval.requested approval.decided tool_call tool_result turn completed"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	if turn2.String() != "The answer is 3." {
		t.Fatalf("streamed text of turn 2 %q, want the whole answer", turn2.String())
	}
	got, err := ana.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: "api-run"}))
	if err != nil || got.Msg.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED || got.Msg.GetAnswer() != "The answer is 3." {
		t.Fatalf("GetRun: %v %v", got, err)
	}
	if lastSeq == 0 {
		t.Fatal("events carry no sequence")
	}
	list, err := ana.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Msg.GetRuns()) != 1 || list.Msg.GetRuns()[0].GetRunId() != "api-run" {
		t.Fatalf("ListRuns: %v", list.Msg.GetRuns())
	}
	if other, err := bo.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{})); err != nil || len(other.Msg.GetRuns()) != 0 {
		t.Fatalf("another caller's ListRuns: %v %v, want none", other, err)
	}

	// The same service to a grpc-go client: its handler speaks gRPC (the
	// gateway hands it the gRPC calls of its own connections too).
	late := &agentapi.Late{}
	cc, err := grpc.NewClient(h2cServer(t, late), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	gc := toolfleetv1.NewAgentServiceClient(cc)
	anaCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer ana:runs:read")
	if _, err := gc.GetRun(anaCtx, &toolfleetv1.GetRunRequest{RunId: "api-run"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("before Set: %v, want Unavailable", err)
	}
	late.Set(o.AgentService(testAuth))
	if got, err := gc.GetRun(anaCtx, &toolfleetv1.GetRunRequest{RunId: "api-run"}); err != nil || got.GetStatus() != toolfleetv1.RunStatus_RUN_STATUS_COMPLETED {
		t.Fatalf("gRPC GetRun: %v %v", got, err)
	}
	boCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer bo:runs:read")
	if _, err := gc.GetRun(boCtx, &toolfleetv1.GetRunRequest{RunId: "api-run"}); status.Code(err) != codes.NotFound {
		t.Fatalf("gRPC GetRun of another caller's run: %v, want NotFound", err)
	}
	ws, err := gc.WatchRun(anaCtx, &toolfleetv1.WatchRunRequest{RunId: "api-run", AfterSeq: lastSeq - 1})
	if err != nil {
		t.Fatal(err)
	}
	var resumed []string
	for {
		m, err := ws.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		resumed = append(resumed, m.GetEvent().GetKind())
	}
	if len(resumed) != 1 || resumed[0] != toolcall.EventCompleted {
		t.Fatalf("resumed after seq %d: %v, want only the completed event", lastSeq-1, resumed)
	}

	// Newer runs of another caller must not make ana's pages come back empty: a page is
	// filled past rows she may not see.
	for _, id := range []string{"bo-1", "bo-2", "bo-3"} {
		r := proto.Clone(start).(*toolfleetv1.StartRunRequest)
		r.RunId = id
		if _, err := bo.StartRun(ctx, connect.NewRequest(r)); err != nil {
			t.Fatal(err)
		}
	}
	// Temporal's visibility store is eventually consistent: wait until all are listed.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		all, err := bo.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 100}))
		if err != nil {
			t.Fatal(err)
		}
		if len(all.Msg.GetRuns()) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bo's runs listed: %v, want 3", all.Msg.GetRuns())
		}
	}
	for _, tc := range []struct {
		client toolfleetv1connect.AgentServiceClient
		want   string
	}{{ana, "api-run"}, {bo, "bo-1 bo-2 bo-3"}} {
		var ids []string
		var token []byte
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatalf("listing %s never ends", tc.want)
			}
			page, err := tc.client.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 1, PageToken: token}))
			if err != nil {
				t.Fatal(err)
			}
			if pages == 0 && len(page.Msg.GetRuns()) != 1 {
				t.Fatalf("first page of size 1 holds %d runs, want 1", len(page.Msg.GetRuns()))
			}
			for _, r := range page.Msg.GetRuns() {
				ids = append(ids, r.GetRunId())
			}
			if token = page.Msg.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		slices.Sort(ids)
		if got := strings.Join(ids, " "); got != tc.want {
			t.Errorf("pages of one hold %q, want %q", got, tc.want)
		}
	}
}

// h2cServer serves h over HTTP/1.1 and cleartext HTTP/2 (as the gateway's
// port does) and returns its address.
func h2cServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
