package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/internal/yamlproto"
	"github.com/toolfleet/toolfleet/orchestrator/ids"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

func newAgentCommand() *cobra.Command {
	var af gatewayFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Start, watch and steer durable agent runs",
		Long: `agent talks to the AgentService at a toolfleet gateway (toolfleet dev serves it).

  toolfleet agent run --model scripted:demo --tools 'Calculator.*' "What is 6 times 7?" --watch
  toolfleet agent watch RUN_ID        toolfleet agent approve CALL_ID
  toolfleet agent get RUN_ID          toolfleet agent deny CALL_ID --reason "…"
  toolfleet agent list                toolfleet agent send RUN_ID "And times 2?"
                                      toolfleet agent cancel RUN_ID

Every verb prints text on a terminal and JSON when piped (-o text|json|yaml to
choose); watch prints one JSON object per event (-o json) or a YAML document
per event (-o yaml).`,
	}
	var out output
	pf := cmd.PersistentFlags()
	af.registerAddr(pf)
	out.register(pf)
	config.BindEnv(pf, "TOOLFLEET")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := applyEnvAndDev(pf); err != nil {
			return err
		}
		return out.validate()
	}
	cmd.AddCommand(newAgentRunCommand(&af, &out), newAgentWatchCommand(&af, &out), newAgentGetCommand(&af, &out), newAgentListCommand(&af, &out),
		newAgentDecideCommand(&af, &out, true), newAgentDecideCommand(&af, &out, false), newAgentCancelCommand(&af, &out), newAgentSendCommand(&af, &out),
		newAgentAnswerCommand(&af))
	explainErrors(cmd, &af)
	return cmd
}

func newAgentRunCommand(af *gatewayFlags, out *output) *cobra.Command {
	var (
		specFile, model, system, runID, protocol, questions string
		tools, approve                                      []string
		maxTurns, maxCalls                                  int32
		deadline                                            time.Duration
		sequential, codeMode, watch                         bool
	)
	cmd := &cobra.Command{
		Use:   "run [prompt]",
		Short: "Start a run from flags or a YAML spec (a StartRunRequest), optionally watching it",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &toolfleetv1.StartRunRequest{}
			if specFile != "" {
				b, err := readBounded(specFile, yamlproto.MaxBytes)
				if err != nil {
					return err
				}
				// Mistakes at their line and column in the YAML, with the field.
				if err := yamlproto.Unmarshal(specFile, b, req); err != nil {
					return err
				}
			}
			f := cmd.Flags()
			set := func(name string, apply func()) {
				if f.Changed(name) || specFile == "" {
					apply()
				}
			}
			set("model", func() { req.Model = model })
			set("system", func() { req.SystemPrompt = system })
			set("run-id", func() { req.RunId = runID })
			set("tools", func() { req.Tools = tools })
			set("tool-protocol", func() { req.ToolProtocol = protocol })
			set("sequential", func() { req.Sequential = sequential })
			set("code-mode", func() { req.CodeMode = codeMode })
			if f.Changed("questions") {
				switch questions {
				case "ask":
					req.Questions = toolfleetv1.QuestionPolicy_QUESTION_POLICY_ASK
				case "decline":
					req.Questions = toolfleetv1.QuestionPolicy_QUESTION_POLICY_DECLINE
				default:
					return fmt.Errorf("--questions %q: want ask or decline", questions)
				}
			}
			if f.Changed("approve-tools") {
				req.Approval = &toolfleetv1.ApprovalPolicy{Tools: approve}
			}
			if f.Changed("max-turns") || f.Changed("max-tool-calls") || f.Changed("deadline") {
				if req.Budget == nil {
					req.Budget = &toolfleetv1.Budget{}
				}
				if f.Changed("max-turns") {
					req.Budget.MaxTurns = maxTurns
				}
				if f.Changed("max-tool-calls") {
					req.Budget.MaxToolCalls = maxCalls
				}
				if f.Changed("deadline") {
					req.Budget.Deadline = durationpb.New(deadline)
				}
			}
			if len(args) == 1 {
				req.Messages = append(req.Messages, llm.User(args[0]))
			}
			c, err := af.runs()
			if err != nil {
				return err
			}
			resp, err := c.StartRun(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			id := resp.Msg.GetRunId()
			if !watch {
				return out.done(cmd.OutOrStdout(), id, resp.Msg)
			}
			return watchRun(cmd.Context(), c, id, 0, cmd.OutOrStdout(), out, 0)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&specFile, "file", "f", "", "YAML (or JSON) run spec: a StartRunRequest; flags override it")
	f.StringVar(&model, "model", "scripted:demo", "model provider:name, e.g. openai:gpt-4o, anthropic:claude-sonnet-4-5, scripted:demo")
	f.StringVar(&system, "system", "", "system prompt")
	f.StringVar(&runID, "run-id", "", "run id (an idempotency key); generated when empty")
	f.StringSliceVar(&tools, "tools", []string{"Calculator.*", "Clock.*", "KV.*", "JSONQuery.*"}, "tool ids or globs the model may call")
	f.StringVar(&protocol, "tool-protocol", "", "native (default), auto, fenced, hermes, xml or an open-model dialect (docs/formats.md)")
	f.StringSliceVar(&approve, "approve-tools", nil, "tool ids or globs whose calls need approval in this run")
	f.StringVar(&questions, "questions", "ask", "a tool's questions to the run's people: ask (wait for 'agent answer') or decline (the model is told)")
	f.Int32Var(&maxTurns, "max-turns", 0, "budget: model turns (0 = default)")
	f.Int32Var(&maxCalls, "max-tool-calls", 0, "budget: tool calls (0 = default)")
	f.DurationVar(&deadline, "deadline", 0, "budget: wall-clock time of the run (0 = default)")
	f.BoolVar(&sequential, "sequential", false, "at most one tool call per turn")
	f.BoolVar(&codeMode, "code-mode", false, "offer the model run_program: it writes one Starlark program that calls the tools")
	f.BoolVar(&watch, "watch", false, "watch the run until it ends")
	return cmd
}

func newAgentWatchCommand(af *gatewayFlags, out *output) *cobra.Command {
	var after uint64
	cmd := &cobra.Command{
		Use:   "watch RUN_ID",
		Short: "Show a run's progress live until it ends",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.runs()
			if err != nil {
				return err
			}
			return watchRun(cmd.Context(), c, args[0], after, cmd.OutOrStdout(), out, 0)
		},
	}
	cmd.Flags().Uint64Var(&after, "after", 0, "resume after this event sequence")
	return cmd
}

