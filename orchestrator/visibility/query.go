package visibility

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
)

// MaxFilterBytes bounds one filter value of a listing.
const MaxFilterBytes = 256

// ErrFilterValue refuses a filter value a visibility query cannot carry
// safely: too long, not UTF-8, or holding a quote, backslash or control
// character. Values are never escaped into a query, only accepted or refused,
// so a hostile value cannot change what the query asks.
var ErrFilterValue = errors.New("a filter value must be at most 256 bytes of text without quotes, backslashes or control characters")

// Query builds a Temporal visibility query from clauses joined with AND.
// Every value goes through [Query.Is] or a time method; the rest are
// fixed strings of this package.
type Query struct {
	clauses []string
	err     error
}

// NewQuery starts a query with a workflow type (a constant of the caller).
func NewQuery(workflowType string) *Query {
	q := &Query{}
	q.Is("WorkflowType", workflowType)
	// A run that continued as new appears once, as its latest execution.
	q.clauses = append(q.clauses, "ExecutionStatus != 'ContinuedAsNew'")
	return q
}

// Is adds `attr = 'value'` (Keyword or KeywordList membership); attr is a
// name of this package's or Temporal's, never caller text.
func (q *Query) Is(attr, value string) *Query {
	if err := checkValue(value); err != nil {
		q.fail(fmt.Errorf("%s: %w", attr, err))
		return q
	}
	q.clauses = append(q.clauses, attr+" = '"+value+"'")
	return q
}

// StartedAfter adds StartTime >= t (zero t: nothing).
func (q *Query) StartedAfter(t time.Time) *Query {
	if !t.IsZero() {
		q.clauses = append(q.clauses, "StartTime >= '"+t.UTC().Format(time.RFC3339Nano)+"'")
	}
	return q
}

// StartedBefore adds StartTime < t (zero t: nothing).
func (q *Query) StartedBefore(t time.Time) *Query {
	if !t.IsZero() {
		q.clauses = append(q.clauses, "StartTime < '"+t.UTC().Format(time.RFC3339Nano)+"'")
	}
	return q
}

// Status adds the clause of a status word (the Status* values; answered
// and completed are both "completed" to a reader, as GetRun says). An
// unknown word is an error.
func (q *Query) Status(status string) *Query {
	c, ok := statusClauses[status]
	if !ok {
		q.fail(fmt.Errorf("unknown status %q", status))
		return q
	}
	q.clauses = append(q.clauses, c)
	return q
}

// statusClauses say, for each status word a reader filters on, which
// executions have it: the attribute while the workflow is open, Temporal's
// own status once it closed (a terminated or timed-out workflow never
// updated its attribute).
var statusClauses = map[string]string{
	StatusRunning:      "(ExecutionStatus = 'Running' AND " + Status.GetName() + " = 'running')",
	StatusWaiting:      "(ExecutionStatus = 'Running' AND " + Status.GetName() + " = 'waiting_approval')",
	StatusWaitingInput: "(ExecutionStatus = 'Running' AND " + Status.GetName() + " = 'waiting_input')",
	StatusDone: "((ExecutionStatus = 'Running' AND " + Status.GetName() + " IN ('answered', 'completed')) OR " +
		"(ExecutionStatus = 'Completed' AND " + Status.GetName() + " NOT IN ('failed', 'canceled')))",
	StatusFailed:   "(ExecutionStatus IN ('Failed', 'Terminated', 'TimedOut') OR " + Status.GetName() + " = 'failed')",
	StatusCanceled: "(ExecutionStatus = 'Canceled' OR " + Status.GetName() + " = 'canceled')",
}

// String returns the query, or the first refused value.
func (q *Query) String() (string, error) {
	if q.err != nil {
		return "", q.err
	}
	return strings.Join(q.clauses, " AND "), nil
}

func (q *Query) fail(err error) {
	if q.err == nil {
		q.err = err
	}
}

// checkValue accepts a value a quoted query literal carries as itself.
func checkValue(v string) error {
	if len(v) > MaxFilterBytes || !utf8.ValidString(v) {
		return ErrFilterValue
	}
	for _, r := range v {
		if r == '\'' || r == '"' || r == '\\' || r == '`' || unicode.IsControl(r) {
			return ErrFilterValue
		}
	}
	return nil
}

// Keyword returns the Keyword attribute name of a listed execution ("" when absent).
func Keyword(attrs *commonpb.SearchAttributes, name string) string {
	var s string
	if p := attrs.GetIndexedFields()[name]; p != nil {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &s)
	}
	return s
}

// KeywordList returns the KeywordList attribute name of a listed execution.
func KeywordList(attrs *commonpb.SearchAttributes, name string) []string {
	var s []string
	if p := attrs.GetIndexedFields()[name]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &s); err != nil {
			var one string // a list of one may be stored as a plain keyword
			if converter.GetDefaultDataConverter().FromPayload(p, &one) == nil && one != "" {
				return []string{one}
			}
		}
	}
	return s
}

// ReaderStatus is the status a reader sees for a listed execution: the
// attribute while the workflow is open ("answered" reads "completed"),
// Temporal's status once it closed; "" for an open workflow without the
// attribute.
func ReaderStatus(state enumspb.WorkflowExecutionStatus, attr string) string {
	switch state {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		if attr == StatusAnswered {
			return StatusDone
		}
		return attr
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		if attr == StatusFailed || attr == StatusCanceled {
			return attr
		}
		return StatusDone
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return StatusCanceled
	}
	return StatusFailed // timed out, terminated, failed
}
