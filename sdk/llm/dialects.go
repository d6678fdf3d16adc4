package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Dialect is the tool-call wire shape an open-weight model family writes in
// raw text: what a completions endpoint, or a server without the right
// parser, hands back. Every Dialect is a TextProtocol built on one shared
// streaming scanner (TextDecoder); its Name is its value.
type Dialect string

// The dialects (docs/formats.md has each wire shape and the choices made
// where serving engines disagree).
const (
	// Qwen3Coder: <tool_call><function=NAME><parameter=k>v</parameter></function></tool_call>,
	// several per turn; bare <function=…> blocks are accepted too.
	Qwen3Coder Dialect = "qwen3_coder"
	// Harmony is gpt-oss: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{…}<|call|>.
	Harmony Dialect = "harmony"
	// Mistral: [TOOL_CALLS]NAME[ARGS]{…} (v11+) and [TOOL_CALLS][{"name":…,"arguments":…}].
	Mistral Dialect = "mistral"
	// Llama3JSON: <|python_tag|>{"name":…,"parameters":{…}} and a bare JSON call on its own line.
	Llama3JSON Dialect = "llama3_json"
	// Pythonic is Llama 3.2 / 4: [get_weather(city='LA')], optionally in <|python_start|>…<|python_end|>.
	Pythonic Dialect = "pythonic"
	// KimiK2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{…}<|tool_call_end|>…
	KimiK2 Dialect = "kimi_k2"
	// GLM45 is GLM-4.5/4.6/4.7: <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>.
	GLM45 Dialect = "glm45"
	// MiniMaxM2: <minimax:tool_call><invoke name="…"><parameter name="…">…</parameter></invoke></minimax:tool_call>.
	MiniMaxM2 Dialect = "minimax_m2"
	// DeepSeekV31: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜><｜tool▁calls▁end｜>.
	DeepSeekV31 Dialect = "deepseek_v31"
	// DeepSeekV32: <｜DSML｜function_calls><｜DSML｜invoke name="…"><｜DSML｜parameter name="…" string="true|false">…</｜DSML｜parameter>…
	DeepSeekV32 Dialect = "deepseek_v32"
)

// Dialects returns every dialect, in the order of the constants.
func Dialects() []Dialect {
	return []Dialect{Qwen3Coder, Harmony, Mistral, Llama3JSON, Pythonic, KimiK2, GLM45, MiniMaxM2, DeepSeekV31, DeepSeekV32}
}

// dialectSpec is what a dialect is made of.
type dialectSpec struct {
	g           *grammar
	open, close string // the main call's markers (OpenTag, CloseTag)
	shape       string // how the instructions show a call
	call        func(c *toolfleetv1.ToolCall) string
	result      func(r *toolfleetv1.ToolResult) string
}

func (d Dialect) spec() *dialectSpec {
	if s := dialectSpecs[d]; s != nil {
		return s
	}
	// An unknown Dialect value has no markers: it parses no calls.
	return &dialectSpec{g: newGrammar(string(d)), call: func(*toolfleetv1.ToolCall) string { return "" },
		result: func(r *toolfleetv1.ToolResult) string {
			return renderResultText("<tool_response>", "</tool_response>", r)
		}}
}

func (d Dialect) grammar() *grammar { return d.spec().g }

// Name implements TextProtocol.
func (d Dialect) Name() string { return string(d) }

// OpenTag implements TextProtocol: the marker that opens the main call form.
func (d Dialect) OpenTag() string { return d.spec().open }

// CloseTag implements TextProtocol: the marker that closes it ("" where a
// call ends with its JSON value).
func (d Dialect) CloseTag() string { return d.spec().close }

// Instructions implements TextProtocol.
func (d Dialect) Instructions(tools []*toolfleetv1.ToolDefinition) string {
	return instructions(d.spec().shape, tools)
}

// RenderCall implements TextProtocol.
func (d Dialect) RenderCall(c *toolfleetv1.ToolCall) string { return d.spec().call(c) }

// RenderResult implements TextProtocol.
func (d Dialect) RenderResult(r *toolfleetv1.ToolResult) string { return d.spec().result(r) }