func newAgentGetCommand(af *gatewayFlags, out *output) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get RUN_ID",
		Short: "Show a run: status, turns, tool calls, usage, pending approvals and answer",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := af.runs()
		if err != nil {
			return err
		}
		resp, err := c.GetRun(cmd.Context(), connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: args[0]}))
		if err != nil {
			return err
		}
		if w := cmd.OutOrStdout(); !out.structured(w) {
			return printRun(w, resp.Msg)
		}
		return out.proto(cmd.OutOrStdout(), resp.Msg)
	}
	return cmd
}

func newAgentListCommand(af *gatewayFlags, out *output) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List your runs, newest first: id, status, model, start and end time",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		c, err := af.runs()
		if err != nil {
			return err
		}
		resp, err := c.ListRuns(cmd.Context(), connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 50}))
		if err != nil {
			return err
		}
		w := cmd.OutOrStdout()
		if out.structured(w) {
			return protoList(*out, w, resp.Msg.GetRuns())
		}
		// STATUS is the one `agent get` shows (an answered run that waits for a
		// follow-up message is completed, though its workflow still runs).
		tw := newTable(w, "RUN ID", "STATUS", "MODEL", "STARTED", "ENDED")
		for _, r := range resp.Msg.GetRuns() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.GetRunId(), listedStatus(r), dash(r.GetModel()), when(r.GetStartedAt()), when(r.GetClosedAt()))
		}
		return tw.Flush()
	}
	return cmd
}

