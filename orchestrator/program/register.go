package program

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Register adds ProgramWorkflow and a's activities, under their readable
// names, to w.
func Register(w worker.Registry, a *Activities) {
	w.RegisterWorkflowWithOptions(ProgramWorkflow, workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(a.ResolveTools, activity.RegisterOptions{Name: ResolveToolsActivity})
	w.RegisterActivityWithOptions(a.CallTool, activity.RegisterOptions{Name: CallToolActivity})
	w.RegisterActivityWithOptions(a.PublishEvent, activity.RegisterOptions{Name: PublishEventActivity})
}
