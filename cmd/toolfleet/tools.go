package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/config"
	"github.com/toolfleet/toolfleet/internal/jsonerr"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/sdk/llm/wire"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

func newToolsCommand() *cobra.Command {
	var gf gatewayFlags
	out := output{}
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List, describe, search and call the tools a gateway serves",
		Long: `tools talks to a toolfleet gateway (gRPC; --connect for Connect over HTTP).

Output is text on a terminal and JSON when piped (-o to choose). Exit codes of
'tools call' (and of every subcommand on failure):
  0 success   1 usage or other error   2 server error (the tool did not run)
  3 validation error (the input broke the contract)   4 execution error (the tool failed)`,
	}
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
	cmd.AddCommand(newToolsListCommand(&gf, &out), newToolsDescribeCommand(&gf, &out),
		newToolsSearchCommand(&gf, &out), newToolsCallCommand(&gf, &out), newToolsFetchResultCommand(&gf))
	for _, c := range append(cmd.Commands(), cmd) {
		c.SilenceErrors = true // main prints the error once (or not, when the command reported it)
	}
	return cmd
}

// withClient runs fn with a client of the gateway and maps its error to an exit code.
func withClient(cmd *cobra.Command, gf *gatewayFlags, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := gf.client()
	if err != nil {
		return err
	}
	defer c.Close()
	err = gf.explain(fn(cmd.Context(), c))
	var reported *exitError
	var down *noGatewayError
	if err == nil || errors.As(err, &reported) {
		return err
	}
	if errors.As(err, &down) { // the tool did not run: a server error's exit code
		fmt.Fprintln(cmd.ErrOrStderr(), "toolfleet:", err)
		return &exitError{code: exitServer}
	}
	if code := exitCode(err); code != exitOther {
		fmt.Fprintln(cmd.ErrOrStderr(), "toolfleet:", err)
		return &exitError{code: code}
	}
	return err
}