// Parse implements TextProtocol. A call cut off before its end is an
// error matching ErrTruncated (and ErrMalformed): it is never executed.
func (d Dialect) Parse(text string, tools []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error) {
	return parseDialect(d, text, tools)
}

func toolResponse(r *toolfleetv1.ToolResult) string {
	return renderResultText("<tool_response>", "</tool_response>", r)
}

var dialectSpecs = map[Dialect]*dialectSpec{
	Qwen3Coder: {
		g: newGrammar("qwen3_coder",
			closedBy("<tool_call>", "</tool_call>", qwenToolCall),
			closedBy("<function=", "</function>", func(inner string, sc *scanCtx) ([]*rawCall, error) {
				return qwenToolCall("<function="+inner+"</function>", sc)
			})),
		open: "<tool_call>", close: "</tool_call>",
		shape: "<tool_call>\n<function=TOOL_NAME>\n<parameter=PARAM_NAME>\nvalue\n</parameter>\n</function>\n</tool_call>\nOne <parameter> per argument; write arrays and objects as JSON.",
		call: func(c *toolfleetv1.ToolCall) string {
			return "<tool_call>\n" + XMLFunction{}.RenderCall(c) + "\n</tool_call>"
		},
		result: toolResponse,
	},
	Harmony: {
		g: newGrammar("harmony",
			marker{open: "<|start|>", read: harmonyMessage},
			marker{open: "<|channel|>", read: harmonyMessage},
			alone("<|end|>"), alone("<|return|>"), alone("<|call|>")),
		open: "<|channel|>", close: "<|call|>",
		shape: "<|start|>assistant<|channel|>commentary to=functions.TOOL_NAME <|constrain|>json<|message|>{JSON arguments}<|call|>",
		call: func(c *toolfleetv1.ToolCall) string {
			return "<|start|>assistant<|channel|>commentary to=functions." + c.GetName() + " <|constrain|>json<|message|>" + argsJSON(c) + "<|call|>"
		},
		result: func(r *toolfleetv1.ToolResult) string {
			return "<|start|>functions." + r.GetName() + " to=assistant<|channel|>commentary<|message|>" + resultJSON(r) + "<|end|>"
		},
	},
	Mistral: {
		g:     newGrammar("mistral", marker{open: "[TOOL_CALLS]", read: mistralCalls}),
		open:  "[TOOL_CALLS]",
		shape: "[TOOL_CALLS]TOOL_NAME[ARGS]{JSON arguments}\nStart every call with [TOOL_CALLS].",
		call: func(c *toolfleetv1.ToolCall) string {
			return "[TOOL_CALLS]" + c.GetName() + "[ARGS]" + argsJSON(c)
		},
		result: func(r *toolfleetv1.ToolResult) string {
			return renderResultText("[TOOL_RESULTS]", "[/TOOL_RESULTS]", r)
		},
	},
	Llama3JSON: {
		g: newGrammar("llama3_json",
			marker{open: "<|python_tag|>", read: llamaTagged},
			marker{open: "{", lineStart: true, read: llamaBare},
			alone("<|eom_id|>"), alone("<|eot_id|>")),
		open:  "<|python_tag|>",
		shape: "<|python_tag|>{\"name\": \"TOOL_NAME\", \"parameters\": {JSON arguments}}\nSeparate several calls with \";\".",
		call: func(c *toolfleetv1.ToolCall) string {
			return `<|python_tag|>{"name": "` + c.GetName() + `", "parameters": ` + argsJSON(c) + "}"
		},
		result: toolResponse,
	},
	Pythonic: {
		g: newGrammar("pythonic",
			marker{open: "[", lineStart: true, read: pythonicList},
			closedBy("<|python_start|>", "<|python_end|>", func(inner string, sc *scanCtx) ([]*rawCall, error) { return pyCalls(inner, sc) })),
		open:  "[",
		close: "]",
		shape: "[TOOL_NAME(param='text', count=3, flag=True), OTHER_TOOL(x=[1, 2])]\nOn a line of its own, keyword arguments only, Python literals.",
		call: func(c *toolfleetv1.ToolCall) string {
			var b strings.Builder
			b.WriteString("[" + c.GetName() + "(")
			for i, k := range sortedKeys(argumentsOf(c)) {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(k + "=")
				renderPyLiteral(&b, argumentsOf(c).GetFields()[k])
			}
			b.WriteString(")]")
			return b.String()
		},
		result: toolResponse,
	},
	KimiK2: sectionDialect("kimi_k2", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>",
		"<|tool_call_argument_begin|>", "functions.TOOL_NAME:0", kimiID, kimiCall, "\nNumber the calls of a turn 0, 1, 2, …",
		func(r *toolfleetv1.ToolResult) string { return "## Return of " + r.GetCallId() + "\n" + resultJSON(r) }),
	GLM45: {
		g:    newGrammar("glm45", closedBy("<tool_call>", "</tool_call>", glmCall)),
		open: "<tool_call>", close: "</tool_call>",
		shape: "<tool_call>TOOL_NAME\n<arg_key>PARAM_NAME</arg_key>\n<arg_value>value</arg_value>\n</tool_call>\nOne key/value pair per argument; write arrays and objects as JSON.",
		call: func(c *toolfleetv1.ToolCall) string {
			var b strings.Builder
			b.WriteString("<tool_call>" + c.GetName() + "\n")
			for _, k := range sortedKeys(argumentsOf(c)) {
				b.WriteString("<arg_key>" + k + "</arg_key>\n<arg_value>" + valueText(argumentsOf(c).GetFields()[k]) + "</arg_value>\n")
			}
			return b.String() + "</tool_call>"
		},
		result: toolResponse,
	},
	MiniMaxM2: invokeDialect("minimax_m2", "<minimax:tool_call>", "</minimax:tool_call>", "", "",
		"<parameter name=\"PARAM_NAME\">value</parameter>\nOne <parameter> per argument; write arrays and objects as JSON.",
		func(r *toolfleetv1.ToolResult) string { return renderResultText("<response>", "</response>", r) }),
	DeepSeekV31: sectionDialect("deepseek_v31", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
		"<｜tool▁sep｜>", "TOOL_NAME", (*toolfleetv1.ToolCall).GetName, deepseekCall, "",
		func(r *toolfleetv1.ToolResult) string {
			return "<｜tool▁output▁begin｜>" + resultJSON(r) + "<｜tool▁output▁end｜>"
		}),
	DeepSeekV32: invokeDialect("deepseek_v32", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜", " string=",
		"<｜DSML｜parameter name=\"PARAM_NAME\" string=\"true\">text value</｜DSML｜parameter>\n<｜DSML｜parameter name=\"OTHER\" string=\"false\">JSON value</｜DSML｜parameter>",
		func(r *toolfleetv1.ToolResult) string {
			return "<function_results>\n<result>" + resultJSON(r) + "</result>\n</function_results>"
		}),
}

