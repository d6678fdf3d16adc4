package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
)

// The verbs runs have, for programs: get, list, watch, approve, deny, cancel.

// withProgramClient is the RunE of a verb that makes one ProgramService
// call: it dials the gateway and bounds the call by --timeout.
func withProgramClient(gf *gatewayFlags, call func(context.Context, *cobra.Command, toolfleetv1connect.ProgramServiceClient, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := gf.programs()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), gf.Timeout)
		defer cancel()
		return call(ctx, cmd, c, args)
	}
}

func newProgramListCommand(gf *gatewayFlags, out *output) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List your programs, newest first: id, workflow state, status, start time",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = withProgramClient(gf, func(ctx context.Context, cmd *cobra.Command, c toolfleetv1connect.ProgramServiceClient, _ []string) error {
		resp, err := c.ListPrograms(ctx, connect.NewRequest(&toolfleetv1.ListProgramsRequest{PageSize: 50}))
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if out.structured(w) {
			return protoList(*out, w, resp.Msg.GetPrograms())
		}
		tw := newTable(w, "PROGRAM ID", "STATE", "STATUS", "STARTED")
		for _, p := range resp.Msg.GetPrograms() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.GetProgramId(), p.GetState(), dash(p.GetStatus()), when(p.GetStartedAt()))
		}
		return tw.Flush()
	})
	return cmd
}

func newProgramGetCommand(gf *gatewayFlags, out *output) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get PROGRAM_ID",
		Short: "Show a program: status, tool calls, pending approvals, and its result or error",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = withProgramClient(gf, func(ctx context.Context, cmd *cobra.Command, c toolfleetv1connect.ProgramServiceClient, args []string) error {
		resp, err := c.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: args[0]}))
		if err != nil {
			return err
		}
		if w := cmd.OutOrStdout(); !out.structured(w) {
			return printProgram(w, resp.Msg)
		}
		return out.proto(cmd.OutOrStdout(), resp.Msg)
	})
	return cmd
}

func newProgramWatchCommand(gf *gatewayFlags, out *output) *cobra.Command {
	var after uint64
	cmd := &cobra.Command{
		Use:   "watch PROGRAM_ID",
		Short: "Print a program's events until it ends (at most --timeout), then its result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := gf.programs()
			if err != nil {
				return err
			}
			return awaitProgram(cmd, out, c, args[0], after, true, gf.Timeout)
		},
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "resume after this event sequence")
	return cmd
}

func newProgramDecideCommand(gf *gatewayFlags, out *output, approve bool) *cobra.Command {
	var reason string
	use, short := "deny CALL_ID", "Deny a tool call waiting for approval (the script sees the reason as the call's error)"
	if approve {
		use, short = "approve CALL_ID", "Approve a tool call waiting for approval"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

CALL_ID is the call's id as 'toolfleet approvals list' and 'program get' show it
(PROGRAM_ID/N): it names its program. The older form PROGRAM_ID CALL_ID works too.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: withProgramClient(gf, func(ctx context.Context, cmd *cobra.Command, c toolfleetv1connect.ProgramServiceClient, args []string) error {
			programID, callID, err := callOwner("program", args)
			if err != nil {
				return err
			}
			if _, err := c.DecideProgramApproval(ctx, connect.NewRequest(&toolfleetv1.DecideProgramApprovalRequest{
				ProgramId: programID, CallId: callID, Approved: approve, Reason: reason})); err != nil {
				return err
			}
			return out.done(cmd.OutOrStdout(), fmt.Sprintf("%s %s (program %s)", decided(approve), callID, programID),
				decision{ProgramID: programID, CallID: callID, Decision: decided(approve)})
		}),
	}
	if !approve {
		cmd.Flags().StringVar(&reason, "reason", "", "why; the script sees it as the call's error")
	}
	return cmd
}

