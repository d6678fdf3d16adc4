package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The text and JSON views of what the agent, program and approvals verbs
// print: tables with a header row for lists, labelled lines for one item,
// protojson (one array for lists) for programs.

// addOutputFlag gives cmd the -o flag `tools` has and returns its value;
// checkOutput validates it before the command talks to the gateway.
func addOutputFlag(cmd *cobra.Command) *output {
	out := &output{}
	cmd.Flags().StringVarP(&out.mode, "output", "o", "auto", "output: auto (text on a terminal, JSON when piped), json or text")
	return out
}

// newTable is a table with a header row.
func newTable(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

// when is a timestamp in local time, "-" when unset.
func when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().Local().Format(time.DateTime)
}

// dash is s, or "-" when s is empty (a table cell is never blank).
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runStatus is a run's status as `agent get` and `agent list` say it.
func runStatus(s toolfleetv1.RunStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "RUN_STATUS_"))
}

// programStatus is a program's status as `program get` says it.
func programStatus(s toolfleetv1.ProgramStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "PROGRAM_STATUS_"))
}

// printRun is `agent get` for people.
func printRun(w io.Writer, r *toolfleetv1.GetRunResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	status := runStatus(r.GetStatus())
	if r.GetIdle() {
		status += " (answered; waits for a follow-up message)"
	}
	if b := r.GetBudget(); b != "" {
		status += " (" + b + " ran out)"
	}
	u := r.GetUsage()
	fmt.Fprintf(tw, "Run:\t%s\n", r.GetRunId())
	fmt.Fprintf(tw, "Status:\t%s\n", status)
	fmt.Fprintf(tw, "Started:\t%s\n", when(r.GetStartedAt()))
	fmt.Fprintf(tw, "Turns:\t%d\n", r.GetTurns())
	fmt.Fprintf(tw, "Tool calls:\t%d\n", r.GetToolCalls())
	fmt.Fprintf(tw, "Usage:\t%d tokens in / %d out\n", u.GetInputTokens(), u.GetOutputTokens())
	if err := tw.Flush(); err != nil {
		return err
	}
	printPending(w, "agent", r.GetPendingApprovals())
	printQuestions(w, "agent", r.GetPendingQuestions())
	if m := r.GetFailureMessage(); m != "" {
		fmt.Fprintf(w, "Failure:\n%s\n", indent(m))
	}
	if a := r.GetAnswer(); a != "" {
		fmt.Fprintf(w, "Answer:\n%s\n", indent(a))
	}
	return nil
}

// printProgram is `program get` for people.
func printProgram(w io.Writer, p *toolfleetv1.GetProgramResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Program:\t%s\n", p.GetProgramId())
	fmt.Fprintf(tw, "Status:\t%s\n", programStatus(p.GetStatus()))
	fmt.Fprintf(tw, "Tool calls:\t%d\n", p.GetToolCalls())
	if err := tw.Flush(); err != nil {
		return err
	}
	printPending(w, "program", p.GetPendingApprovals())
	printQuestions(w, "program", p.GetPendingQuestions())
	if pe := p.GetProgramError(); pe != nil {
		msg := pe.GetMessage()
		if pe.GetPosition() != "" {
			msg = pe.GetPosition() + ": " + msg
		}
		if pe.GetLine() != "" {
			msg += "\n\t" + pe.GetLine()
		}
		fmt.Fprintf(w, "Error:\n%s\n", indent(msg))
	} else if e := p.GetError(); e != "" {
		fmt.Fprintf(w, "Error:\n%s\n", indent(e))
	}
	if res := p.GetResult(); res != nil && p.GetDone() {
		b, err := res.MarshalJSON()
		if err != nil {
			return err
		}
		fmt.Fprintln(w, "Result:")
		return writeIndented(w, b)
	}
	return nil
}

// printPending lists a run's or program's calls waiting for approval, with
// the command that decides them.
func printPending(w io.Writer, verb string, p []*toolfleetv1.PendingApproval) {
	if len(p) == 0 {
		fmt.Fprintln(w, "Pending approvals: none")
		return
	}
	fmt.Fprintln(w, "Pending approvals (decide with: toolfleet "+verb+" approve CALL_ID, or deny):")
	tw := newTable(w, "  CALL ID", "TOOL", "WAITING SINCE")
	for _, a := range p {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", a.GetCallId(), a.GetToolId(), when(a.GetRequestedAt()))
	}
	_ = tw.Flush()
}

// indent indents every line of s by two spaces.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// pendingItem is one line of `approvals list`: a pending approval or
// question and whose it is.
type pendingItem struct {
	kind, id string // "run" or "program", and its id
	approval *toolfleetv1.PendingApproval
	question *toolfleetv1.PendingQuestion
}

// writePendingJSON writes items as one JSON array of the approvals'
// protojson with "kind" and "runId" or "programId" added.
func writePendingJSON(w io.Writer, items []pendingItem) error {
	all := make([]map[string]any, 0, len(items))
	for _, it := range items {
		var msg proto.Message = it.approval
		pending := "approval"
		if it.question != nil {
			msg, pending = it.question, "question"
		}
		b, err := protojson.Marshal(msg)
		if err != nil {
			return err
		}
		m := map[string]any{}
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		m["kind"] = it.kind
		m[it.kind+"Id"] = it.id
		m["pending"] = pending
		all = append(all, m)
	}
	b, err := json.Marshal(all)
	if err != nil {
		return err
	}
	return writeIndented(w, b)
}
