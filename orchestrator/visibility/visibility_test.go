package visibility_test

import (
	"context"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
)

// TestEnsureAndFind registers the attributes on a real (embedded) Temporal,
// twice, then starts a workflow with them, upserts its status and tools, and
// finds it by them with a visibility query, as an operator would.
func TestEnsureAndFind(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	c := devstacktest.Client(t, stack)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	k := &visibility.Checker{Client: c, Namespace: stack.Namespace(), Interval: time.Millisecond}
	if k.Available(ctx) {
		t.Fatal("Available before Ensure")
	}
	for range 2 { // idempotent
		if err := visibility.Ensure(ctx, c, stack.Namespace()); err != nil {
			t.Fatal(err)
		}
	}
	// The frontend learns the registration on its next namespace refresh.
	for !k.Available(ctx) {
		select {
		case <-ctx.Done():
			t.Fatal("not Available after Ensure")
		case <-time.After(100 * time.Millisecond):
		}
	}

	const queue = "visibility-test"
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		tools, _ := visibility.AddTool(nil, "KV.Increment")
		if err := workflow.UpsertTypedSearchAttributes(ctx, visibility.Status.ValueSet(visibility.StatusAnswered),
			visibility.Tools.ValueSet(tools)); err != nil {
			return err
		}
		return workflow.Await(ctx, func() bool { return false })
	}, workflow.RegisterOptions{Name: "VisibilityTest"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "vis-1", TaskQueue: queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(visibility.Principal.ValueSet("alice"),
			visibility.Kind.ValueSet(visibility.KindRun), visibility.Model.ValueSet("scripted:demo"),
			visibility.Status.ValueSet(visibility.StatusRunning))}, "VisibilityTest")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.TerminateWorkflow(context.Background(), "vis-1", "", "test over") }()
	query := "ToolfleetPrincipal = 'alice' AND ToolfleetStatus = 'answered' AND ToolfleetTools = 'KV.Increment' AND ToolfleetKind = 'run'"
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetExecutions()) == 1 && resp.GetExecutions()[0].GetExecution().GetWorkflowId() == "vis-1" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s found %d executions, want vis-1", query, len(resp.GetExecutions()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestEnsureRefusesAnotherType: an attribute of the same name with another
// type is an error naming it, not silently used.
func TestEnsureRefusesAnotherType(t *testing.T) {
	t.Parallel()
	stack := devstacktest.Start(t)
	c := devstacktest.Client(t, stack)
	ctx := t.Context()
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: stack.Namespace(), SearchAttributes: map[string]enumspb.IndexedValueType{
			"ToolfleetModel": enumspb.INDEXED_VALUE_TYPE_TEXT}}); err != nil {
		t.Fatal(err)
	}
	err := visibility.Ensure(ctx, c, stack.Namespace())
	if err == nil || !strings.Contains(err.Error(), "ToolfleetModel") {
		t.Fatalf("Ensure = %v, want an error naming ToolfleetModel", err)
	}
	if (&visibility.Checker{Client: c, Namespace: stack.Namespace()}).Available(ctx) {
		t.Error("Available with a mistyped attribute")
	}
}

func TestAddTool(t *testing.T) {
	t.Parallel()
	var tools []string
	for i := range visibility.MaxTools + 5 {
		tools, _ = visibility.AddTool(tools, "T.N"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	if len(tools) != visibility.MaxTools {
		t.Fatalf("%d tools, want the bound %d", len(tools), visibility.MaxTools)
	}
	if _, added := visibility.AddTool(tools[:1], tools[0]); added {
		t.Error("a duplicate was added")
	}
}
