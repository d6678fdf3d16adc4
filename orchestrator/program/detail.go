package program

import (
	"context"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// Detail is what a program's page shows beyond its status: the start's
// source, tools and limits, and each tool call from the workflow's history.
type Detail struct {
	Input Input
	// Limits are the limits in force (the start's, defaults filled in).
	Limits Limits
	Calls  []CallRecord
	// Truncated is set when the program made more calls than were read.
	Truncated bool
	StartedAt time.Time
}

// CallRecord is one tool call of a program: its request, its result or
// error, attempts and timing. Values are as history holds them (a digest
// for a program that keeps content out of history).
type CallRecord struct {
	Request                    CallRequest
	Result                     *CallResult
	Failure                    string
	Attempt                    int32
	Scheduled, Started, Closed time.Time
}

// Detail reads id's start and its calls (at most maxCalls) from history.
// The caller checks ownership first ([Programs.Owner]).
func (p *Programs) Detail(ctx context.Context, id string, maxCalls int) (*Detail, error) {
	in, err := toolcall.StartInput(ctx, p.Temporal, id)
	if err != nil {
		return nil, err
	}
	d := &Detail{}
	if err := toolcall.Decode(in, &d.Input); err != nil {
		return nil, fmt.Errorf("program: decode the start of %s: %w", id, err)
	}
	d.Input.Principal = toolcall.Principal{} // scopes are not the page's to show
	if d.Limits, err = d.Input.Limits.WithDefaults(); err != nil {
		d.Limits = d.Input.Limits
	}
	calls, truncated, err := toolcall.ActivityCalls(ctx, p.Temporal, id, CallToolActivity, maxCalls)
	if err != nil {
		return nil, err
	}
	d.Truncated = truncated
	for _, c := range calls {
		r := CallRecord{Failure: c.Failure, Attempt: c.Attempt, Scheduled: c.Scheduled, Started: c.Started, Closed: c.Closed}
		if err := toolcall.Decode(c.Input, &r.Request); err != nil {
			return nil, fmt.Errorf("program: decode a call of %s: %w", id, err)
		}
		r.Request.Principal = toolcall.Principal{}
		if c.Result != nil {
			r.Result = &CallResult{}
			if err := toolcall.Decode(c.Result, r.Result); err != nil {
				return nil, fmt.Errorf("program: decode a result of %s: %w", id, err)
			}
		}
		d.Calls = append(d.Calls, r)
	}
	return d, nil
}
