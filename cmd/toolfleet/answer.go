package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// answerer sends one answer of a run's or program's question.
type answerer func(ctx context.Context, owner, callID, key, action string, content *structpb.Struct) (*toolfleetv1.AnswerInputResponse, error)

// newAgentAnswerCommand is `toolfleet agent answer CALL_ID`.
func newAgentAnswerCommand(af *gatewayFlags) *cobra.Command {
	return newAnswerCommand("run", "agent get", func(ctx context.Context, owner, callID, key, action string, content *structpb.Struct) (*toolfleetv1.AnswerInputResponse, error) {
		c, err := af.runs()
		if err != nil {
			return nil, err
		}
		resp, err := c.AnswerInput(ctx, connect.NewRequest(&toolfleetv1.AnswerInputRequest{RunId: owner, CallId: callID, Key: key, Action: action, Content: content}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	})
}

// newProgramAnswerCommand is `toolfleet program answer CALL_ID`.
func newProgramAnswerCommand(gf *gatewayFlags) *cobra.Command {
	return newAnswerCommand("program", "program get", func(ctx context.Context, owner, callID, key, action string, content *structpb.Struct) (*toolfleetv1.AnswerInputResponse, error) {
		c, err := gf.programs()
		if err != nil {
			return nil, err
		}
		resp, err := c.AnswerProgramInput(ctx, connect.NewRequest(&toolfleetv1.AnswerProgramInputRequest{ProgramId: owner, CallId: callID, Key: key, Action: action, Content: content}))
		if err != nil {
			return nil, err
		}
		return &toolfleetv1.AnswerInputResponse{Key: resp.Msg.GetKey(), Open: resp.Msg.GetOpen()}, nil
	})
}

// newAnswerCommand answers a tool's question pending in a run or a program
// (kind), sent with send.
func newAnswerCommand(kind, getVerb string, send answerer) *cobra.Command {
	var (
		key, content    string
		fields          []string
		decline, cancel bool
		connected       bool
	)
	cmd := &cobra.Command{
		Use:   "answer CALL_ID",
		Short: "Answer a tool's question pending in a " + kind + " (the call goes on with the answer)",
		Long: `Answer a tool's question pending in a ` + kind + `: the call goes on with the answer.

CALL_ID is the call's id as 'toolfleet approvals list' and '` + getVerb + `' show it.
Give the answer's fields as one JSON object (--json '{"name":"Ada"}') or one
--field k=v each (a value that reads as JSON — a number, true, false — is
taken as such; quote it in JSON to keep a string); they must match the
question's schema. --decline or --cancel answer without content. A call that
asks several questions at once needs --key for each.

A call waiting for a connection ('WAITS FOR connection github') goes on
by itself once you connect the account (toolfleet connections connect
github); --connected answers it by hand (if the gateway could not, or to
retry); --decline tells the call you will not connect.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			owner, callID, err := callOwner(kind, args)
			if err != nil {
				return err
			}
			var body *structpb.Struct
			action := "accept"
			switch {
			case decline && cancel:
				return errors.New("give --decline or --cancel, not both")
			case connected && (decline || cancel || content != "" || len(fields) > 0):
				return errors.New("--connected carries no content and no other answer")
			case connected:
				// A call waiting for a connection: accept without content.
			case decline || cancel:
				if content != "" || len(fields) > 0 {
					return errors.New("--decline and --cancel carry no content: drop --json and --field")
				}
				action = "decline"
				if cancel {
					action = "cancel"
				}
			default:
				if body, err = answerContent(content, fields); err != nil {
					return err
				}
			}
			resp, err := send(cmd.Context(), owner, callID, key, action, body)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "answered %s %s (%s %s)", callID, resp.GetKey(), kind, owner)
			if n := resp.GetOpen(); n > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "; %d more question(s) of this call wait", n)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&key, "key", "", "the question's key (needed when the call asks several)")
	f.StringVar(&content, "json", "", "the answer's fields as a JSON object")
	f.StringArrayVar(&fields, "field", nil, "one answer field as k=v (repeatable)")
	f.BoolVar(&decline, "decline", false, "decline to answer")
	f.BoolVar(&cancel, "cancel", false, "cancel the question")
	f.BoolVar(&connected, "connected", false, "a call waiting for a connection: the account is connected now, make the call again")
	return cmd
}

// answerContent reads --json or --field into the answer's content.
func answerContent(content string, fields []string) (*structpb.Struct, error) {
	if content != "" && len(fields) > 0 {
		return nil, errors.New("give the answer with --json or with --field, not both")
	}
	s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	if content != "" {
		if err := protojson.Unmarshal([]byte(content), s); err != nil {
			return nil, fmt.Errorf("--json: not a JSON object: %w", err)
		}
		return s, nil
	}
	if len(fields) == 0 {
		return nil, errors.New("give the answer with --json '{...}' or --field k=v (or --decline / --cancel)")
	}
	for _, kv := range fields {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--field %q: want k=v", kv)
		}
		s.Fields[k] = fieldValue(v)
	}
	return s, nil
}

// fieldValue reads a --field value: JSON numbers, booleans and quoted
// strings as such, anything else as a string.
func fieldValue(v string) *structpb.Value {
	if v == "true" || v == "false" {
		return structpb.NewBoolValue(v == "true")
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return structpb.NewNumberValue(n)
	}
	var s string
	if strings.HasPrefix(v, `"`) && json.Unmarshal([]byte(v), &s) == nil {
		return structpb.NewStringValue(s)
	}
	return structpb.NewStringValue(v)
}

// printQuestions lists a run's pending questions with the command that
// answers them.
func printQuestions(w io.Writer, verb string, qs []*toolfleetv1.PendingQuestion) {
	if len(qs) == 0 {
		return
	}
	fmt.Fprintln(w, "Pending questions (answer with: toolfleet "+verb+" answer CALL_ID --json '{...}' [--key KEY]):")
	tw := newTable(w, "  CALL ID", "KEY", "TOOL", "QUESTION", "FIELDS", "WAITING SINCE")
	for _, q := range qs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", q.GetCallId(), q.GetKey(), q.GetToolId(), oneLine(q.GetMessage(), 60),
			schemaFields(q.GetRequestedSchema()), when(q.GetRequestedAt()))
	}
	_ = tw.Flush()
}

// schemaFields names a question's fields with their types, required ones
// marked with *.
func schemaFields(s *structpb.Struct) string {
	props := s.GetFields()["properties"].GetStructValue().GetFields()
	required := map[string]bool{}
	for _, r := range s.GetFields()["required"].GetListValue().GetValues() {
		required[r.GetStringValue()] = true
	}
	var out []string
	for name, p := range props {
		t := p.GetStructValue().GetFields()["type"].GetStringValue()
		if required[name] {
			name += "*"
		}
		out = append(out, name+":"+t)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// oneLine is s on one line, cut to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
