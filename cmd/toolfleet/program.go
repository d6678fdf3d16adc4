package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/sdk/client"
)

func newProgramCommand() *cobra.Command {
	var gf gatewayFlags
	cmd := &cobra.Command{
		Use:   "program",
		Short: "Check and run Starlark programs that call many tools durably",
		Long: `program runs Starlark scripts inside a Temporal workflow: each tool call is a
durable activity, so a crash mid-script resumes without repeating finished calls.
See docs/programs.md for the builtins and limits.

Every verb prints text on a terminal and JSON when piped (-o text|json|yaml to
choose); a program's result is JSON (or YAML with -o yaml).`,
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
	cmd.AddCommand(newProgramCheckCommand(&gf, &out), newProgramRunCommand(&gf, &out), newProgramStubsCommand(&gf, &out),
		newProgramGetCommand(&gf, &out), newProgramListCommand(&gf, &out), newProgramWatchCommand(&gf, &out), newProgramDecideCommand(&gf, &out, true),
		newProgramDecideCommand(&gf, &out, false), newProgramCancelCommand(&gf, &out), newProgramAnswerCommand(&gf))
	explainErrors(cmd, &gf)
	return cmd
}

func newProgramCheckCommand(gf *gatewayFlags, out *output) *cobra.Command {
	var offline bool
	cmd := &cobra.Command{
		Use:   "check FILE.star",
		Short: "Compile a program and check the tools it would call against the gateway",
		Long: `check compiles FILE.star and lists the tools it would call. When a gateway is
named (--gateway, $TOOLFLEET_GATEWAY) or a toolfleet dev runs in this folder, it
also looks every tool up there: a tool the gateway does not serve is an error
naming the closest tools it does. Otherwise, or with --offline, it only compiles.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := readSource(args[0])
			if err != nil {
				return err
			}
			chk, err := program.Compile(filepath.Base(args[0]), src)
			if err != nil {
				return err
			}
			tools := toolsOf(chk)
			var served map[string]string // tool name → the id the gateway resolves it to
			if f := cmd.Flag("gateway"); f != nil && f.Changed && !offline && len(tools) > 0 {
				defs, err := resolveTools(cmd.Context(), gf, args[0], tools)
				if err != nil {
					return err
				}
				if err := checkArguments(args[0], chk, defs); err != nil {
					return err
				}
				served = map[string]string{}
				for name, d := range defs {
					served[name] = d.GetId()
				}
			}
			w := cmd.OutOrStdout()
			if out.chosen() {
				return out.value(w, checkReport(args[0], chk, tools, served))
			}
			fmt.Fprintf(w, "%s compiles.\n", args[0])
			switch {
			case len(tools) == 0:
				fmt.Fprintln(w, "It calls no tools.")
			case served != nil:
				fmt.Fprintf(w, "Tools it would call (the gateway at %s serves each):\n", gf.Gateway)
				for _, t := range tools {
					fmt.Fprintln(w, "  "+served[t])
				}
			default:
				fmt.Fprintln(w, "Tools it would call (not looked up: pass --gateway, or run toolfleet dev in this folder, to check them):")
				for _, t := range tools {
					fmt.Fprintln(w, "  "+t)
				}
			}
			if !chk.HasResult {
				fmt.Fprintln(w, "It sets no top-level `result`: its result will be null.")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&offline, "offline", false, "only compile: do not look the tools up at the gateway")
	return cmd
}

// checkedTool is one tool of `program check -o json`: its name in the
// script and, when the gateway was asked, the id it resolves to.
type checkedTool struct {
	Name string `json:"name"`
	ID   string `json:"id,omitempty"`
}

// checkReport is what `program check -o json|yaml` prints.
func checkReport(file string, chk *program.Check, tools []string, served map[string]string) any {
	list := make([]checkedTool, len(tools))
	for i, t := range tools {
		list[i] = checkedTool{Name: t, ID: served[t]}
	}
	return struct {
		File      string        `json:"file"`
		Compiles  bool          `json:"compiles"`
		Resolved  bool          `json:"resolved"` // the gateway was asked about every tool
		Tools     []checkedTool `json:"tools"`
		HasResult bool          `json:"hasResult"`
	}{file, true, served != nil, list, chk.HasResult}
}

// checkArguments checks the arguments of every call whose tool the source
// names against that tool's input schema (program.CheckCall): one error
// listing every problem with its position.
func checkArguments(file string, chk *program.Check, defs map[string]*toolfleetv1.ToolDefinition) error {
	var problems []string
	for _, site := range chk.Sites {
		def := defs[site.Tool]
		if kit, tool, ok := strings.Cut(site.Tool, "_"); def == nil && ok {
			def = defs[kit+"."+tool]
		}
		if def == nil {
			continue
		}
		t, err := program.ToolOf(def)
		if err != nil {
			return err
		}
		for _, p := range program.CheckCall(t, site) {
			problems = append(problems, "  "+site.Position+": "+p)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s compiles, but %d of its calls do not fit their tools' inputs:\n%s", file, len(problems), strings.Join(problems, "\n"))
	}
	return nil
}

// resolveTools looks every tool up at the gateway, as a call would resolve
// it, and returns their definitions. Tools the gateway does not serve are
// one error, each with the gateway's closest tools.
func resolveTools(ctx context.Context, gf *gatewayFlags, file string, tools []string) (map[string]*toolfleetv1.ToolDefinition, error) {
	c, err := gf.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	served := map[string]*toolfleetv1.ToolDefinition{}
	var unknown []string
	for _, t := range tools {
		def, err := c.GetTool(ctx, t)
		var se *client.ServerError
		switch {
		case err == nil:
			served[t] = def
		case errors.As(err, &se) && se.Answered && se.Code == codes.NotFound:
			unknown = append(unknown, "  "+se.Message)
		case errors.As(err, &se) && !se.Answered && gf.refused.Load():
			return nil, fmt.Errorf("%s compiles, but its tools cannot be checked: %w; or pass --offline to only compile", file, &noGatewayError{addr: gf.Gateway})
		case errors.As(err, &se) && !se.Answered:
			return nil, fmt.Errorf("%s compiles, but its tools cannot be checked: the gateway at %s is not answering (%s); "+
				"start it with 'toolfleet dev', or pass --offline to only compile", file, gf.Gateway, se.Message)
		default:
			return nil, fmt.Errorf("%s compiles, but looking up %s at the gateway at %s failed: %w", file, t, gf.Gateway, err)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%s calls %d tool(s) the gateway at %s does not serve:\n%s", file, len(unknown), gf.Gateway, strings.Join(unknown, "\n"))
	}
	return served, nil
}

// toolsOf names the tools a checked script refers to: literal call() ids, and
// stubs turned back into tool names (Calculator_Add → Calculator.Add).
func toolsOf(chk *program.Check) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, c := range chk.Calls {
		add(c)
	}
	for _, s := range chk.Stubs {
		if kit, tool, ok := strings.Cut(s, "_"); ok && kit != "" && tool != "" {
			add(kit + "." + tool)
		}
	}
	return out
}

func readSource(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, program.MaxSourceBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > program.MaxSourceBytes {
		return "", fmt.Errorf("%s is over %d bytes", path, program.MaxSourceBytes)
	}
	return string(b), nil
}

func newProgramStubsCommand(gf *gatewayFlags, out *output) *cobra.Command {
	var prompt bool
	cmd := &cobra.Command{
		Use:   "stubs GLOB...",
		Short: "Print the stubs programs get for tools (signature and description), e.g. 'Calculator.*'",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, globs []string) error {
			return withClient(cmd, gf, func(ctx context.Context, c *client.Client) error {
				var tools []program.Tool
				for _, g := range globs {
					defs, err := c.Tools(ctx, &toolfleetv1.ListToolsRequest{Filter: g})
					if err != nil {
						return err
					}
					for _, d := range defs {
						t, err := program.ToolOf(d)
						if err != nil {
							return err
						}
						tools = append(tools, t)
					}
				}
				if len(tools) == 0 {
					return fmt.Errorf("no tool matches %q", globs)
				}
				w := cmd.OutOrStdout()
				if out.chosen() {
					return out.value(w, stubsReport(tools))
				}
				if prompt {
					_, err := io.WriteString(w, program.PromptSection(tools))
					return err
				}
				for _, t := range tools {
					fmt.Fprintln(w, t.Doc())
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&prompt, "prompt", false, "print the whole system-prompt section a model that writes programs gets")
	return cmd
}

// stubsReport is what `program stubs -o json|yaml` prints: per tool its
// name, stub (the function a program calls) and the stub's text.
func stubsReport(tools []program.Tool) any {
	type stub struct {
		Name        string `json:"name"`
		Stub        string `json:"stub"`
		Description string `json:"description,omitempty"`
		Doc         string `json:"doc"`
	}
	list := make([]stub, len(tools))
	for i, t := range tools {
		list[i] = stub{Name: t.Name, Stub: t.ModelName, Description: t.Description, Doc: t.Doc()}
	}
	return list
}

func newProgramRunCommand(gf *gatewayFlags, out *output) *cobra.Command {
	var (
		kv    []string
		tools []string
		id    string
		watch bool
	)
	cmd := &cobra.Command{
		Use:   "run FILE.star",
		Short: "Run a program through the gateway's ProgramService and print its result",
		Long: `run starts FILE.star and waits for its result (JSON on stdout).

--arg k=v sets args["k"] (v is parsed as JSON when it can be, else it is a string).
--tool sets the tools the program may call; by default, those the script names.
--watch prints the program's events (prints, tool calls, approvals) as they happen.
--timeout bounds the wait for the result; a program still running then keeps
running (look again with 'toolfleet program watch ID' or 'get ID').`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := readSource(args[0])
			if err != nil {
				return err
			}
			chk, err := program.Compile(filepath.Base(args[0]), src)
			if err != nil {
				return err
			}
			if len(tools) == 0 {
				tools = toolsOf(chk)
			}
			argStruct, err := parseArgs(kv)
			if err != nil {
				return err
			}
			c, err := gf.programs()
			if err != nil {
				return err
			}
			sctx, cancel := context.WithTimeout(cmd.Context(), gf.Timeout)
			defer cancel()
			// Start it, then wait on its events (at most --timeout): a
			// quiet program is only quiet, and an orchestrator that restarts
			// meanwhile is waited for.
			req := &toolfleetv1.RunProgramRequest{ProgramId: id, Source: src, Filename: filepath.Base(args[0]),
				Args: argStruct, Tools: tools}
			res, err := c.RunProgram(sctx, connect.NewRequest(req))
			if err != nil {
				return err
			}
			if res.Msg.GetProgramError() != nil {
				return printOutcome(cmd, out, res.Msg.GetProgramId(), res.Msg.GetStatus(), res.Msg.GetResult(), res.Msg.GetProgramError())
			}
			return awaitProgram(cmd, out, c, res.Msg.GetProgramId(), 0, watch, gf.Timeout)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&kv, "arg", nil, "an argument k=v (repeatable)")
	f.StringArrayVar(&tools, "tool", nil, "a tool id or glob the program may call (repeatable); default: the tools the script names")
	f.StringVar(&id, "id", "", "program id (an idempotency key); generated when empty")
	f.BoolVar(&watch, "watch", false, "print the program's events while it runs")
	return cmd
}

// parseArgs turns k=v pairs into the args object.
func parseArgs(kv []string) (*structpb.Struct, error) {
	m := map[string]any{}
	for _, p := range kv {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--arg %q: want k=v", p)
		}
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil {
			x = v
		}
		m[k] = x
	}
	return structpb.NewStruct(m)
}

// printProgramEvent prints one event on one line.
func printProgramEvent(w io.Writer, ev *toolfleetv1.RunEvent) {
	line := ev.GetKind()
	if ev.GetToolId() != "" {
		line += " " + ev.GetToolId()
	}
	if ev.GetCallId() != "" {
		line += " [" + ev.GetCallId() + "]"
	}
	if m := ev.GetMessage(); m != "" {
		line += ": " + firstLine(m, 200)
	}
	if ev.GetKind() == "approval.requested" {
		line += fmt.Sprintf("  (toolfleet program approve %s, or deny)", ev.GetCallId())
	}
	fmt.Fprintln(w, line)
}

func printOutcome(cmd *cobra.Command, out *output, id string, status toolfleetv1.ProgramStatus, result *structpb.Value, pe *toolfleetv1.ProgramError) error {
	switch {
	case pe != nil:
		msg := pe.GetMessage()
		if pe.GetPosition() != "" {
			msg = pe.GetPosition() + ": " + msg
		}
		if pe.GetLine() != "" {
			msg += "\n\t" + pe.GetLine()
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "program %s failed: %s\n", id, msg)
		return &exitError{code: exitOther}
	case status != toolfleetv1.ProgramStatus_PROGRAM_STATUS_COMPLETED:
		fmt.Fprintf(cmd.ErrOrStderr(), "program %s is %s; see it with: toolfleet program get %s\n", id, strings.TrimPrefix(status.String(), "PROGRAM_STATUS_"), id)
		return &exitError{code: exitOther}
	}
	b, err := result.MarshalJSON()
	if err != nil {
		return err
	}
	return out.writeJSON(cmd.OutOrStdout(), b)
}
