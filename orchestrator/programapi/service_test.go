package programapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	tclient "go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/e2e/programstack"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/orchestrator/programapi"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

func TestService(t *testing.T) {
	t.Parallel()
	s := programstack.Start(t, e2e.Options{}, program.Config{})
	c, svc := programstack.Serve(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	args, _ := structpb.NewStruct(map[string]any{"n": 4})
	run, err := c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{ProgramId: "svc-1", Wait: true, Args: args,
		Tools: []string{"Calculator.Add"}, Source: "print('adding')\nresult = Calculator_Add(a=args['n'], b=1).value['result']\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if m := run.Msg; m.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED || m.GetResult().GetNumberValue() != 5 || m.GetToolCalls() != 1 {
		t.Fatalf("RunProgram = %v, want COMPLETED with result 5 after 1 call", m)
	}

	t.Run("a syntax error fails at once with its position", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		res, err := c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{Source: "x = (1 +* 2)\n", Filename: "bad.star"}))
		if err != nil {
			t.Fatal(err)
		}
		pe := res.Msg.GetProgramError()
		if res.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_FAILED || pe.GetKind() != "syntax" || pe.GetPosition() != "bad.star:1:9" || pe.GetLine() != "x = (1 +* 2)" {
			t.Fatalf("RunProgram = %v, want a syntax error at bad.star:1:9", res.Msg)
		}
	})
	t.Run("another subject sees no program", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := c.GetProgram(ctx, programstack.As("mallory", &toolfleetv1.GetProgramRequest{ProgramId: "svc-1"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("GetProgram as another subject: %v, want NotFound", err)
		}
		res, err := c.RunProgram(ctx, programstack.As("mallory", &toolfleetv1.RunProgramRequest{ProgramId: "svc-1", Wait: true, Source: "result = 0\n"}))
		if connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Fatalf("RunProgram with another subject's id: %v %v, want AlreadyExists", res, err)
		}
		_, err = c.CancelProgram(ctx, programstack.As("mallory", &toolfleetv1.CancelProgramRequest{ProgramId: "svc-1"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("CancelProgram as another subject: %v, want NotFound", err)
		}
	})
	t.Run("max_memory_bytes reaches the program and has a ceiling", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		// 1 MiB of string fits the default budget (256 MiB), not one of 64 KiB.
		src := "x = 'a' * (1 << 20)\nresult = len(x)\n"
		res, err := c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{Wait: true, Source: src}))
		if err != nil || res.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED {
			t.Fatalf("RunProgram with the default budget = %v, %v, want COMPLETED", res, err)
		}
		res, err = c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{Wait: true, Source: src,
			Limits: &toolfleetv1.ProgramLimits{MaxMemoryBytes: 64 << 10}}))
		if err != nil {
			t.Fatal(err)
		}
		if pe := res.Msg.GetProgramError(); pe.GetKind() != "limit" || pe.GetLimit() != program.LimitMemory || !strings.Contains(pe.GetMessage(), "65536 bytes") {
			t.Fatalf("RunProgram with max_memory_bytes 64 KiB = %v, want a max_memory_bytes limit naming 65536 bytes", res.Msg)
		}
		_, err = c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{Source: src,
			Limits: &toolfleetv1.ProgramLimits{MaxMemoryBytes: program.MaxMemoryBytes + 1}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), program.LimitMemory) {
			t.Fatalf("RunProgram over the memory ceiling: %v, want InvalidArgument naming %s", err, program.LimitMemory)
		}
	})
	t.Run("triggers are listed", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		got, err := c.ListTriggers(ctx, programstack.As("alice", &toolfleetv1.ListTriggersRequest{}))
		if err != nil || len(got.Msg.GetTriggers()) != 1 || got.Msg.GetTriggers()[0].GetName() != "orders" {
			t.Fatalf("ListTriggers = %v, %v", got, err)
		}
		if _, err := c.ListTriggers(ctx, connect.NewRequest(&toolfleetv1.ListTriggersRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("ListTriggers without a caller: %v, want Unauthenticated", err)
		}
	})
	t.Run("a caller without programs:run cannot start", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := c.RunProgram(ctx, programstack.As("reader", &toolfleetv1.RunProgramRequest{Source: "result = 1\n"}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("RunProgram as reader: %v, want PermissionDenied", err)
		}
	})
	t.Run("over gRPC", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var late programapi.Late
		late.Set(svc)
		srv := httptest.NewUnstartedServer(&late) // its handler speaks gRPC over cleartext HTTP/2
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
		t.Cleanup(srv.Close)
		conn, err := grpc.NewClient(srv.Listener.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		gc := toolfleetv1.NewProgramServiceClient(conn)
		actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice")
		got, err := gc.GetProgram(actx, &toolfleetv1.GetProgramRequest{ProgramId: "svc-1"})
		if err != nil || got.GetResult().GetNumberValue() != 5 {
			t.Fatalf("GetProgram over gRPC = %v, %v", got, err)
		}
		if _, err := gc.GetProgram(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer mallory"),
			&toolfleetv1.GetProgramRequest{ProgramId: "svc-1"}); status.Code(err) != codes.NotFound {
			t.Fatalf("GetProgram over gRPC as another subject: %v, want NotFound", err)
		}
		st, err := gc.WatchProgram(actx, &toolfleetv1.WatchProgramRequest{ProgramId: "svc-1"})
		if err != nil {
			t.Fatal(err)
		}
		var last string
		for {
			m, err := st.Recv()
			if err != nil {
				break
			}
			last = m.GetEvent().GetKind()
		}
		if last != "completed" {
			t.Fatalf("the gRPC watch ended with %q, want completed", last)
		}
	})
	t.Run("the owner gets it", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		got, err := c.GetProgram(ctx, programstack.As("alice", &toolfleetv1.GetProgramRequest{ProgramId: "svc-1"}))
		if err != nil || !got.Msg.GetDone() || got.Msg.GetResult().GetNumberValue() != 5 {
			t.Fatalf("GetProgram = %v, %v", got, err)
		}
	})
	t.Run("watch replays the events to the end", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		st, err := c.WatchProgram(ctx, programstack.As("alice", &toolfleetv1.WatchProgramRequest{ProgramId: "svc-1"}))
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for st.Receive() {
			kinds = append(kinds, st.Msg().GetEvent().GetKind())
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		want := []string{"started", "tool_call", "tool_result", "print", "completed"}
		if !sameSet(kinds, want) || kinds[len(kinds)-1] != "completed" {
			t.Fatalf("events %q, want %q ending with completed", kinds, want)
		}
	})
	t.Run("cancel a program waiting for approval", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		res, err := c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{ProgramId: "svc-cancel",
			Tools: []string{"SchemaTest.Types"}, Source: "SchemaTest_Types(s='never-approved')\n"}))
		if err != nil || res.Msg.GetStatus() != toolfleetv1.ProgramStatus_PROGRAM_STATUS_RUNNING {
			t.Fatalf("RunProgram = %v, %v", res, err)
		}
		for {
			got, err := c.GetProgram(ctx, programstack.As("alice", &toolfleetv1.GetProgramRequest{ProgramId: "svc-cancel"}))
			if err != nil {
				t.Fatal(err)
			}
			if st := got.Msg.GetStatus(); st != toolfleetv1.ProgramStatus_PROGRAM_STATUS_RUNNING && st != toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_APPROVAL {
				t.Fatalf("the program ended before it waited for approval: %v", got.Msg)
			}
			if got.Msg.GetStatus() == toolfleetv1.ProgramStatus_PROGRAM_STATUS_WAITING_APPROVAL {
				if p := got.Msg.GetPendingApprovals(); len(p) != 1 || p[0].GetCallId() != "svc-cancel/1" {
					t.Fatalf("pending approvals %v", p)
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the program never waited for approval")
			case <-time.After(20 * time.Millisecond):
			}
		}
		if _, err := c.CancelProgram(ctx, programstack.As("alice", &toolfleetv1.CancelProgramRequest{ProgramId: "svc-cancel"})); err != nil {
			t.Fatal(err)
		}
		st, err := (&program.Programs{Temporal: s.Temporal}).Wait(ctx, "svc-cancel")
		if err != nil || st.Status != program.StatusCanceled {
			t.Fatalf("after cancel: %+v, %v; want CANCELED", st, err)
		}
		if n := len(s.Fleet.SchemaTest.TypesFor("never-approved")); n != 0 {
			t.Fatalf("the tool ran %d times, want 0", n)
		}
	})

	t.Run("impossible limits", func(t *testing.T) {
		// Negative limits and a 10,000-year deadline are refused at start,
		// naming the field (issue 32 §8).
		tenKYears := durationpb.New(0)
		tenKYears.Seconds = 10_000 * 365 * 24 * 3600
		for field, l := range map[string]*toolfleetv1.ProgramLimits{
			"max_steps":      {MaxSteps: -1},
			"max_tool_calls": {MaxToolCalls: -1},
			"deadline":       {Deadline: tenKYears},
			"approval_wait":  {ApprovalWait: durationpb.New(-time.Second)},
		} {
			_, err := c.RunProgram(ctx, programstack.As("alice", &toolfleetv1.RunProgramRequest{Source: "result = 1\n", Limits: l}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), field) {
				t.Errorf("RunProgram with %v: %v, want InvalidArgument naming %s", l, err, field)
			}
		}
	})

	t.Run("tool call spec", func(t *testing.T) {
		// A one-call program is that alone, of one exact tool.
		call := &toolfleetv1.ProgramToolCall{ToolId: "SchemaTest.Echo"}
		for name, req := range map[string]*toolfleetv1.RunProgramRequest{
			"with a source": {Source: "result = 1\n", ToolCall: call},
			"with tools":    {Tools: []string{"SchemaTest.*"}, ToolCall: call},
			"a glob":        {ToolCall: &toolfleetv1.ProgramToolCall{ToolId: "SchemaTest.*"}},
			"no tool":       {ToolCall: &toolfleetv1.ProgramToolCall{}},
		} {
			_, err := c.RunProgram(ctx, programstack.As("alice", req))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "tool_call") {
				t.Errorf("RunProgram %s: %v, want InvalidArgument naming tool_call", name, err)
			}
		}
	})

	t.Run("page tokens", func(t *testing.T) {
		// alice has programs enough for pages of one (visibility catches up).
		var token []byte
		for deadline := time.Now().Add(30 * time.Second); len(token) == 0; time.Sleep(100 * time.Millisecond) {
			got, err := c.ListPrograms(ctx, programstack.As("alice", &toolfleetv1.ListProgramsRequest{PageSize: 1}))
			if err != nil {
				t.Fatal(err)
			}
			token = got.Msg.GetNextPageToken()
			if time.Now().After(deadline) {
				t.Fatal("no page token for pages of one")
			}
		}
		if _, err := c.ListPrograms(ctx, programstack.As("alice", &toolfleetv1.ListProgramsRequest{PageSize: 1, PageToken: token})); err != nil {
			t.Errorf("the next page with the token given: %v", err)
		}
		// A made-up token, a garbled one and alice's in mallory's hands are
		// the caller's mistake, answered at once (issue 32 §7).
		garbled := append([]byte(nil), token...)
		garbled[len(garbled)-1] ^= 1
		for name, tc := range map[string]struct {
			who   string
			token []byte
		}{"made up": {"alice", []byte("made up")}, "garbled": {"alice", garbled}, "another caller's": {"mallory", token}} {
			start := time.Now()
			_, err := c.ListPrograms(ctx, programstack.As(tc.who, &toolfleetv1.ListProgramsRequest{PageSize: 1, PageToken: tc.token}))
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "start again without it") || time.Since(start) > 2*time.Second {
				t.Errorf("%s page token: %v after %s, want InvalidArgument at once", name, err, time.Since(start))
			}
		}
	})

	t.Run("a program Temporal timed out is not listed running", func(t *testing.T) {
		// A program whose workflow never ran a task (no worker polls its
		// queue) and Temporal timed out: its ToolfleetStatus still says running.
		if err := visibility.Ensure(ctx, s.Temporal, s.Namespace); err != nil {
			t.Fatal(err)
		}
		_, err := s.Temporal.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: "svc-timed-out", TaskQueue: "nobody-polls",
			WorkflowExecutionTimeout: time.Second, Memo: map[string]any{"owner": "tim"},
			TypedSearchAttributes: visibility.StartAttributes("tim", visibility.KindProgram, "")}, program.WorkflowName, program.Input{})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			got, err := c.ListPrograms(ctx, programstack.As("tim", &toolfleetv1.ListProgramsRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			if l := got.Msg.GetPrograms(); len(l) == 1 && l[0].GetState() == "TimedOut" {
				if l[0].GetStatus() != visibility.StatusFailed {
					t.Errorf("a timed-out program is listed %q, want %q", l[0].GetStatus(), visibility.StatusFailed)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the program is not listed timed out: %v", got.Msg)
			}
		}
	})
}

func sameSet(got, want []string) bool {
	seen := map[string]bool{}
	for _, k := range got {
		seen[k] = true
	}
	for _, k := range want {
		if !seen[k] {
			return false
		}
	}
	return len(seen) == len(want)
}
