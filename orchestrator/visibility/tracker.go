package visibility

import (
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ChangeID is the workflow.GetVersion change id of the upserts.
const ChangeID = "visibility"

// Tracker keeps a workflow's Status and Tools attributes in step with what
// it does. It is workflow code: it upserts only when a value changes, and
// only when the start set the attributes (enabled, from the workflow's
// input, so replay decides the same) and the workflow's history is of this
// version or later.
type Tracker struct {
	kind    string
	enabled bool
	checked bool
	status  string
	tools   []string
}

// NewTracker is the tracker of a workflow of kind (KindRun or KindProgram)
// whose start set the attributes when enabled. An execution that continues
// as new inherits its attributes, so the tools recorded so far are read
// from them.
func NewTracker(ctx workflow.Context, kind string, enabled bool) *Tracker {
	t := &Tracker{kind: kind, enabled: enabled, status: StatusRunning}
	if enabled {
		if tools, ok := workflow.GetTypedSearchAttributes(ctx).GetKeywordList(Tools); ok {
			t.tools = tools
		}
	}
	return t
}

// Event moves Status on with a run event of kind (the toolcall.Event*
// names): a completed run is "answered" (it may take a follow-up message),
// a completed program is "completed".
func (t *Tracker) Event(ctx workflow.Context, kind string) {
	status := ""
	switch kind {
	case "started", "turn", "message", "tool_result", "approval.decided", "input.answered":
		status = StatusRunning
	case "approval.requested":
		status = StatusWaiting
	case "input.requested":
		status = StatusWaitingInput
	case "completed":
		status = StatusDone
		if t.kind == KindRun {
			status = StatusAnswered
		}
	case "failed":
		status = StatusFailed
	case "cancelled":
		status = StatusCanceled
	default:
		return
	}
	if status == t.status || !t.on(ctx) {
		return
	}
	t.status = status
	t.upsert(ctx, Status.ValueSet(status))
}

// Called adds a tool (an id, "Toolkit.Tool@1.2.0" or "Toolkit.Tool") to Tools.
func (t *Tracker) Called(ctx workflow.Context, toolID string) {
	name, _, _ := strings.Cut(toolID, "@")
	tools, added := AddTool(t.tools, name)
	if !added || !t.on(ctx) {
		return
	}
	t.tools = tools
	t.upsert(ctx, Tools.ValueSet(tools))
}

// on reports whether upserts are made, asking GetVersion once.
func (t *Tracker) on(ctx workflow.Context) bool {
	if !t.enabled {
		return false
	}
	if !t.checked {
		t.checked = true
		t.enabled = workflow.GetVersion(ctx, ChangeID, workflow.DefaultVersion, 1) >= 1
	}
	return t.enabled
}

func (t *Tracker) upsert(ctx workflow.Context, u temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, u); err != nil {
		workflow.GetLogger(ctx).Warn("search attributes not updated", "error", err)
	}
}
