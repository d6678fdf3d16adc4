package program

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Register adds ProgramWorkflow and a's activities, under their readable
// names, to w. Each activity method is named like its registered name: the
// SDK maps a method's Go name to the registered one for every workflow of the
// worker, so a program method called CallTool would take over the agent
// runs' "CallTool" activity on a shared worker.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflow(w)
	w.RegisterActivityWithOptions(a.ResolveProgramTools, activity.RegisterOptions{Name: ResolveToolsActivity})
	w.RegisterActivityWithOptions(a.ProgramCallTool, activity.RegisterOptions{Name: CallToolActivity})
	w.RegisterActivityWithOptions(a.PublishProgramEvent, activity.RegisterOptions{Name: PublishEventActivity})
}

// RegisterWorkflow adds ProgramWorkflow under its name to w (a worker or a
// replayer).
func RegisterWorkflow(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(ProgramWorkflow, workflow.RegisterOptions{Name: WorkflowName})
}