func newToolsListCommand(gf *gatewayFlags, out *output) *cobra.Command {
	req := &toolfleetv1.ListToolsRequest{}
	var format string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the served tools (latest versions; --all-versions for every one)",
		Long: `list prints the served tools. --format renders them for a model provider
(openai, openai-responses, anthropic, gemini, bedrock), for MCP (mcp: a tools/list
result) or as toolfleet definitions (canonical, the default); formats other
than canonical always print JSON.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withClient(cmd, gf, func(ctx context.Context, c *client.Client) error {
				defs, err := c.Tools(ctx, req)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				switch format {
				case "canonical", "":
				case "mcp":
					b, err := wire.MCPToolsList(defs)
					if err != nil {
						return err
					}
					return out.writeJSON(w, b)
				default:
					f, err := wire.FormatByName(format)
					if err != nil {
						return fmt.Errorf("--format %q: want canonical, mcp, openai, openai-responses, anthropic, gemini or bedrock", format)
					}
					b, err := f.RenderTools(defs, false)
					if err != nil {
						return err
					}
					return out.writeJSON(w, b)
				}
				if out.structured(w) {
					return protoList(*out, w, defs)
				}
				tw := newTable(w, "ID", "MODEL NAME", "DESCRIPTION")
				for _, d := range defs {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", d.GetId(), d.GetModelName(), firstLine(d.GetDescription(), 70))
				}
				return tw.Flush()
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "canonical", "canonical, mcp, openai, openai-responses, anthropic, gemini or bedrock")
	f.StringVar(&req.Toolkit, "toolkit", "", "only this toolkit")
	f.StringVar(&req.Filter, "filter", "", "only tools whose id matches this glob, e.g. 'Calculator.*'")
	f.BoolVar(&req.AllVersions, "all-versions", false, "every served version, not only the latest")
	return cmd
}

func newToolsDescribeCommand(gf *gatewayFlags, out *output) *cobra.Command {
	return &cobra.Command{
		Use:   "describe ID",
		Short: "Show one tool: description, hints, policy and schemas",
		Long:  "describe shows a tool; ID resolves like a call's tool id: Toolkit.Tool, Toolkit.Tool@1.2.3, Toolkit.Tool@1 or the model name Toolkit_Tool.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, gf, func(ctx context.Context, c *client.Client) error {
				d, err := c.GetTool(ctx, args[0])
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if out.structured(w) {
					return out.proto(w, d)
				}
				return describe(w, d)
			})
		},
	}
}

func describe(w io.Writer, d *toolfleetv1.ToolDefinition) error {
	fmt.Fprintf(w, "%s  (model name %s)\n", d.GetId(), d.GetModelName())
	if t := d.GetTitle(); t != "" {
		fmt.Fprintf(w, "title: %s\n", t)
	}
	fmt.Fprintf(w, "\n%s\n\n", d.GetDescription())
	h := d.GetHints()
	fmt.Fprintf(w, "hints: read_only=%v destructive=%v idempotent=%v open_world=%v\n", h.GetReadOnly(), h.GetDestructive(), h.GetIdempotent(), h.GetOpenWorld())
	r := d.GetRequirements()
	if r.GetTimeout() != nil {
		fmt.Fprintf(w, "timeout: %s\n", r.GetTimeout().AsDuration())
	}
	if len(r.GetScopes()) > 0 {
		fmt.Fprintf(w, "scopes: %s\n", strings.Join(r.GetScopes(), ", "))
	}
	if r.GetRequiresApproval() {
		fmt.Fprintln(w, "requires approval: yes")
	}
	for _, s := range []struct {
		name string
		msg  proto.Message
		set  bool
	}{{"input schema", d.GetInputSchema(), d.GetInputSchema() != nil}, {"output schema", d.GetOutputSchema(), d.GetOutputSchema() != nil}} {
		if !s.set {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", s.name)
		if err := writeProto(w, s.msg); err != nil {
			return err
		}
	}
	for _, ex := range d.GetExamples() {
		fmt.Fprintf(w, "\nexample (%s): %s\n", ex.GetDescription(), ex.GetInputJson())
	}
	return nil
}

func newToolsSearchCommand(gf *gatewayFlags, out *output) *cobra.Command {
	req := &toolfleetv1.SearchToolsRequest{}
	cmd := &cobra.Command{
		Use:   "search QUERY",
		Short: "Rank the served tools for a natural-language query",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Query = strings.Join(args, " ")
			return withClient(cmd, gf, func(ctx context.Context, c *client.Client) error {
				resp, err := c.SearchTools(ctx, req)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if out.structured(w) {
					return out.proto(w, resp)
				}
				tw := newTable(w, "SCORE", "ID", "DESCRIPTION")
				for _, r := range resp.GetResults() {
					fmt.Fprintf(tw, "%.2f\t%s\t%s\n", r.GetScore(), r.GetTool().GetId(), firstLine(r.GetTool().GetDescription(), 70))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().Int32Var(&req.Limit, "limit", 5, "most results")
	cmd.Flags().StringVar(&req.Toolkit, "toolkit", "", "only this toolkit")
	return cmd
}

func newToolsCallCommand(gf *gatewayFlags, out *output) *cobra.Command {
	var callID, approver string
	var allowHandle bool
	cmd := &cobra.Command{
		Use:   "call ID [JSON | @FILE | -]",
		Short: "Call a tool with a JSON object as input (inline, from a file, or stdin with -)",
		Long: `call runs one tool through the gateway. The input is a JSON object given
inline ('{"a": 1}'), read from a file (@input.json) or from stdin (-); none
means {}. Retries follow the tool's retry policy. A tool whose contract
requires approval (KV.Delete) needs --approver and a token with tools:approve
(with auth off, any caller may approve). With --allow-result-handle a result
over the tool's size limit is kept by the gateway (it needs NATS) and the call
prints its handle; 'toolfleet tools fetch-result ID' reads it. Exit codes: 0
success, 2 server error, 3 validation error, 4 execution error, 1 anything else.`,
		Example: `  toolfleet tools call Calculator.Add '{"a": 2, "b": 3}'
  echo '{"expression": "2**10"}' | toolfleet tools call Calculator_Evaluate -
  toolfleet tools call KV.Delete '{"key": "user.ana.language"}' --approver ana`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readInput(cmd.InOrStdin(), args[1:])
			if err != nil {
				return err
			}
			input, err := client.InputOf(raw)
			var bad *jsonerr.Error
			if errors.As(err, &bad) {
				return fmt.Errorf("the input must be a JSON object: %s", bad.Msg)
			} else if err != nil {
				return err
			}
			return withClient(cmd, gf, func(ctx context.Context, c *client.Client) error {
				req := &toolfleetv1.CallToolRequest{ToolId: args[0], Input: input, CallId: callID, AllowResultHandle: allowHandle}
				if approver != "" {
					req.Approval = &toolfleetv1.Approval{Approver: approver}
				}
				res, err := c.CallTool(ctx, req)
				if err != nil {
					return reportFailure(cmd, out, gf.explain(err))
				}
				return reportResult(cmd, out, res)
			})
		},
	}
	cmd.Flags().StringVar(&callID, "call-id", "", "idempotency key, scoped to you and the tool: a repeat with the same input returns the stored result, other input is refused (default: none, or a new one when a retry of a tool with side effects needs it)")
	cmd.Flags().StringVar(&approver, "approver", "", "who approved this call, for a tool whose contract requires approval (needs the tools:approve scope)")
	cmd.Flags().BoolVar(&allowHandle, "allow-result-handle", false, "a result over the tool's size limit is kept by the gateway and the call prints its handle (read it with fetch-result)")
	return cmd
}

func newToolsFetchResultCommand(gf *gatewayFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "fetch-result ID",
		Short: "Write a result kept behind a handle to stdout",
		Long: `fetch-result writes the bytes of a result the gateway kept behind a handle
(a call made with --allow-result-handle whose result was over the tool's size
limit) to stdout, as stored (the tool's JSON). Only the caller that made the
call can read it, until the handle's expires_at; --timeout bounds the whole read.`,
		Example: `  toolfleet tools fetch-result 3f2a9c0e5b7d41e68a0c2f9d1b3e5a7c > result.json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, gf, func(ctx context.Context, c *client.Client) error {
				r, err := c.FetchResult(ctx, args[0])
				if err != nil {
					return err
				}
				defer r.Close()
				if _, err := io.Copy(cmd.OutOrStdout(), r); err != nil {
					return fmt.Errorf("fetch-result %s: %w", args[0], err)
				}
				return nil
			})
		},
	}
}

// readInput returns the call input: {} with no argument, stdin for "-", a file for @path.
func readInput(stdin io.Reader, args []string) ([]byte, error) {
	if len(args) == 0 {
		return []byte("{}"), nil
	}
	switch a := args[0]; {
	case a == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			return nil, fmt.Errorf("read the input from stdin: %w", err)
		}
		return b, nil
	case strings.HasPrefix(a, "@"):
		b, err := os.ReadFile(a[1:])
		if err != nil {
			return nil, fmt.Errorf("read the input: %w", err)
		}
		return b, nil
	default:
		return []byte(a), nil
	}
}

// reportResult prints a call that reached the tool: the value, or the execution error.
func reportResult(cmd *cobra.Command, out *output, res *client.Result) error {
	w := cmd.OutOrStdout()
	if out.structured(w) {
		if err := out.proto(w, res.Response()); err != nil {
			return err
		}
		return resultExit(res)
	}
	// The tool's lines for its caller go to stderr, so stdout stays the result.
	for _, l := range res.Logs {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", tool.LogLevelName(l.GetLevel()), l.GetMessage())
	}
	if n := res.LogsDropped; n > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "(%d more log lines of this call were not relayed)\n", n)
	}
	if h := res.Handle; h != nil {
		fmt.Fprintf(w, "the result (%d bytes, %s) is kept behind a handle until %s; read it with\n  toolfleet tools fetch-result %s\npreview: %s\n",
			h.GetSizeBytes(), h.GetContentType(), h.GetExpiresAt().AsTime().Format(time.RFC3339), h.GetId(), firstLine(h.GetPreview(), 120))
	} else if res.Success {
		b, err := json.MarshalIndent(res.Value.AsInterface(), "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
	} else {
		e := res.Error
		fmt.Fprintf(w, "%s failed: %s\n", res.ToolID, e.GetMessage())
		if h := e.GetAdditionalPromptContent(); h != "" {
			fmt.Fprintf(w, "hint: %s\n", h)
		}
		if d := e.GetDeveloperMessage(); d != "" {
			fmt.Fprintf(w, "developer message: %s\n", d)
		}
		if e.GetCanRetry() {
			fmt.Fprintf(w, "retryable; gave up after %d attempts (call id %s)\n", res.Attempts, res.CallID)
		}
	}
	return resultExit(res)
}

// resultExit is the exit of a call that reached the tool.
func resultExit(res *client.Result) error {
	if !res.Success {
		return &exitError{code: exitExecution}
	}
	return nil
}

// reportFailure prints a failure before the tool ran.
func reportFailure(cmd *cobra.Command, out *output, err error) error {
	code := exitCode(err)
	if code == exitOther {
		return err
	}
	w := cmd.OutOrStdout()
	var se *client.ServerError
	var ve *client.ValidationError
	if out.structured(w) {
		body := map[string]any{}
		switch {
		case errors.As(err, &ve):
			body = map[string]any{"kind": "validation", "callId": ve.CallID, "message": ve.Message, "parameterErrors": ve.ParameterErrors}
		case errors.As(err, &se):
			body = map[string]any{"kind": "server", "callId": se.CallID, "code": se.Code.String(), "message": se.Message}
			if se.DeveloperMessage != "" {
				body["developerMessage"] = se.DeveloperMessage
			}
		}
		if err := out.value(w, map[string]any{"error": body}); err != nil {
			return err
		}
		return &exitError{code: code}
	}
	switch {
	case errors.As(err, &ve):
		fmt.Fprintln(w, strings.ReplaceAll(ve.Text(), "\n- ", "\n  "))
	case errors.As(err, &se):
		fmt.Fprintf(w, "the tool did not run (%s): %s\n", se.Code, se.Message)
		if se.DeveloperMessage != "" {
			fmt.Fprintf(w, "developer message: %s\n", se.DeveloperMessage)
		}
	}
	return &exitError{code: code}
}

// firstLine is s's first line, cut to n runes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