func newAgentDecideCommand(af *gatewayFlags, out *output, approve bool) *cobra.Command {
	var reason string
	use, short := "deny CALL_ID", "Deny a pending tool call (the model is told the reason)"
	if approve {
		use, short = "approve CALL_ID", "Approve a pending tool call"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

CALL_ID is the call's id as 'toolfleet approvals list' and 'agent get' show it
(RUN_ID/TURN/INDEX): it names its run. The older form RUN_ID CALL_ID works too.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			runID, callID, err := callOwner("run", args)
			if err != nil {
				return err
			}
			c, err := af.runs()
			if err != nil {
				return err
			}
			if _, err := c.DecideApproval(cmd.Context(), connect.NewRequest(&toolfleetv1.DecideApprovalRequest{
				RunId: runID, CallId: callID, Approved: approve, Reason: reason})); err != nil {
				return err
			}
			return out.done(cmd.OutOrStdout(), fmt.Sprintf("%s %s (run %s)", decided(approve), callID, runID),
				decision{RunID: runID, CallID: callID, Decision: decided(approve)})
		},
	}
	if !approve {
		cmd.Flags().StringVar(&reason, "reason", "", "why; shown to the model")
	}
	return cmd
}

// decided is the confirmation word of an approval decision.
func decided(approve bool) string {
	if approve {
		return "approved"
	}
	return "denied"
}

// callOwner reads the arguments of approve and deny: CALL_ID alone, whose
// part before the first "/" is its run or program (ids.RunCall,
// ids.ProgramCall), or the older OWNER_ID CALL_ID.
func callOwner(kind string, args []string) (owner, callID string, err error) {
	callID = args[len(args)-1]
	if !strings.Contains(callID, "/") || ids.ProgramOf(callID) == "" {
		return "", "", fmt.Errorf("%q is not a call id: copy one from 'toolfleet approvals list' (a %s's call ids start with the %s id and a /)", callID, kind, kind)
	}
	owner = ids.ProgramOf(callID)
	if len(args) == 2 && args[0] != owner {
		return "", "", fmt.Errorf("call %s belongs to %s %s, not %s: give the call id alone", callID, kind, owner, args[0])
	}
	return owner, callID, nil
}

func newAgentCancelCommand(af *gatewayFlags, out *output) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Cancel a run and its in-flight calls",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.runs()
			if err != nil {
				return err
			}
			if _, err := c.CancelRun(cmd.Context(), connect.NewRequest(&toolfleetv1.CancelRunRequest{RunId: args[0]})); err != nil {
				return err
			}
			return out.done(cmd.OutOrStdout(), fmt.Sprintf("cancelling run %s (see it end with: toolfleet agent get %s)", args[0], args[0]),
				change{RunID: args[0], Change: "cancelling"})
		},
	}
}

func newAgentSendCommand(af *gatewayFlags, out *output) *cobra.Command {
	var watch bool
	cmd := &cobra.Command{
		Use:   "send RUN_ID MESSAGE",
		Short: "Send a follow-up message to a run that answered (it takes another turn)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := af.runs()
			if err != nil {
				return err
			}
			// The run's turns so far: its watch replays them, and the answer
			// to this message is the first "completed" after them.
			var turns int32
			if watch {
				got, err := c.GetRun(cmd.Context(), connect.NewRequest(&toolfleetv1.GetRunRequest{RunId: args[0]}))
				if err != nil {
					return err
				}
				turns = got.Msg.GetTurns()
			}
			if _, err := c.SendMessage(cmd.Context(), connect.NewRequest(&toolfleetv1.SendMessageRequest{
				RunId: args[0], Message: llm.User(args[1])})); err != nil {
				return err
			}
			if !watch {
				return out.done(cmd.OutOrStdout(), fmt.Sprintf("sent to run %s (follow it with: toolfleet agent watch %s)", args[0], args[0]),
					change{RunID: args[0], Change: "sent"})
			}
			return watchRun(cmd.Context(), c, args[0], 0, cmd.OutOrStdout(), out, turns)
		},
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "watch the run until it answers again")
	return cmd
}

// errReportedf is an error already shown to the user.
func errReportedf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errReported}, args...)...)
}

// listedStatus is a listed run's status as `agent get` words it; a run
// started without search attributes shows its workflow's state instead.
func listedStatus(r *toolfleetv1.RunSummary) string {
	if r.GetStatus() == toolfleetv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		return r.GetState()
	}
	return strings.ToLower(strings.TrimPrefix(r.GetStatus().String(), "RUN_STATUS_"))
}

// readBounded reads at most limit+1 bytes of path: enough for the reader to
// refuse a larger file without holding all of it.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}
