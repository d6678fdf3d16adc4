package toolcall

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"
)

// Pending is a call waiting for a decision.
type Pending struct {
	CallID string `json:"call_id"`
	ToolID string `json:"tool_id"`
	// Turn, Index and CallSeq place an agent run's call in its transcript.
	Turn    int `json:"turn,omitempty"`
	Index   int `json:"index,omitempty"`
	CallSeq int `json:"call_seq,omitempty"`
	// InputJSON is a program's call input (a run's is in its transcript).
	InputJSON   string    `json:"input_json,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
}

// Decision is the argument of the approval Update.
type Decision struct {
	CallID   string `json:"call_id"`
	Approved bool   `json:"approved"`
	Approver string `json:"approver"`
	Reason   string `json:"reason,omitempty"`
}

// Gate is the approval gate of one workflow execution: the calls waiting for
// a decision and the decisions made. Workflow code: install it with
// [Gate.Register], then [Gate.Request] and [Gate.Wait] per call.
type Gate struct {
	pending   []Pending
	decisions map[string]Decision
}

// NewGate returns an empty gate.
func NewGate() *Gate { return &Gate{decisions: map[string]Decision{}} }

// Pending returns a copy of the calls waiting for a decision, in request order.
func (g *Gate) Pending() []Pending { return slices.Clone(g.pending) }

// Register installs the approval Update under each of names. Its validator
// refuses a decision without an approver, for a call that is not waiting,
// or for one already decided, so a refused Update leaves no trace in history.
func (g *Gate) Register(ctx workflow.Context, names ...string) error {
	for _, name := range names {
		err := workflow.SetUpdateHandlerWithOptions(ctx, name,
			func(_ workflow.Context, d Decision) error {
				g.decisions[d.CallID] = d
				return nil
			},
			workflow.UpdateHandlerOptions{Validator: g.validate})
		if err != nil {
			return fmt.Errorf("toolcall: approval update %s: %w", name, err)
		}
	}
	return nil
}

func (g *Gate) validate(d Decision) error {
	if d.Approver == "" {
		return errors.New("a decision needs an approver")
	}
	if _, done := g.decisions[d.CallID]; done {
		return fmt.Errorf("call %q is already decided", d.CallID)
	}
	if !slices.ContainsFunc(g.pending, func(p Pending) bool { return p.CallID == d.CallID }) {
		return fmt.Errorf("call %q is not waiting for approval", d.CallID)
	}
	return nil
}

// Request adds p to the pending calls: from now on the Update may decide
// it. Request before announcing the call (approval.requested), so a decision
// sent on seeing the announcement is never refused.
func (g *Gate) Request(p Pending) { g.pending = append(g.pending, p) }

// Wait waits up to timeout for the decision on a requested call, then drops
// it from the pending calls; decided is false when none came in time
// (callers count that as a denial). err is the context's error
// (cancellation).
func (g *Gate) Wait(ctx workflow.Context, callID string, timeout time.Duration) (d Decision, decided bool, err error) {
	decided, err = workflow.AwaitWithTimeout(ctx, timeout, func() bool { _, ok := g.decisions[callID]; return ok })
	g.pending = slices.DeleteFunc(g.pending, func(q Pending) bool { return q.CallID == callID })
	if err != nil {
		return Decision{}, false, err
	}
	return g.decisions[callID], decided, nil
}

// ErrDeadline is [Gate.Approve]'s error for a call that got no decision
// before its workflow's own deadline (Approval.Deadline).
var ErrDeadline = errors.New("toolcall: no decision before the deadline")

// Approval is one call's wait for a decision, as [Gate.Approve] runs it.
type Approval struct {
	// Pending is the call (RequestedAt is set by Approve).
	Pending Pending
	// Wait is how long the call waits; no decision by then is a denial.
	Wait time.Duration
	// Deadline, when set, is the end of the workflow's own time: no
	// decision by then is [ErrDeadline], not a denial, and is not announced.
	Deadline time.Time
	// Requested is the approval.requested event's message (a program's
	// input; empty for runs).
	Requested string
	// Announce publishes an approval event of the call: kind
	// [EventApprovalRequested], then [EventApprovalDecided] with "approved
	// by <approver>" or "denied: <denial>".
	Announce func(ctx workflow.Context, kind, msg string)
	// Waiting is told true when the call starts waiting, false when no call
	// waits any more (the workflow's WAITING_APPROVAL status).
	Waiting func(bool)
}

// Approve is the approval step of runs and programs: it requests a
// decision on a.Pending, announces the request, waits up to a.Wait and
// announces the decision. It returns the approver, or the denial the model
// or the script reads ([Denial]); err is the context's error
// (cancellation) or [ErrDeadline].
func (g *Gate) Approve(ctx workflow.Context, a Approval) (approver, denial string, err error) {
	a.Pending.RequestedAt = workflow.Now(ctx)
	g.Request(a.Pending)
	a.Waiting(true)
	a.Announce(ctx, EventApprovalRequested, a.Requested)
	d, decided, err := g.Wait(ctx, a.Pending.CallID, a.Wait)
	if len(g.pending) == 0 {
		a.Waiting(false)
	}
	if err != nil {
		return "", "", err
	}
	if !decided && !a.Deadline.IsZero() && !workflow.Now(ctx).Before(a.Deadline) {
		return "", "", ErrDeadline
	}
	if !decided || !d.Approved {
		denial = Denial(d, decided, a.Wait)
		a.Announce(ctx, EventApprovalDecided, "denied: "+denial)
		return "", denial, nil
	}
	a.Announce(ctx, EventApprovalDecided, "approved by "+d.Approver)
	return d.Approver, "", nil
}

// Denial renders a decision that was not an approval (or no decision within
// wait) as the message a model or a script sees.
func Denial(d Decision, decided bool, wait time.Duration) string {
	switch {
	case !decided:
		return "no decision within " + wait.String()
	case d.Reason != "":
		return "denied by " + d.Approver + ": " + d.Reason
	}
	return "denied by " + d.Approver
}

// PolicyNeedsApproval reports whether an approval policy (tool ids or globs,
// "*" for every tool) asks for approval of toolID, matched with and without
// its version ("KV.Put@1" matches "KV.Put", "KV.*" and "KV.Put@1"). Runs and
// the programs a code-mode run starts apply the same policy.
func PolicyNeedsApproval(patterns []string, toolID string) bool {
	bare := toolID
	if i := strings.LastIndexByte(toolID, '@'); i >= 0 {
		bare = toolID[:i]
	}
	for _, pat := range patterns {
		if pat == "*" || pat == toolID || pat == bare {
			return true
		}
		if ok, _ := path.Match(pat, bare); ok {
			return true
		}
	}
	return false
}
