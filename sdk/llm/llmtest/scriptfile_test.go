package llmtest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/llmtest"
)

const ticketScript = `# a run that opens a ticket and reads it back
turns:
  - text: Opening the ticket.
    calls:
      - tool: Tickets.Create@1.0.0
        id: created
        args:
          title: Printer on fire
          priority: PRIORITY_HIGH
          tags: [office, "${literal}"]
  - calls:
      - tool: Tickets_Get
        args: {id: "${created.ticket.id}", n: "${created.ticket.n}", note: "id ${created.ticket.id}, $${not a placeholder}"}
  - text: Ticket ${created.ticket.id} is open (${last.ticket.title}, tags ${created.ticket.tags[1]}).
`

func scriptTools() []*toolfleetv1.ToolDefinition {
	return []*toolfleetv1.ToolDefinition{
		{Id: "Tickets.Create@1.0.0", Toolkit: "Tickets", Name: "Create", ModelName: "Tickets_Create"},
		{Id: "Tickets.Get@1.0.0", Toolkit: "Tickets", Name: "Get", ModelName: "Tickets_Get"},
	}
}

func result(callID, content string) *toolfleetv1.Message {
	return llm.NewMessage(toolfleetv1.Role_ROLE_USER, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolResult{
		ToolResult: &toolfleetv1.ToolResult{CallId: callID, Content: content}}})
}

func TestScriptFileUnfilledPlaceholder(t *testing.T) {
	t.Parallel()
	m, err := llmtest.ParseScriptFile("turns.yaml", []byte(ticketScript))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := &llm.Request{Tools: scriptTools(), Messages: []*toolfleetv1.Message{llm.NewMessage(toolfleetv1.Role_ROLE_USER, llm.Text("open a ticket"))}}

	// Turn 1: the call with its literal arguments (a placeholder with no result yet would fail).
	m1, err := m.Complete(ctx, req)
	if err == nil || !strings.Contains(err.Error(), `no result of call "literal"`) || !strings.Contains(err.Error(), "turns.yaml:5: turn 1") {
		t.Fatalf("turn 1 with an unfillable placeholder: %v %v", m1, err)
	}
}

func TestScriptFilePlaceholders(t *testing.T) {
	t.Parallel()
	script := strings.Replace(ticketScript, `tags: [office, "${literal}"]`, `tags: [office, "$${literal}"]`, 1)
	m, err := llmtest.ParseScriptFile("turns.yaml", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	msgs := []*toolfleetv1.Message{llm.NewMessage(toolfleetv1.Role_ROLE_USER, llm.Text("open a ticket"))}
	req := func() *llm.Request { return &llm.Request{Tools: scriptTools(), Messages: msgs} }

	m1, err := m.Complete(ctx, req())
	if err != nil {
		t.Fatal(err)
	}
	calls := llm.ToolCalls(m1)
	if len(calls) != 1 || calls[0].GetName() != "Tickets_Create" || calls[0].GetId() != "created" || m1.GetStopReason() != llm.StopToolCalls ||
		llm.MessageText(m1) != "Opening the ticket." {
		t.Fatalf("turn 1 = %v", m1)
	}
	if tags := calls[0].GetArguments().GetFields()["tags"].GetListValue().GetValues(); len(tags) != 2 || tags[1].GetStringValue() != "${literal}" {
		t.Errorf("tags = %v, want the escaped ${literal}", tags)
	}
	// A retried turn gets the same reply.
	if again, err := m.Complete(ctx, req()); err != nil || llm.ToolCalls(again)[0].GetId() != "created" {
		t.Errorf("turn 1 again: %v %v", again, err)
	}

	msgs = append(msgs, m1, result("created", `{"ticket": {"id": "T-7", "n": 7, "title": "Printer on fire", "tags": ["office", "urgent"]}}`))
	m2, err := m.Stream(ctx, req(), nil)
	if err != nil {
		t.Fatal(err)
	}
	args := llm.ToolCalls(m2)[0].GetArguments().AsMap()
	if args["id"] != "T-7" || args["n"] != float64(7) || args["note"] != "id T-7, ${not a placeholder}" {
		t.Errorf("turn 2 args = %v", args)
	}
	if llm.ToolCalls(m2)[0].GetName() != "Tickets_Get" || llm.ToolCalls(m2)[0].GetId() != "call_2_1" {
		t.Errorf("turn 2 call = %v", llm.ToolCalls(m2)[0])
	}

	sv, _ := structpb.NewValue(map[string]any{"ticket": map[string]any{"title": "Printer on fire (read back)"}})
	msgs = append(msgs, m2, llm.NewMessage(toolfleetv1.Role_ROLE_USER, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolResult{
		ToolResult: &toolfleetv1.ToolResult{CallId: "call_2_1", Content: "ignored when structured is set", Structured: sv}}}))
	m3, err := m.Complete(ctx, req())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := llm.MessageText(m3), "Ticket T-7 is open (Printer on fire (read back), tags urgent)."; got != want || m3.GetStopReason() != llm.StopEndTurn {
		t.Errorf("turn 3 = %q (%s), want %q", got, m3.GetStopReason(), want)
	}
	if m3.GetModel() != "scripted:turns.yaml" {
		t.Errorf("model = %q", m3.GetModel())
	}

	msgs = append(msgs, m3, llm.NewMessage(toolfleetv1.Role_ROLE_USER, llm.Text("and now?")))
	if _, err := m.Complete(ctx, req()); !errors.Is(err, llm.ErrScriptExhausted) {
		t.Errorf("turn 4: %v, want ErrScriptExhausted", err)
	}
}

func TestScriptFileRenderErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	user := []*toolfleetv1.Message{llm.NewMessage(toolfleetv1.Role_ROLE_USER, llm.Text("go"))}
	for _, tc := range []struct{ name, script, want string }{
		{"tool not offered", "turns:\n  - calls:\n      - tool: Payments.Refund\n", "turns.yaml:3: turn 1: tool Payments.Refund is not offered to this run (offered: Tickets_Create, Tickets_Get)"},
		{"no such field", "turns:\n  - text: ${last.nope}\n", `no result of call "last" yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := llmtest.ParseScriptFile("turns.yaml", []byte(tc.script))
			if err != nil {
				t.Fatal(err)
			}
			_, err = m.Complete(ctx, &llm.Request{Tools: scriptTools(), Messages: user})
			if !errors.Is(err, llmtest.ErrScriptFile) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	// A path into a result that is not there names the step.
	m, _ := llmtest.ParseScriptFile("turns.yaml", []byte("turns:\n  - text: ${c.a[3]}\n"))
	_, err := m.Complete(ctx, &llm.Request{Messages: append(user, result("c", `{"a": [1]}`))})
	if err == nil || !strings.Contains(err.Error(), "[3] is not an element") {
		t.Errorf("out of range: %v", err)
	}
}

func TestParseScriptFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, script, want string }{
		{"not yaml", "turns:\n  - text: [unclosed\n", "turns.yaml: not YAML: line "},
		{"no turns", "steps: []\n", "turns.yaml:1: unknown key (want turns)"},
		{"empty turns", "turns: []\n", "turns.yaml:1: want turns: a non-empty list"},
		{"turn not a mapping", "turns:\n  - hello\n", "turns.yaml:2: turn 1: want a mapping"},
		{"unknown turn key", "turns:\n  - text: hi\n    say: x\n", "turns.yaml:3: turn 1: unknown key (want text or calls)"},
		{"empty turn", "turns:\n  - text: hi\n  - {}\n", "turns.yaml:3: turn 2: needs text or calls"},
		{"calls not a list", "turns:\n  - calls: {tool: X.Y}\n", "turns.yaml:2: turn 1: calls must be a list"},
		{"no tool", "turns:\n  - calls:\n      - args: {a: 1}\n", "turns.yaml:3: turn 1, call 1: no tool"},
		{"unknown call key", "turns:\n  - calls:\n      - tool: A.B\n        input: {}\n", "turns.yaml:4: turn 1, call 1: unknown key (want tool, id or args)"},
		{"args not a mapping", "turns:\n  - calls:\n      - tool: A.B\n        args: [1, 2]\n", "turns.yaml:4: turn 1, call 1: args must be a mapping"},
		{"bad id", "turns:\n  - calls:\n      - tool: A.B\n        id: 1x\n", "turns.yaml:4: turn 1, call 1: id must be"},
		{"duplicate id", "turns:\n  - calls:\n      - {tool: A.B, id: x}\n  - calls:\n      - {tool: A.B, id: x}\n", "turns.yaml:5: turn 2: call id x is used on line 3 already"},
		{"alias", "turns:\n  - calls:\n      - tool: A.B\n        args: &a {x: 1}\n      - tool: A.B\n        args: *a\n", "turns.yaml:6: turn 1, call 2: args must be a mapping"},
		{"alias value", "turns:\n  - calls:\n      - tool: A.B\n        args: {x: &v 1, y: *v}\n", "turns.yaml:4: aliases (*name) are not supported"},
		{"non-JSON value", "turns:\n  - calls:\n      - tool: A.B\n        args: {when: !!binary aGVsbG8=}\n", "turns.yaml:4: value of type !!binary is not JSON"},
		{"duplicate key", "turns:\n  - calls:\n      - tool: A.B\n        args:\n          x: 1\n          x: 2\n", "turns.yaml:6: key \"x\" appears twice"},
		{"text not a string", "turns:\n  - text: [a]\n", "turns.yaml:2: turn 1: text must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := llmtest.ParseScriptFile("turns.yaml", []byte(tc.script))
			if !errors.Is(err, llmtest.ErrScriptFile) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
	// Errors never quote the file's values.
	_, err := llmtest.ParseScriptFile("turns.yaml", []byte("turns:\n  - calls:\n      - tool: A.B\n        args: {secret: !!binary c2VjcmV0}\n"))
	if err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Errorf("error quotes a value: %v", err)
	}
	if _, err := llmtest.ParseScriptFile("big.yaml", make([]byte, llmtest.MaxScriptFileBytes+1)); !errors.Is(err, llmtest.ErrScriptFile) {
		t.Errorf("a file over the bound: %v", err)
	}
	deep := "turns:\n  - calls:\n      - tool: A.B\n        args: {a: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}\n"
	if _, err := llmtest.ParseScriptFile("deep.yaml", []byte(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("a deep file: %v", err)
	}
}

func TestOpenScriptFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "turns.yaml"), []byte("turns:\n  - text: done\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside.yaml")
	if err := os.WriteFile(outside, []byte("turns:\n  - text: leaked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	m, err := llmtest.OpenScriptFile(dir, "turns.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if msg, err := m.Complete(context.Background(), &llm.Request{}); err != nil || llm.MessageText(msg) != "done" {
		t.Errorf("Complete: %v %v", msg, err)
	}
	for _, name := range []string{"../" + filepath.Base(filepath.Dir(outside)) + "/outside.yaml", outside, "link.yaml", "missing.yaml"} {
		if _, err := llmtest.OpenScriptFile(dir, name); !errors.Is(err, llmtest.ErrScriptFile) {
			t.Errorf("OpenScriptFile(%q) = %v, want ErrScriptFile", name, err)
		}
	}
	if _, err := llmtest.OpenScriptFile("", "turns.yaml"); err == nil || !strings.Contains(err.Error(), "script files are off") {
		t.Errorf("no folder: %v", err)
	}
	// The spec accepts a script file, but not one outside the folder.
	if _, err := llm.ParseSpec("scripted:tests/turns.yaml"); err != nil {
		t.Errorf("ParseSpec: %v", err)
	}
	if _, err := llm.ParseSpec("scripted:../turns.yaml"); !errors.Is(err, llm.ErrSpec) {
		t.Errorf("ParseSpec ..: %v", err)
	}
}

// Placeholders that repeat a large result are bounded per turn.
func TestScriptFileTurnBound(t *testing.T) {
	t.Parallel()
	big := `"` + strings.Repeat("x", 1<<20) + `"`
	text := strings.Repeat("${big}", 9)
	m, err := llmtest.ParseScriptFile("turns.yaml", []byte("turns:\n  - text: "+text+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Complete(context.Background(), &llm.Request{Messages: []*toolfleetv1.Message{result("big", big)}})
	if !errors.Is(err, llmtest.ErrScriptFile) || !strings.Contains(err.Error(), "placeholders add more than") {
		t.Errorf("9 MiB of placeholders: %v", err)
	}
	m, _ = llmtest.ParseScriptFile("turns.yaml", []byte("turns:\n  - text: ${big}${big}\n"))
	if msg, err := m.Complete(context.Background(), &llm.Request{Messages: []*toolfleetv1.Message{result("big", big)}}); err != nil || len(llm.MessageText(msg)) != 2<<20 {
		t.Errorf("2 MiB of placeholders: %v", err)
	}
}
