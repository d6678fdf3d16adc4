package toolcall

import (
	"context"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// ActivityCall is one execution of an activity as a workflow's history
// records it: what it was given, how it ended, how many attempts it took,
// and when. Pages that show a run's or a program's tool calls read them.
type ActivityCall struct {
	// Local is a local activity: history keeps its result, attempts and
	// time, not its input (Input is nil).
	Local  bool
	Input  *commonpb.Payloads
	Result *commonpb.Payloads
	// Failure is the last attempt's failure message, when it failed.
	Failure string
	// Attempt is the attempt that ended the activity (or is running).
	Attempt                    int32
	Scheduled, Started, Closed time.Time
}

// localActivityMarker is the marker the Go SDK records a local activity's
// outcome with (details "data": its type and attempt; "result").
const localActivityMarker = "LocalActivity"

// Decode decodes the first payload of ps into v (nothing when ps is empty).
func Decode(ps *commonpb.Payloads, v any) error {
	if len(ps.GetPayloads()) == 0 {
		return nil
	}
	return converter.GetDefaultDataConverter().FromPayload(ps.GetPayloads()[0], v)
}

// MaxHistoryEvents bounds the events [ActivityCalls] reads: Temporal caps
// one execution's history near this too.
const MaxHistoryEvents = 51_200

// ActivityCalls reads workflowID's current execution history and returns
// the executions of the activity named name, in order, at most maxCalls (more is
// reported by truncated).
func ActivityCalls(ctx context.Context, c client.Client, workflowID, name string, maxCalls int) (calls []ActivityCall, truncated bool, err error) {
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	byScheduled := map[int64]int{}
	for n := 0; it.HasNext(); n++ {
		if n >= MaxHistoryEvents {
			return calls, true, nil
		}
		ev, err := it.Next()
		if err != nil {
			return nil, false, fmt.Errorf("toolcall: read the history of %s: %w", workflowID, err)
		}
		at := ev.GetEventTime().AsTime()
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := ev.GetActivityTaskScheduledEventAttributes()
			if a.GetActivityType().GetName() != name {
				continue
			}
			if len(calls) >= maxCalls {
				truncated = true
				continue
			}
			byScheduled[ev.GetEventId()] = len(calls)
			calls = append(calls, ActivityCall{Input: a.GetInput(), Scheduled: at, Attempt: 1})
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			a := ev.GetMarkerRecordedEventAttributes()
			if a.GetMarkerName() != localActivityMarker {
				continue
			}
			var m struct {
				ActivityType string
				Attempt      int32
			}
			if Decode(a.GetDetails()["data"], &m) != nil || m.ActivityType != name {
				continue
			}
			if len(calls) >= maxCalls {
				truncated = true
				continue
			}
			c := ActivityCall{Local: true, Result: a.GetDetails()["result"], Attempt: max(m.Attempt, 1), Scheduled: at, Closed: at}
			if f := a.GetFailure(); f != nil {
				c.Failure, c.Result = f.GetMessage(), nil
			}
			calls = append(calls, c)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			a := ev.GetActivityTaskStartedEventAttributes()
			if i, ok := byScheduled[a.GetScheduledEventId()]; ok {
				calls[i].Started, calls[i].Attempt = at, max(a.GetAttempt(), 1)
				if f := a.GetLastFailure(); f != nil {
					calls[i].Failure = f.GetMessage()
				}
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := ev.GetActivityTaskCompletedEventAttributes()
			if i, ok := byScheduled[a.GetScheduledEventId()]; ok {
				calls[i].Result, calls[i].Closed, calls[i].Failure = a.GetResult(), at, ""
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			a := ev.GetActivityTaskFailedEventAttributes()
			if i, ok := byScheduled[a.GetScheduledEventId()]; ok {
				calls[i].Failure, calls[i].Closed = a.GetFailure().GetMessage(), at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
			a := ev.GetActivityTaskTimedOutEventAttributes()
			if i, ok := byScheduled[a.GetScheduledEventId()]; ok {
				calls[i].Failure, calls[i].Closed = "timed out: "+a.GetFailure().GetMessage(), at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
			a := ev.GetActivityTaskCanceledEventAttributes()
			if i, ok := byScheduled[a.GetScheduledEventId()]; ok {
				calls[i].Failure, calls[i].Closed = "cancelled", at
			}
		}
	}
	return calls, truncated, nil
}

// StartInput returns the input payloads of workflowID's current execution.
func StartInput(ctx context.Context, c client.Client, workflowID string) (*commonpb.Payloads, error) {
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return nil, fmt.Errorf("toolcall: %s has no history", workflowID)
	}
	ev, err := it.Next()
	if err != nil {
		return nil, fmt.Errorf("toolcall: read the history of %s: %w", workflowID, err)
	}
	return ev.GetWorkflowExecutionStartedEventAttributes().GetInput(), nil
}