// sectionDialect is the shape Kimi K2 and DeepSeek-V3.1 share: a section
// of calls, each callOpen HEAD sep {JSON arguments} callClose, where head
// writes a call's HEAD (its name, or Kimi's id) and read parses a call.
func sectionDialect(name, open, close, callOpen, callClose, sep, headExample string, head func(*toolfleetv1.ToolCall) string,
	read func(string, *scanCtx) ([]*rawCall, error), note string, result func(*toolfleetv1.ToolResult) string) *dialectSpec {
	return &dialectSpec{
		g:    newGrammar(name, alone(open), alone(close), closedBy(callOpen, callClose, read)),
		open: callOpen, close: callClose,
		shape: open + callOpen + headExample + sep + "{JSON arguments}" + callClose + close + note,
		call: func(c *toolfleetv1.ToolCall) string {
			return open + callOpen + head(c) + sep + argsJSON(c) + callClose + close
		},
		result: result,
	}
}

// invokeDialect is the shape MiniMax-M2 and DeepSeek-V3.2 share: a
// section of <invoke name="…"> elements holding <parameter name="…">
// elements, tags prefixed by prefix ("<｜DSML｜"); strAttr (" string=")
// marks string values when the dialect has that attribute.
func invokeDialect(name, open, close, prefix, strAttr, param string, result func(*toolfleetv1.ToolResult) string) *dialectSpec {
	tag := func(t string) string { return "<" + prefix[min(1, len(prefix)):] + t }
	endTag := func(t string) string { return "</" + prefix[min(1, len(prefix)):] + t }
	invokeOpen, invokeClose := tag("invoke name="), endTag("invoke>")
	paramOpen, paramClose := tag("parameter name="), endTag("parameter>")
	return &dialectSpec{
		g: newGrammar(name, alone(open), alone(close),
			closedBy(invokeOpen, invokeClose, func(inner string, sc *scanCtx) ([]*rawCall, error) {
				return invokeCall(inner, paramOpen, paramClose, sc)
			})),
		open: open, close: close,
		shape: open + "\n" + invokeOpen + "\"TOOL_NAME\">\n" + param + "\n" + invokeClose + "\n" + close,
		call: func(c *toolfleetv1.ToolCall) string {
			return open + "\n" + renderInvoke(c, invokeOpen, invokeClose, paramOpen, paramClose, strAttr) + close
		},
		result: result,
	}
}

