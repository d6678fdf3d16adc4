package devstack_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
)

// waitForGo blocks until it receives a "go" signal, then returns its payload.
func waitForGo(ctx workflow.Context) (string, error) {
	var v string
	workflow.GetSignalChannel(ctx, "go").Receive(ctx, &v)
	return v, nil
}

func TestStackRunsWorkflowsAndListsNamespaces(t *testing.T) {
	t.Parallel()
	s := devstacktest.Start(t)
	c := devstacktest.Client(t, s)

	resp, err := c.WorkflowService().ListNamespaces(t.Context(), &workflowservice.ListNamespacesRequest{})
	if err != nil {
		t.Fatalf("list namespaces: %v", err)
	}
	var names []string
	for _, ns := range resp.GetNamespaces() {
		names = append(names, ns.GetNamespaceInfo().GetName())
	}
	if !slices.Contains(names, "default") {
		t.Fatalf("namespaces %v lack %q", names, "default")
	}

	devstacktest.StartWorker(t, c, "q", waitForGo)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "q"}, devstacktest.OneActivity, "hi")
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil {
		t.Fatalf("result: %v", err)
	}
	if out != "HI" {
		t.Fatalf("result = %q, want HI", out)
	}
}

// TestDataSurvivesRestart stops a stack with a JetStream message and a running
// workflow on disk, starts a new one on the same folder, and finishes the workflow.
func TestDataSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	first, err := devstack.Start(ctx, devstack.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("first start: %v", err)
	}
	nc, err := nats.Connect(first.NATS.URL())
	if err != nil {
		first.Stop()
		t.Fatalf("connect: %v", err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "keep.a", []byte("survivor")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	nc.Close()

	c1, err := client.Dial(client.Options{HostPort: first.Temporal.Address(), Logger: nopLogger{}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	run, err := c1.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "survivor", TaskQueue: "q"}, waitForGo)
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	c1.Close()
	first.Stop()

	second := devstacktest.Start(t, devstack.Config{DataDir: dir})
	nc2, err := nats.Connect(second.NATS.URL())
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	stream, err := js2.Stream(ctx, "KEEP")
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	msg, err := stream.GetMsg(ctx, 1)
	if err != nil || string(msg.Data) != "survivor" {
		t.Fatalf("message after restart = %v, %v; want survivor", msg, err)
	}

	c2 := devstacktest.Client(t, second)
	desc, err := c2.DescribeWorkflowExecution(ctx, "survivor", run.GetRunID())
	if err != nil {
		t.Fatalf("describe after restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("status after restart = %v, want running", st)
	}
	devstacktest.StartWorker(t, c2, "q", waitForGo)
	if err := c2.SignalWorkflow(ctx, "survivor", "", "go", "resumed"); err != nil {
		t.Fatalf("signal: %v", err)
	}
	var out string
	if err := c2.GetWorkflow(ctx, "survivor", "").Get(ctx, &out); err != nil || out != "resumed" {
		t.Fatalf("result after restart = %q, %v; want resumed", out, err)
	}
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Info(string, ...any)  {}
func (nopLogger) Warn(string, ...any)  {}
func (nopLogger) Error(string, ...any) {}
