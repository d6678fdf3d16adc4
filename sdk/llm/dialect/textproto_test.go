package dialect

import (
	"errors"
	"strings"
	"testing"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

func TestTextProtocolParse(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	tests := []struct {
		name      string
		p         llm.TextProtocol
		text      string
		wantText  string
		wantCalls []string
		wantErr   error
	}{
		{"fenced two blocks", Fenced{}, "Checking.\n~~~tool_call\n{\"name\":\"A\",\"arguments\":{\"x\":1}}\n~~~\nand\n~~~tool_call\n{\"name\":\"B\",\"arguments\":\"{\\\"y\\\":2}\",\"id\":\"mine\"}\n~~~\n",
			"Checking.\nand", []string{`A(call_1)={"x":1}`, `B(mine)={"y":2}`}, nil},
		{"fenced empty string args", Fenced{}, "~~~tool_call\n{\"name\":\"A\",\"arguments\":\"\"}\n~~~", "", []string{`A(call_1)={}`}, nil},
		{"fenced no calls", Fenced{}, "just text ~~~ here", "just text ~~~ here", nil, nil},
		{"fenced malformed json", Fenced{}, "~~~tool_call\n{\"name\":\"A\",\n~~~", "", nil, llm.ErrMalformed},
		{"fenced unclosed", Fenced{}, "~~~tool_call\n{\"name\":\"A\"}", "", nil, llm.ErrMalformed},
		{"fenced numeric args", Fenced{}, "~~~tool_call\n{\"name\":\"A\",\"arguments\":3}\n~~~", "", nil, llm.ErrInvalidArguments},
		{"fenced missing name", Fenced{}, "~~~tool_call\n{\"arguments\":{}}\n~~~", "", nil, llm.ErrMalformed},
		{"hermes", Hermes{}, "<tool_call>\n{\"name\": \"A\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>\n<tool_call>{\"name\": \"B\", \"parameters\": {}}</tool_call>",
			"", []string{`A(call_1)={"q":"x"}`, `B(call_2)={}`}, nil},
		{"hermes text around", Hermes{}, "Sure.<tool_call>{\"name\":\"A\"}</tool_call>Done.", "Sure.Done.", []string{`A(call_1)={}`}, nil},
		// A complete call without </tool_call> stands (hermes_tool_parser.py); a cut one does not.
		{"hermes unclosed", Hermes{}, "<tool_call>{\"name\":\"A\"}", "", []string{`A(call_1)={}`}, nil},
		{"hermes cut", Hermes{}, "<tool_call>{\"name\":\"A\", \"arguments\": {", "", nil, ErrTruncated},
		{"hermes trailing junk", Hermes{}, "<tool_call>{\"name\":\"A\"} x</tool_call>", "", nil, llm.ErrMalformed},
		{"xml typed", XMLFunction{}, "<tool_call>\n<function=Weather_Forecast>\n<parameter=city>\nSan Francisco\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=tags>\n[\"a\",\"b\"]\n</parameter>\n<parameter=id>\n12345678901\n</parameter>\n<parameter=opts>\n{\"k\":1}\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n<parameter=comment>\nnull\n</parameter>\n</function>\n</tool_call>",
			"", []string{`Weather_Forecast(call_1)={"city":"San Francisco","comment":null,"days":3,"id":12345678901,"metric":true,"opts":{"k":1},"ratio":0.5,"tags":["a","b"]}`}, nil},
		{"xml string stays text", XMLFunction{}, "<function=Weather_Forecast><parameter=city>42</parameter></function>", "", []string{`Weather_Forecast(call_1)={"city":"42"}`}, nil},
		{"xml unknown tool guesses json", XMLFunction{}, "<function=Other><parameter=n>7</parameter><parameter=s>hi there</parameter></function>", "", []string{`Other(call_1)={"n":7,"s":"hi there"}`}, nil},
		{"xml bad integer", XMLFunction{}, "<function=Weather_Forecast><parameter=days>three</parameter></function>", "", nil, llm.ErrInvalidArguments},
		{"xml repeated parameter", XMLFunction{}, "<function=A><parameter=x>1</parameter><parameter=x>2</parameter></function>", "", nil, llm.ErrInvalidArguments},
		{"xml unclosed", XMLFunction{}, "<function=A><parameter=x>1</parameter>", "", nil, llm.ErrMalformed},
		{"xml stray text", XMLFunction{}, "<function=A>oops<parameter=x>1</parameter></function>", "", nil, llm.ErrInvalidArguments},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			text, calls, err := tt.p.Parse(tt.text, tools)
			checkParse(t, text, calls, err, tt.wantText, tt.wantCalls, tt.wantErr)
		})
	}
}