// resultJSON is a result's content as the JSON the dialects' results carry.
func resultJSON(r *toolfleetv1.ToolResult) string {
	b, _ := json.Marshal(map[string]any{"content": resultText(r), "is_error": r.GetIsError()})
	return string(b)
}

// valueText is a value as an XML-ish dialect writes it: strings verbatim,
// anything else as JSON.
func valueText(v *structpb.Value) string {
	if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
		return s.StringValue
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// qwenToolCall reads the inside of a Qwen3-Coder <tool_call>: one or more
// <function=…> blocks, or a Hermes JSON object (the model falls back to it).
func qwenToolCall(inner string, sc *scanCtx) ([]*rawCall, error) {
	inner = strings.TrimSpace(inner)
	if strings.HasPrefix(inner, "{") {
		return hermesCall(inner, sc)
	}
	var calls []*rawCall
	for inner != "" {
		if !strings.HasPrefix(inner, "<function=") {
			return nil, fmt.Errorf("text outside <function>: %.40q", inner)
		}
		name, args, n, err := readFunction(inner, sc.tools, func(name string) string { return sc.callName(name) })
		if err != nil {
			return nil, err
		}
		calls = append(calls, &rawCall{name: name, args: args})
		inner = strings.TrimSpace(inner[n:])
	}
	if len(calls) == 0 {
		return nil, errors.New("empty <tool_call>")
	}
	return calls, nil
}

// hermesCall reads a Hermes JSON call object, which Qwen and GLM models
// sometimes write inside their <tool_call> instead of their own form.
func hermesCall(inner string, sc *scanCtx) ([]*rawCall, error) {
	var c jsonCall
	if err := json.Unmarshal([]byte(inner), &c); err != nil {
		return nil, err
	}
	raw := c.Arguments
	if len(raw) == 0 {
		raw = c.Parameters
	}
	return oneCall(jsonArgs(sc, c.Name, string(raw)))
}

func oneCall(c *rawCall, err error) ([]*rawCall, error) {
	if err != nil {
		return nil, err
	}
	return []*rawCall{c}, nil
}

// harmonyMessage reads a harmony message header at the start of s
// ("<|start|>ROLE [to=R]<|channel|>CHANNEL [to=R] [<|constrain|>json]<|message|>").
// A message to functions.NAME is a call whose body runs to <|call|> (or
// <|end|>); an analysis message is reasoning, kept as thinking and never
// shown as text; any other (final, a commentary preamble) is the header
// alone, so its content flows as text.
func harmonyMessage(s string, eof bool, sc *scanCtx) (unit, error) {
	hdrEnd := strings.Index(s, "<|message|>")
	if hdrEnd < 0 {
		u := unit{until: "<|message|>", name: harmonyRecipient(s)}
		if eof {
			if u.name != "" {
				return u, errCut
			}
			return unit{n: len(s)}, nil // a header cut off: no call, nothing to show
		}
		return u, nil
	}
	header := s[:hdrEnd]
	body := s[hdrEnd+len("<|message|>"):]
	recipient := harmonyRecipient(header)
	channel := ""
	if _, after, ok := strings.Cut(header, "<|channel|>"); ok {
		channel, _, _ = strings.Cut(strings.TrimSpace(after), " ")
		channel, _, _ = strings.Cut(channel, "<|")
	}
	if recipient == "" && channel != "analysis" {
		return unit{n: hdrEnd + len("<|message|>")}, nil
	}
	end, endLen := -1, 0
	for _, tok := range []string{"<|call|>", "<|end|>", "<|return|>"} {
		if i := strings.Index(body, tok); i >= 0 && (end < 0 || i < end) {
			end, endLen = i, len(tok)
		}
	}
	if end < 0 {
		switch {
		case !eof:
			return unit{until: "<|", name: recipient}, nil
		case recipient == "":
			return unit{n: len(s), think: body}, nil // reasoning cut off: kept as far as it got
		}
		return unit{name: recipient}, errCut
	}
	n := hdrEnd + len("<|message|>") + end + endLen
	if recipient == "" {
		return unit{n: n, think: body[:end]}, nil
	}
	name, ok := strings.CutPrefix(recipient, "functions.")
	if !ok {
		return unit{name: recipient}, fmt.Errorf("recipient %q is not a function", recipient)
	}
	c, err := jsonArgs(sc, name, body[:end])
	if err != nil {
		return unit{name: name}, err
	}
	return unit{n: n, calls: []*rawCall{c}}, nil
}

// harmonyRecipient is the "to=" recipient of a header, "" when none.
func harmonyRecipient(header string) string {
	i := strings.Index(header, "to=")
	if i < 0 {
		return ""
	}
	r := header[i+len("to="):]
	n := 0
	for n < len(r) && isNameByte(r[n]) {
		n++
	}
	switch r[:n] {
	case "assistant", "user", "system", "developer": // a message to a role, not a call
		return ""
	}
	return r[:n]
}

// mistralCalls reads what follows [TOOL_CALLS]: a JSON array of
// {"name", "arguments", "id"?} (before v11), or NAME, an optional
// [CALL_ID]ID, an optional [ARGS] and a JSON object (v11+).
func mistralCalls(s string, eof bool, sc *scanCtx) (unit, error) {
	const open = "[TOOL_CALLS]"
	rest := s[len(open):]
	pos := len(rest) - len(strings.TrimLeft(rest, " \t\r\n"))
	if pos < len(rest) && rest[pos] == '[' {
		start, end, _ := jsonAfter(sc, s, len(open))
		if end == 0 {
			return needMore(eof, "]", guessName(rest))
		}
		var list []jsonCall
		if err := json.Unmarshal([]byte(rest[start:end]), &list); err != nil {
			return unit{name: guessName(rest)}, err
		}
		u := unit{n: len(open) + end}
		for _, c := range list {
			raw := c.Arguments
			if len(raw) == 0 {
				raw = c.Parameters
			}
			rc, err := jsonArgs(sc, c.Name, string(raw))
			if err != nil {
				return unit{name: c.Name}, err
			}
			rc.id = c.ID
			u.calls = append(u.calls, rc)
			sc.pending++
		}
		return u, nil
	}
	nameEnd := pos
	for nameEnd < len(rest) && isNameByte(rest[nameEnd]) {
		nameEnd++
	}
	name := rest[pos:nameEnd]
	i, id := nameEnd, ""
	if strings.HasPrefix(rest[i:], "[CALL_ID]") {
		i += len("[CALL_ID]")
		j := i
		for j < len(rest) && isNameByte(rest[j]) {
			j++
		}
		id, i = rest[i:j], j
	}
	i += len(rest[i:]) - len(strings.TrimPrefix(rest[i:], "[ARGS]"))
	start, end, ok := jsonAfter(sc, s, len(open)+i)
	switch {
	case !ok:
		if partialSuffix(rest[i:], []string{"[CALL_ID]", "[ARGS]"}) == len(rest[i:]) && !eof {
			return unit{}, nil
		}
		return unit{name: name}, fmt.Errorf("expected [ARGS] and a JSON object after %.40q", name)
	case end == 0:
		return needMore(eof, "}", name)
	}
	if rest[i+start] != '{' {
		return unit{name: name}, errors.New("arguments are not a JSON object")
	}
	rc, err := jsonArgs(sc, name, rest[i+start:i+end])
	if err != nil {
		return unit{name: name}, err
	}
	rc.id = id
	return unit{n: len(open) + i + end, calls: []*rawCall{rc}}, nil
}

// needMore is the unit of a read that needs more text: at eof, the call
// was cut off.
func needMore(eof bool, until, name string) (unit, error) {
	u := unit{until: until, name: name}
	if eof {
		return u, errCut
	}
	return u, nil
}

// llamaTagged reads <|python_tag|> and the JSON calls after it, separated
// by ";". The unit ends after the last object not followed by ";".
func llamaTagged(s string, eof bool, sc *scanCtx) (unit, error) {
	const open = "<|python_tag|>"
	u := unit{n: 0}
	pos := len(open)
	for {
		start, end, ok := jsonAfter(sc, s, pos)
		switch {
		case !ok:
			return unit{name: guessName(s[pos:])}, fmt.Errorf("expected a JSON call after <|python_tag|>: %.40q", s[pos+start:])
		case end == 0:
			return needMore(eof, "}", guessName(s[pos:]))
		}
		c, isCall := llamaCallObject(s[pos+start : pos+end])
		if !isCall {
			return unit{name: guessName(s[pos:])}, errors.New(`not a {"name", "parameters"} call object`)
		}
		rc, err := jsonArgs(sc, c.Name, string(c.args()))
		if err != nil {
			return unit{name: c.Name}, err
		}
		u.calls = append(u.calls, rc)
		sc.pending++
		pos += end
		after := strings.TrimLeft(s[pos:], " \t\r\n")
		if after == "" && !eof {
			return unit{until: "", name: c.Name}, nil // a ";" may follow
		}
		if !strings.HasPrefix(after, ";") {
			break
		}
		pos = len(s) - len(after) + 1
	}
	u.n = pos
	return u, nil
}

// llamaBare reads a JSON object at the start of a line: a call when it is
// exactly {"name", "parameters" or "arguments"} (plus "type", "id"),
// otherwise text.
func llamaBare(s string, eof bool, sc *scanCtx) (unit, error) {
	end := sc.balanced(s, 0, `"`)
	if end < 0 {
		if eof {
			return unit{plain: true}, nil // an unfinished object is not a call we can know
		}
		return unit{until: "}"}, nil
	}
	c, isCall := llamaCallObject(s[:end])
	if !isCall {
		return unit{plain: true}, nil
	}
	rc, err := jsonArgs(sc, c.Name, string(c.args()))
	if err != nil {
		return unit{name: c.Name}, err
	}
	return unit{n: end, calls: []*rawCall{rc}}, nil
}

// llamaCall is the JSON call object of Llama 3.1+.
type llamaCall struct {
	Type       string          `json:"type,omitempty"`
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
}

func (c *llamaCall) args() json.RawMessage {
	if len(c.Parameters) > 0 {
		return c.Parameters
	}
	return c.Arguments
}

// llamaCallObject decodes a call object; ok is false for any other JSON.
func llamaCallObject(raw string) (*llamaCall, bool) {
	var keys map[string]json.RawMessage
	if json.Unmarshal([]byte(raw), &keys) != nil {
		return nil, false
	}
	for k := range keys {
		switch k {
		case "type", "name", "parameters", "arguments", "id":
		default:
			return nil, false
		}
	}
	var c llamaCall
	if json.Unmarshal([]byte(raw), &c) != nil || c.Name == "" || len(c.args()) == 0 {
		return nil, false
	}
	return &c, true
}

// pythonStart is "[" then a tool name and "(": a pythonic call list.
var pythonStart = regexp.MustCompile(`^\[\s*[A-Za-z_][A-Za-z0-9_.\-]*\s*\(`)

// pythonicList reads a call list on a line of its own; any other "[" is text.
func pythonicList(s string, eof bool, sc *scanCtx) (unit, error) {
	if !pythonStart.MatchString(s) {
		if !eof && !strings.ContainsAny(s[1:], "(]\n") && len(s) < 256 {
			return unit{}, nil // not decided yet
		}
		return unit{plain: true}, nil
	}
	end := sc.balanced(s, 0, `'"`)
	if end < 0 {
		return needMore(eof, "]", guessName(s[1:]))
	}
	calls, err := pyCalls(s[:end], sc)
	if err != nil {
		return unit{name: guessName(s[1:])}, err
	}
	return unit{n: end, calls: calls}, nil
}

// kimiID is the functions.NAME:IDX id Kimi K2 gives a call.
var kimiIDPattern = regexp.MustCompile(`^functions\.[A-Za-z0-9_.\-]+:[0-9]+$`)

func kimiID(c *toolfleetv1.ToolCall) string {
	if kimiIDPattern.MatchString(c.GetId()) {
		return c.GetId()
	}
	return "functions." + c.GetName() + ":0"
}

// kimiCall reads functions.NAME:IDX<|tool_call_argument_begin|>{…}; the id
// is kept as the call's id.
func kimiCall(inner string, sc *scanCtx) ([]*rawCall, error) {
	id, args, ok := strings.Cut(inner, "<|tool_call_argument_begin|>")
	if !ok {
		return nil, errors.New("no <|tool_call_argument_begin|>")
	}
	id = strings.TrimSpace(id)
	name := strings.TrimPrefix(id, "functions.")
	if i := strings.LastIndexByte(name, ':'); i >= 0 {
		name = name[:i]
	}
	rc, err := jsonArgs(sc, name, args)
	if err != nil {
		return nil, err
	}
	rc.id = id
	return []*rawCall{rc}, nil
}

// glmCall reads NAME then <arg_key>k</arg_key><arg_value>v</arg_value>
// pairs (GLM-4.5/4.6 put newlines between them, 4.7 none).
func glmCall(inner string, sc *scanCtx) ([]*rawCall, error) {
	if t := strings.TrimSpace(inner); strings.HasPrefix(t, "{") {
		return hermesCall(t, sc)
	}
	head, pairs, _ := strings.Cut(inner, "<arg_key>")
	name, err := toolName(head)
	if err != nil {
		return nil, err
	}
	if pairs != "" {
		pairs = "<arg_key>" + pairs
	}
	props := propertySchemas(sc.tools, name)
	fields := map[string]*structpb.Value{}
	for pairs = strings.TrimSpace(pairs); pairs != ""; pairs = strings.TrimSpace(pairs) {
		key, rest, err := element(pairs, "<arg_key>", "</arg_key>")
		if err != nil {
			return nil, &ArgumentsError{Call: sc.callName(name), Err: err}
		}
		val, rest, err := element(strings.TrimSpace(rest), "<arg_value>", "</arg_value>")
		if err != nil {
			return nil, &ArgumentsError{Call: sc.callName(name), Err: err}
		}
		if err := setParameter(fields, strings.TrimSpace(key), val, props, ""); err != nil {
			return nil, &ArgumentsError{Call: sc.callName(name), Err: err}
		}
		pairs = rest
	}
	return []*rawCall{{name: name, args: &structpb.Struct{Fields: fields}}}, nil
}

// element reads open…close at the start of s.
func element(s, open, close string) (body, rest string, err error) {
	if !strings.HasPrefix(s, open) {
		return "", "", fmt.Errorf("expected %s at %.40q", open, s)
	}
	body, rest, ok := strings.Cut(s[len(open):], close)
	if !ok {
		return "", "", fmt.Errorf("no %s", close)
	}
	return body, rest, nil
}

// setParameter types a parameter's text by its schema (coerceParameter)
// and sets it; str is a DSML string="…" attribute ("" when absent).
func setParameter(fields map[string]*structpb.Value, key, raw string, props map[string]any, str string) error {
	if _, dup := fields[key]; dup || key == "" {
		return fmt.Errorf("parameter %q empty or repeated", key)
	}
	raw = strings.TrimSuffix(strings.TrimPrefix(raw, "\n"), "\n")
	schema, _ := props[key].(map[string]any)
	var v *structpb.Value
	var err error
	switch str {
	case "true":
		v = structpb.NewStringValue(raw)
	case "false":
		if v, err = decodeJSONValue([]byte(raw)); err != nil {
			v, err = coerceParameter(raw, schema)
		}
	default:
		v, err = coerceParameter(raw, schema)
	}
	if err != nil {
		return fmt.Errorf("parameter %q: %w", key, err)
	}
	fields[key] = v
	return nil
}

// attrValue reads a "quoted" (or bare) attribute value at the start of s.
func attrValue(s string) (value, rest string, err error) {
	s = strings.TrimLeft(s, " ")
	if strings.HasPrefix(s, `"`) {
		v, r, ok := strings.Cut(s[1:], `"`)
		if !ok {
			return "", "", errors.New("unterminated attribute")
		}
		return v, r, nil
	}
	n := strings.IndexAny(s, " >")
	if n < 0 {
		return "", "", errors.New("unterminated attribute")
	}
	return s[:n], s[n:], nil
}

// invokeCall reads `"NAME">` and its parameters, each
// paramOpen `"KEY"` [string="true|false"] `>`value paramClose: the shape
// MiniMax-M2 and DeepSeek-V3.2 share.
func invokeCall(inner, paramOpen, paramClose string, sc *scanCtx) ([]*rawCall, error) {
	name, rest, err := attrValue(inner)
	if err != nil {
		return nil, err
	}
	if name, err = toolName(name); err != nil {
		return nil, err
	}
	rest, ok := strings.CutPrefix(strings.TrimLeft(rest, " "), ">")
	if !ok {
		return nil, errors.New("expected > after the invoke name")
	}
	props := propertySchemas(sc.tools, name)
	fields := map[string]*structpb.Value{}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		body, after, err := element(rest, paramOpen, paramClose)
		if err != nil {
			return nil, &ArgumentsError{Call: sc.callName(name), Err: err}
		}
		key, attrs, err := attrValue(body)
		if err != nil {
			return nil, &ArgumentsError{Call: sc.callName(name), Err: err}
		}
		attrs, value, ok := strings.Cut(attrs, ">")
		if !ok {
			return nil, &ArgumentsError{Call: sc.callName(name), Err: errors.New("expected > after the parameter name")}
		}
		str := ""
		if a, ok := strings.CutPrefix(strings.TrimSpace(attrs), "string="); ok {
			if str, _, err = attrValue(a); err != nil {
				return nil, &ArgumentsError{Call: sc.callName(name), Err: err}
			}
		}
		if err := setParameter(fields, key, value, props, str); err != nil {
			return nil, &ArgumentsError{Call: sc.callName(name), Err: err}
		}
		rest = after
	}
	return []*rawCall{{name: name, args: &structpb.Struct{Fields: fields}}}, nil
}

