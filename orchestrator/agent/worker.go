package agent

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Register registers AgentRunWorkflow and a's activities on w under their
// readable names (what the Temporal UI and CLI show).
func Register(w worker.Registry, a *Activities) {
	w.RegisterWorkflowWithOptions(AgentRunWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(a.PrepareRun, activity.RegisterOptions{Name: PrepareRunActivity})
	w.RegisterActivityWithOptions(a.ModelTurn, activity.RegisterOptions{Name: ModelTurnActivity})
	w.RegisterActivityWithOptions(a.CallTool, activity.RegisterOptions{Name: CallToolActivity})
	w.RegisterActivityWithOptions(a.AppendInput, activity.RegisterOptions{Name: AppendInputActivity})
	w.RegisterActivityWithOptions(a.PublishEvent, activity.RegisterOptions{Name: PublishEventActivity})
	w.RegisterActivityWithOptions(a.ReadProgramCall, activity.RegisterOptions{Name: ReadProgramCallActivity})
}
