package main

import (
	"context"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/config"
)

// newApprovalsCommand is `toolfleet approvals list`: every call waiting for
// a human, across the caller's runs and programs.
func newApprovalsCommand() *cobra.Command {
	var gf gatewayFlags
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "Calls waiting for a human (approvals and tools' questions), across your agent runs and programs",
	}
	var out output
	pf := cmd.PersistentFlags()
	gf.register(pf)
	out.register(pf)
	config.BindEnv(pf, "TOOLFLEET")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := applyEnvAndDev(pf); err != nil {
			return err
		}
		return out.validate()
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List pending approvals and questions: kind, run or program id, call id, tool, what it waits for, since; decide with agent|program approve/deny CALL_ID, answer with agent answer CALL_ID",
		Args:  cobra.NoArgs,
	}
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), gf.Timeout)
		defer cancel()
		items, err := listApprovals(ctx, &gf)
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if out.structured(w) {
			return out.pending(w, items)
		}
		if len(items) == 0 {
			fmt.Fprintln(w, "No call waits for approval or an answer.")
			return nil
		}
		tw := newTable(w, "KIND", "RUN OR PROGRAM", "CALL ID", "TOOL", "WAITS FOR", "WAITING SINCE")
		for _, it := range items {
			if q := it.question; q != nil {
				waits := "answer:" + q.GetKey()
				if p := q.GetConnectProvider(); p != "" {
					waits = "connection " + p
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", it.kind, it.id, q.GetCallId(), q.GetToolId(), waits, when(q.GetRequestedAt()))
				continue
			}
			a := it.approval
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", it.kind, it.id, a.GetCallId(), a.GetToolId(), "approval", when(a.GetRequestedAt()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "Decide with: toolfleet agent approve CALL_ID (a run's call) or toolfleet program approve CALL_ID (a program's); deny the same way.")
		fmt.Fprintln(w, "Answer a question with: toolfleet agent answer CALL_ID --json '{...}' (a run's; see agent get RUN_ID for its fields) or toolfleet program answer CALL_ID (a program's).")
		fmt.Fprintln(w, "A call waiting for a connection goes on by itself once you run toolfleet connections connect PROVIDER (by hand: agent|program answer CALL_ID --connected; --decline to go on without).")
		return nil
	}
	cmd.AddCommand(list)
	explainErrors(cmd, &gf)
	return cmd
}

// maxApprovalScan bounds the open runs and programs one listing reads.
const maxApprovalScan = 100

// listApprovals is every call waiting for approval in the caller's open
// runs and programs.
func listApprovals(ctx context.Context, gf *gatewayFlags) ([]pendingItem, error) {
	runs, err := gf.runs()
	if err != nil {
		return nil, err
	}
	programs, err := gf.programs()
	if err != nil {
		return nil, err
	}
	var items []pendingItem
	print := func(kind, id string, p []*toolfleetv1.PendingApproval) {
		for _, a := range p {
			items = append(items, pendingItem{kind: kind, id: id, approval: a})
		}
	}
	lr, err := runs.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: maxApprovalScan}))
	if err != nil {
		return nil, err
	}
	for _, r := range lr.Msg.GetRuns() {
		if r.GetState() != "Running" {
			continue
		}
		got, err := runs.GetRun(ctx, connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: r.GetRunId()}))
		if err != nil {
			continue // ended or restarting in between: nothing to decide now
		}
		print("run", r.GetRunId(), got.Msg.GetPendingApprovals())
		for _, q := range got.Msg.GetPendingQuestions() {
			items = append(items, pendingItem{kind: "run", id: r.GetRunId(), question: q})
		}
	}
	lp, err := programs.ListPrograms(ctx, connect.NewRequest(&toolfleetv1.ListProgramsRequest{PageSize: maxApprovalScan}))
	if err != nil {
		return nil, err
	}
	for _, p := range lp.Msg.GetPrograms() {
		// Without search attributes the status is unknown: ask every running one.
		if p.GetState() != "Running" || (p.GetStatus() != "" && !strings.HasPrefix(p.GetStatus(), "waiting")) {
			continue
		}
		got, err := programs.GetProgram(ctx, connect.NewRequest(&toolfleetv1.GetProgramRequest{ProgramId: p.GetProgramId()}))
		if err != nil {
			continue
		}
		print("program", p.GetProgramId(), got.Msg.GetPendingApprovals())
		for _, q := range got.Msg.GetPendingQuestions() {
			items = append(items, pendingItem{kind: "program", id: p.GetProgramId(), question: q})
		}
	}
	return items, nil
}
