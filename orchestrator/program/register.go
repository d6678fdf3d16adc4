package program

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Register adds ProgramWorkflow and a's activities, under their readable
// names, to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflow(w)
	w.RegisterActivityWithOptions(a.ResolveTools, activity.RegisterOptions{Name: ResolveToolsActivity})
	w.RegisterActivityWithOptions(a.CallTool, activity.RegisterOptions{Name: CallToolActivity})
	w.RegisterActivityWithOptions(a.PublishEvent, activity.RegisterOptions{Name: PublishEventActivity})
}

// RegisterWorkflow adds ProgramWorkflow under its name to w (a worker or a
// replayer).
func RegisterWorkflow(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(ProgramWorkflow, workflow.RegisterOptions{Name: WorkflowName})
}