// renderInvoke writes a call in the invoke shape; strAttr (" string=" for
// DeepSeek-V3.2, "" for MiniMax) marks string values.
func renderInvoke(c *toolfleetv1.ToolCall, open, close, paramOpen, paramClose, strAttr string) string {
	var b strings.Builder
	b.WriteString(open + `"` + c.GetName() + "\">\n")
	for _, k := range sortedKeys(argumentsOf(c)) {
		v := argumentsOf(c).GetFields()[k]
		b.WriteString(paramOpen + `"` + k + `"`)
		if strAttr != "" {
			_, isStr := v.GetKind().(*structpb.Value_StringValue)
			b.WriteString(strAttr + map[bool]string{true: `"true"`, false: `"false"`}[isStr])
		}
		b.WriteString(">" + valueText(v) + paramClose + "\n")
	}
	return b.String() + close + "\n"
}

// deepseekCall reads NAME<｜tool▁sep｜>{…} (V3.1), or the V3 form
// function<｜tool▁sep｜>NAME\n```json\n{…}\n```.
func deepseekCall(inner string, sc *scanCtx) ([]*rawCall, error) {
	name, args, ok := strings.Cut(inner, "<｜tool▁sep｜>")
	if !ok {
		return nil, errors.New("no <｜tool▁sep｜>")
	}
	if strings.TrimSpace(name) == "function" {
		nl := strings.IndexByte(args, '\n')
		if nl < 0 {
			return nil, errors.New("no arguments after the function name")
		}
		name, args = args[:nl], strings.TrimSpace(args[nl:])
		args = strings.TrimSuffix(strings.TrimPrefix(args, "```json"), "```")
	}
	return oneCall(jsonArgs(sc, name, args))
}
