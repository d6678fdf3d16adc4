package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// The views of what the CLI prints: -o text (tables with a header row for
// lists, labelled lines for one item), -o json (protojson; one array for
// lists, one object per line for a stream of events) and -o yaml (the same
// document as YAML). Every command that prints data goes through output.

// output is the -o flag of every command that prints data.
type output struct {
	mode string // auto, text, json, yaml
}

// outputModes are the values -o takes.
var outputModes = []string{"auto", "text", "json", "yaml"}

// register declares -o on fs.
func (o *output) register(fs *pflag.FlagSet) {
	fs.StringVarP(&o.mode, "output", "o", "auto", "output: auto (text on a terminal, JSON when piped), text, json or yaml")
}

func (o output) validate() error {
	if !slices.Contains(outputModes, o.mode) {
		return fmt.Errorf("--output %q: want auto, text, json or yaml", o.mode)
	}
	return nil
}

// structured reports whether w gets a document (JSON or YAML) rather than
// text: always with -o json or yaml, never with -o text, and with -o auto
// unless w is a terminal.
func (o output) structured(w io.Writer) bool {
	switch o.mode {
	case "json", "yaml":
		return true
	case "text":
		return false
	}
	return !isTerminal(w)
}

// chosen reports whether -o json or yaml was given: what prints a line of
// text even when piped (an id, a token, a confirmation, a stream of events,
// a check's verdict) prints a document only then.
func (o output) chosen() bool {
	return o.mode == "json" || o.mode == "yaml"
}

// writeJSON prints the JSON document b: as YAML with -o yaml, else indented.
func (o output) writeJSON(w io.Writer, b []byte) error {
	if o.mode != "yaml" {
		return writeIndented(w, b)
	}
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		return err
	}
	_, err = w.Write(y)
	return err
}

// value prints v as a document: protojson for a message, else encoding/json.
func (o output) value(w io.Writer, v any) error {
	if m, ok := v.(proto.Message); ok {
		return o.proto(w, m)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return o.writeJSON(w, b)
}

// proto prints one message as a document.
func (o output) proto(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	return o.writeJSON(w, b)
}

// streamItem prints one item of a stream (a run's or a program's events): a
// line of compact JSON, or a YAML document after "---".
func (o output) streamItem(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	if o.mode == "yaml" {
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
		return o.writeJSON(w, b)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// done confirms a change: the line for people, or the object for programs.
func (o output) done(w io.Writer, line string, v any) error {
	if o.chosen() {
		return o.value(w, v)
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

// protoListJSON is messages as one JSON array.
func protoListJSON[M proto.Message](ms []M) ([]byte, error) {
	items := make([]json.RawMessage, len(ms))
	for i, m := range ms {
		b, err := protojson.Marshal(m)
		if err != nil {
			return nil, err
		}
		items[i] = b
	}
	return json.Marshal(items)
}

// protoList prints messages as one array.
func protoList[M proto.Message](o output, w io.Writer, ms []M) error {
	b, err := protoListJSON(ms)
	if err != nil {
		return err
	}
	return o.writeJSON(w, b)
}

// writeProto prints one message as indented protojson (the schemas in
// `tools describe`'s text).
func writeProto(w io.Writer, m proto.Message) error {
	return output{mode: "json"}.proto(w, m)
}

// writeIndented re-indents JSON (protojson's spacing is deliberately unstable).
func writeIndented(w io.Writer, b []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
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

// pending prints items as one array of the approvals' protojson with "kind"
// and "runId" or "programId" added.
func (o output) pending(w io.Writer, items []pendingItem) error {
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
	return o.value(w, all)
}

// decision is what approve and deny print with -o json or yaml.
type decision struct {
	RunID     string `json:"runId,omitempty"`
	ProgramID string `json:"programId,omitempty"`
	CallID    string `json:"callId"`
	Decision  string `json:"decision"` // approved or denied
}

// change is what cancel and send print with -o json or yaml.
type change struct {
	RunID     string `json:"runId,omitempty"`
	ProgramID string `json:"programId,omitempty"`
	Change    string `json:"change"` // cancelling or sent
}
