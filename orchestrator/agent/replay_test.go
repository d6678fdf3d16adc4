package agent_test

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolfleet/toolfleet/orchestrator/agent"
)

// TestReplay replays histories recorded from real runs (regenerate them with
// TOOLFLEET_RECORD_HISTORIES=1 go test -run TestRuns): a change to workflow
// code that would break running workflows fails here. Guard such a change
// with workflow.GetVersion and keep the old histories.
func TestReplay(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("found %d recorded histories in testdata/histories, want at least 3", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(agent.AgentRunWorkflow, workflow.RegisterOptions{Name: agent.WorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