// TestTextProtocolRenderParse renders calls the way a model is taught and
// parses them back, for every protocol.
func TestTextProtocolRenderParse(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	call := llm.CallPart("call_1", "Weather_Forecast", map[string]any{"city": "Oslo", "days": 2, "tags": []any{"x"}}).GetToolCall()
	for _, p := range TextProtocols() {
		t.Run(p.Name(), func(t *testing.T) {
			t.Parallel()
			inst := p.Instructions(tools)
			if !strings.Contains(inst, "Weather_Forecast") || !strings.Contains(inst, `"days"`) {
				t.Errorf("instructions lack the tool or its schema:\n%s", inst)
			}
			text, calls, err := p.Parse("Before.\n"+p.RenderCall(call)+"\nAfter.", tools)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"Weather_Forecast(" + renderedID(p, "Weather_Forecast", "call_1") + `)={"city":"Oslo","days":2,"tags":["x"]}`}
			if got := convtest.CallStrings(calls); !equalStrings(got, want) {
				t.Errorf("calls = %q, want %q", got, want)
			}
			if isSingleCall(p) && text == "Before." {
				return // what follows the one call of the turn is not read
			}
			if text != "Before.\n\nAfter." && text != "Before.\nAfter." {
				t.Errorf("text = %q", text)
			}
		})
	}
}

func TestParseAuto(t *testing.T) {
	t.Parallel()
	tools := []*toolfleetv1.ToolDefinition{convtest.TypedTool(t)}
	native := llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("see <tool_call>"), llm.CallPart("c1", "A", nil))
	native.StopReason = llm.StopToolCalls
	tests := []struct {
		name      string
		msg       *toolfleetv1.Message
		declared  llm.TextProtocol
		wantText  string
		wantCalls []string
		wantErr   error
	}{
		{"native calls kept", native, nil, "see <tool_call>", []string{`A(c1)={}`}, nil},
		{"native text with hermes", llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text(`On it. <tool_call>{"name":"A","arguments":{"x":1}}</tool_call>`)), nil, "On it.", []string{`A(call_1)={"x":1}`}, nil},
		{"native text with two protocols", llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("~~~tool_call\n{\"name\":\"B\"}\n~~~\n<function=A><parameter=x>1</parameter></function>")), nil, "", []string{`A(call_1)={"x":1}`, `B(call_1_2)={}`}, nil},
		{"native plain text", llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("No tools needed.")), nil, "No tools needed.", nil, nil},
		{"native malformed block", llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("<tool_call>{oops</tool_call>")), nil, "", nil, llm.ErrMalformed},
		{"declared fenced", llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text("~~~tool_call\n{\"name\":\"A\"}\n~~~")), Fenced{}, "", []string{`A(call_1)={}`}, nil},
		{"declared ignores other protocols", llm.NewMessage(toolfleetv1.Role_ROLE_ASSISTANT, llm.Text(`<tool_call>{"name":"A"}</tool_call>`)), Fenced{}, `<tool_call>{"name":"A"}</tool_call>`, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseAuto(tt.msg, tt.declared, tools)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if llm.MessageText(got) != tt.wantText {
				t.Errorf("text = %q, want %q", llm.MessageText(got), tt.wantText)
			}
			if calls := convtest.CallStrings(llm.ToolCalls(got)); !equalStrings(calls, tt.wantCalls) {
				t.Errorf("calls = %q, want %q", calls, tt.wantCalls)
			}
			if len(tt.wantCalls) > 0 && got.GetStopReason() != llm.StopToolCalls {
				t.Errorf("stop = %q", got.GetStopReason())
			}
		})
	}
}

