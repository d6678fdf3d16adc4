package visibility

import (
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
)

func TestQueryRefusesHostileValues(t *testing.T) {
	for _, v := range []string{"a'b", `a\b`, "a\"b", "a`b", "a\nb", "a\x00b", "\xff", strings.Repeat("x", MaxFilterBytes+1)} {
		if q, err := NewQuery("AgentRun").Is(Model.GetName(), v).String(); err == nil {
			t.Errorf("value %q accepted: %s", v, q)
		}
	}
	q, err := NewQuery("AgentRun").Is(Model.GetName(), "openai:gpt-5 mini").Status(StatusDone).
		StartedAfter(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)).String()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"WorkflowType = 'AgentRun'", "ToolfleetModel = 'openai:gpt-5 mini'", "StartTime >= '2026-01-02T03:04:05Z'", "ToolfleetStatus IN ('answered', 'completed')"} {
		if !strings.Contains(q, want) {
			t.Errorf("query %q lacks %q", q, want)
		}
	}
	if q, err := NewQuery("AgentRun").Status(StatusWaitingInput).String(); err != nil || !strings.Contains(q, "ToolfleetStatus = 'waiting_input'") {
		t.Errorf("the waiting_input filter: %q %v", q, err)
	}
	if _, err := NewQuery("AgentRun").Status("nonsense").String(); err == nil {
		t.Error("an unknown status accepted")
	}
}

func TestReaderStatus(t *testing.T) {
	for _, tc := range []struct {
		state      enumspb.WorkflowExecutionStatus
		attr, want string
	}{
		{enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, StatusAnswered, StatusDone},
		{enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, StatusWaiting, StatusWaiting},
		{enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "", ""},
		{enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, StatusFailed, StatusFailed},
		{enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, StatusRunning, StatusDone},
		{enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, StatusRunning, StatusFailed},
		{enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, StatusRunning, StatusCanceled},
	} {
		if got := ReaderStatus(tc.state, tc.attr); got != tc.want {
			t.Errorf("ReaderStatus(%s, %q) = %q, want %q", tc.state, tc.attr, got, tc.want)
		}
	}
}
