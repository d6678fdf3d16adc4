package program

import (
	"context"
	"errors"

	"go.temporal.io/sdk/activity"

	"github.com/toolfleet/toolfleet/orchestrator/runstore"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// Program values and the quota.
//
// The values a program keeps by reference (valuestore.go) are stored in the
// run blob store and count against the byte quota of the program's owner,
// the same per-principal quota runs are admitted by (--principal-max-bytes;
// runstore.Store implements ValueQuota). Programs.Start holds the program:
// a start is refused when its owner already holds the quota's bytes, and the
// program's values are freed with its events once it has been closed for the
// run retention (the reaper frees programs as it frees runs). Values are
// counted as they are stored, never refused there (a refused store would
// fail the workflow task, which Temporal retries until the program times
// out); instead each tool call first asks CheckProgramValues, and a program
// over its owner's quota, or one that would take the shared store's reserve
// for runs, ends with a limit error (LimitStorage) whose message is the
// owner's to read.

// ValueQuota holds program values within their owner's quota.
// *runstore.Store implements it.
type ValueQuota interface {
	// HoldProgram records program id as subject's, so its values count
	// against subject's quota and are freed with it; it refuses a subject
	// over its quota.
	HoldProgram(ctx context.Context, subject, id string) error
	// CheckProgramValues refuses further values of program id when its
	// owner is over the quota or the shared store has no room for them.
	CheckProgramValues(ctx context.Context, id string) error
}

// refusedStorage reports whether err is a refusal of the quota or the
// shared store (runstore.QuotaError, runstore.StoreFullError), whose
// message is the caller's to read, not a failure to reach it.
func refusedStorage(err error) bool { return runstore.Refused(err) }

// isStoreFull reports whether err is the shared store being full.
func isStoreFull(err error) bool { return runstore.IsFull(err) }

// QuotaError is a program start refused by its owner's quota or by a full
// shared store; its message is the caller's to read.
type QuotaError struct{ Err error }

func (e *QuotaError) Error() string { return e.Err.Error() }
func (e *QuotaError) Unwrap() error { return e.Err }

// checkValues asks the quota whether program id may go on storing values:
// a refusal is the call's result (the workflow ends the program with
// LimitStorage), a failure to ask is retried by Temporal.
func (a *Activities) checkValues(ctx context.Context, id string) (*CallResult, error) {
	if a.Quota == nil {
		return nil, nil
	}
	err := a.Quota.CheckProgramValues(ctx, id)
	switch {
	case err == nil:
		return nil, nil
	case refusedStorage(err):
		return &CallResult{Error: &CallError{Kind: toolcall.KindStorage, Message: err.Error()}}, nil
	}
	activity.GetLogger(ctx).Warn("the program's storage quota could not be checked", "program_id", id, "error", err)
	return nil, errors.New("program: the storage quota could not be checked; retrying")
}