func TestForTextProtocol(t *testing.T) {
	t.Parallel()
	req := &llm.Request{Messages: convtest.Conversation(), Tools: convtest.CalculatorTools(t), ToolChoice: llm.ToolChoice{Mode: llm.ToolChoiceRequired}}
	got := ForTextProtocol(Hermes{}, req)
	if got.Tools != nil || got.ToolChoice.Mode != llm.ToolChoiceDefault {
		t.Errorf("tools not removed: %v %v", got.Tools, got.ToolChoice)
	}
	sys := llm.MessageText(got.Messages[0])
	if !strings.HasPrefix(sys, "You are a calculator.\n\n") || !strings.Contains(sys, "Calculator_Mul") {
		t.Errorf("system prompt = %q", sys)
	}
	assistant := llm.MessageText(got.Messages[2])
	_, calls, err := Hermes{}.Parse(assistant, nil)
	if err != nil || len(calls) != 2 {
		t.Fatalf("assistant turn does not parse back to two calls: %q %v", assistant, err)
	}
	if results := llm.MessageText(got.Messages[3]); !strings.Contains(results, `"is_error":true`) || !strings.Contains(results, "Retry the product") {
		t.Errorf("results turn = %q", results)
	}
	for _, m := range got.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_TOOL || len(llm.ToolCalls(m)) > 0 {
			t.Errorf("native part left in %v", m)
		}
	}
}

func TestTagFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		chunks     []string
		wantShown  []string // what each Write returns
		wantFlush  string
		wantBlocks int
	}{
		{"plain text streams through", []string{"Hel", "lo"}, []string{"Hel", "lo"}, "", 0},
		{"half tag held then released", []string{"a <tool", "s are fun"}, []string{"a ", "<tools are fun"}, "", 0},
		{"hermes block withheld", []string{"ok <tool_", "call>{\"name\":", "\"A\"}</tool_call> done"}, []string{"ok ", "", " done"}, "", 1},
		{"xml block, cut after close", []string{"<function=A>", "<parameter=x>1</parameter></function>"}, []string{"", ""}, "", 1},
		{"fenced block", []string{"x\n~~~tool", "_call\n{}\n~", "~~\ny"}, []string{"x\n", "", "\ny"}, "", 1},
		{"held tail flushed", []string{"end <func"}, []string{"end "}, "<func", 0},
		{"unclosed block not flushed", []string{"<tool_call>{"}, []string{""}, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := NewTagFilter()
			for i, c := range tt.chunks {
				if got := f.Write(c); got != tt.wantShown[i] {
					t.Errorf("Write(%q) = %q, want %q", c, got, tt.wantShown[i])
				}
			}
			if got := f.Flush(); got != tt.wantFlush {
				t.Errorf("Flush = %q, want %q", got, tt.wantFlush)
			}
			if f.Blocks() != tt.wantBlocks {
				t.Errorf("Blocks = %d, want %d", f.Blocks(), tt.wantBlocks)
			}
		})
	}
}

func TestDecodeArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw     string
		want    string
		wantErr bool
	}{
		{`{"a":1}`, `{"a":1}`, false},
		{`"{\"a\":1}"`, `{"a":1}`, false},
		{`""`, `{}`, false},
		{``, `{}`, false},
		{`  `, `{}`, false},
		{`"  "`, `{}`, false},
		{`null`, ``, true},
		{`[1]`, ``, true},
		{`3`, ``, true},
		{`"[1]"`, ``, true},
		{`"nope"`, ``, true},
		{`{"a":1} {}`, ``, true},
		{`{"a":1}}`, ``, true},
		{`{"a":`, ``, true},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			t.Parallel()
			got, err := llm.DecodeArguments("Calc_Add (c1)", []byte(tt.raw))
			if tt.wantErr {
				var ae *llm.ArgumentsError
				if !errors.As(err, &ae) || ae.Call != "Calc_Add (c1)" || !errors.Is(err, llm.ErrInvalidArguments) {
					t.Fatalf("err = %v, want an ArgumentsError naming the call", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := string(canon.EncodeArguments(got)); s != tt.want {
				t.Errorf("got %s, want %s", s, tt.want)
			}
		})
	}
}

// renderedID is the id a call keeps through p's rendering: Kimi K2 writes
// its own ids (functions.NAME:IDX).
func renderedID(p llm.TextProtocol, name, id string) string {
	if p == llm.TextProtocol(KimiK2) {
		return "functions." + name + ":0"
	}
	return id
}

// checkParse compares a Parse result with what a test wants: an error that
// matches wantErr, or the text and calls.
func checkParse(t *testing.T, text string, calls []*toolfleetv1.ToolCall, err error, wantText string, wantCalls []string, wantErr error) {
	t.Helper()
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Fatalf("err = %v, want %v", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if text != wantText {
		t.Errorf("text = %q, want %q", text, wantText)
	}
	if got := convtest.CallStrings(calls); !equalStrings(got, wantCalls) {
		t.Errorf("calls = %q, want %q", got, wantCalls)
	}
}
