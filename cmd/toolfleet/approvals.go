package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

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
		Short: "Calls waiting for a human, across your agent runs and programs",
	}
	pf := cmd.PersistentFlags()
	gf.register(pf)
	config.BindEnv(pf, "TOOLFLEET")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error { return applyEnvAndDev(pf) }
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List pending approvals: kind, run or program id, call id, tool, waiting since; decide with agent|program approve/deny",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), gf.Timeout)
			defer cancel()
			return listApprovals(ctx, cmd.OutOrStdout(), &gf)
		},
	})
	return cmd
}

// maxApprovalScan bounds the open runs and programs one listing reads.
const maxApprovalScan = 100

func listApprovals(ctx context.Context, w io.Writer, gf *gatewayFlags) error {
	runs, err := gf.runs()
	if err != nil {
		return err
	}
	programs, err := gf.programs()
	if err != nil {
		return err
	}
	print := func(kind, id string, p []*toolfleetv1.PendingApproval) {
		for _, a := range p {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", kind, id, a.GetCallId(), a.GetToolId(),
				a.GetRequestedAt().AsTime().Local().Format(time.DateTime))
		}
	}
	lr, err := runs.ListRuns(ctx, connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: maxApprovalScan}))
	if err != nil {
		return fmt.Errorf("list runs: %w", err)
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
	}
	lp, err := programs.ListPrograms(ctx, connect.NewRequest(&toolfleetv1.ListProgramsRequest{PageSize: maxApprovalScan}))
	if err != nil {
		return fmt.Errorf("list programs: %w", err)
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
	}
	return nil
}