func newProgramCancelCommand(gf *gatewayFlags, out *output) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel PROGRAM_ID",
		Short: "Cancel a program and its in-flight tool calls",
		Args:  cobra.ExactArgs(1),
		RunE: withProgramClient(gf, func(ctx context.Context, cmd *cobra.Command, c toolfleetv1connect.ProgramServiceClient, args []string) error {
			if _, err := c.CancelProgram(ctx, connect.NewRequest(&toolfleetv1.CancelProgramRequest{ProgramId: args[0]})); err != nil {
				return err
			}
			return out.done(cmd.OutOrStdout(), fmt.Sprintf("cancelling program %s (see it end with: toolfleet program get %s)", args[0], args[0]),
				change{ProgramID: args[0], Change: "cancelling"})
		}),
	}
}

// awaitProgram waits for program id to end, at most timeout, printing its
// events to stderr when print is set, then prints its outcome. It waits on the
// program's events: a quiet stream (a call waiting for approval) is only
// quiet, and a stream that breaks (the gateway or an orchestrator replica
// restarting) is resumed after the last event seen. Running out of time says
// how to look again; it never cancels the program.
func awaitProgram(cmd *cobra.Command, out *output, c toolfleetv1connect.ProgramServiceClient, id string, after uint64, print bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	var w io.Writer = io.Discard
	if print {
		w = cmd.ErrOrStderr()
	}
	got, err := waitProgram(ctx, w, c, id, after)
	if err != nil {
		if ctx.Err() != nil && cmd.Context().Err() == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "program %s is still running after --timeout %s; look again with: toolfleet program watch %s (or get)\n", id, timeout, id)
			return &exitError{code: exitOther}
		}
		return err
	}
	return printOutcome(cmd, out, got.GetProgramId(), got.GetStatus(), got.GetResult(), got.GetProgramError())
}

// waitProgram follows program id's events (printed to w) until it ends, and
// returns its outcome.
func waitProgram(ctx context.Context, w io.Writer, c toolfleetv1connect.ProgramServiceClient, id string, after uint64) (*toolfleetv1.GetProgramResponse, error) {
	delay := 200 * time.Millisecond
	for {
		ended, last, err := followProgram(ctx, w, c, id, after)
		if last > after {
			after, delay = last, 200*time.Millisecond // progress: retry soon
		}
		if err != nil && !retryable(err) {
			return nil, err
		}
		if ended || err == nil {
			// A final event was seen, or the stream ended (the server ends it
			// for a program that ended without one): the outcome decides.
			got, err := settle(ctx, c, id)
			if err != nil {
				return nil, err
			}
			if got.GetDone() {
				return got, nil
			}
		}
		if err := pause(ctx, delay); err != nil {
			return nil, err
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// followProgram prints events after sequence after until the stream ends;
// ended is true after a final event, last is the last sequence seen.
func followProgram(ctx context.Context, w io.Writer, c toolfleetv1connect.ProgramServiceClient, id string, after uint64) (ended bool, last uint64, err error) {
	last = after
	st, err := c.WatchProgram(ctx, connect.NewRequest(&toolfleetv1.WatchProgramRequest{ProgramId: id, AfterSequence: after}))
	if err != nil {
		return false, last, err
	}
	defer st.Close()
	for st.Receive() {
		ev := st.Msg().GetEvent()
		if seq := st.Msg().GetSequence(); seq > last {
			last = seq
		}
		printProgramEvent(w, ev)
		switch ev.GetKind() {
		case "completed", "failed", "cancelled":
			return true, last, nil
		}
	}
	return false, last, st.Err()
}

// settle gets a program's outcome: the workflow closes a moment after its
// final event, and an orchestrator that is restarting answers UNAVAILABLE for
// a while, so it asks again (bounded by ctx) until the program is done, or
// for a few seconds when it is not.
func settle(ctx context.Context, c toolfleetv1connect.ProgramServiceClient, id string) (*toolfleetv1.GetProgramResponse, error) {
	notDone := 0
	for {
		got, err := c.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: id}))
		switch {
		case err == nil && got.Msg.GetDone():
			return got.Msg, nil
		case err == nil:
			if notDone++; notDone > 30 {
				return got.Msg, nil
			}
		case !retryable(err):
			return nil, err
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// retryable reports whether a request that failed with err may succeed when
// made again: the gateway or the orchestrator behind it is away for a while.
func retryable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeAborted, connect.CodeDeadlineExceeded, connect.CodeInternal:
		return true
	}
	return false
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
