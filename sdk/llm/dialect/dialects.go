package dialect

import (
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
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

// Dialects returns every dialect, in the order of the constants (the 2026
// families of families.go last).
func Dialects() []Dialect {
	return []Dialect{Qwen3Coder, Harmony, Mistral, Llama3JSON, Pythonic, KimiK2, GLM45, MiniMaxM2, DeepSeekV31, DeepSeekV32,
		Qwen35, GLM47, Gemma4, Llama4Pythonic, Llama4JSON, DeepSeekV4, DeepSeekV41, KimiK3, MiniMaxM3}
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

// Parse implements TextProtocol. A call cut off before its end is never
// executed: it is an error matching ErrTruncated (and ErrMalformed), except
// where the dialect recovers as the serving engines do (a kimi_k2 or
// deepseek_v31 call cut off after complete ones is dropped; a minimax_m2
// section never closed is text). docs/formats.md, "Recovery from broken
// output", has the whole policy.
func (d Dialect) Parse(text string, tools []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error) {
	return parseDialect(d, text, tools)
}

func toolResponse(r *toolfleetv1.ToolResult) string {
	return renderResultText("<tool_response>", "</tool_response>", r)
}

var dialectSpecs = map[Dialect]*dialectSpec{
	Qwen3Coder: {
		g: newGrammar("qwen3_coder",
			endedBy(closedBy("<tool_call>", "</tool_call>", qwenToolCall), qwenComplete, qwenToolCall),
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
			for i, k := range sortedKeys(canon.ArgumentsOf(c)) {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(k + "=")
				renderPyLiteral(&b, canon.ArgumentsOf(c).GetFields()[k])
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
			for _, k := range sortedKeys(canon.ArgumentsOf(c)) {
				b.WriteString("<arg_key>" + k + "</arg_key>\n<arg_value>" + valueText(canon.ArgumentsOf(c).GetFields()[k]) + "</arg_value>\n")
			}
			return b.String() + "</tool_call>"
		},
		result: toolResponse,
	},
	MiniMaxM2: invokeDialect("minimax_m2", "<minimax:tool_call>", "</minimax:tool_call>", "", "", true,
		"<parameter name=\"PARAM_NAME\">value</parameter>\nOne <parameter> per argument; write arrays and objects as JSON.",
		func(r *toolfleetv1.ToolResult) string { return renderResultText("<response>", "</response>", r) }),
	DeepSeekV31: sectionDialect("deepseek_v31", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
		"<｜tool▁sep｜>", "TOOL_NAME", (*toolfleetv1.ToolCall).GetName, deepseekCall, "",
		func(r *toolfleetv1.ToolResult) string {
			return "<｜tool▁output▁begin｜>" + resultJSON(r) + "<｜tool▁output▁end｜>"
		}),
	DeepSeekV32: invokeDialect("deepseek_v32", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜", " string=", false,
		"<｜DSML｜parameter name=\"PARAM_NAME\" string=\"true\">text value</｜DSML｜parameter>\n<｜DSML｜parameter name=\"OTHER\" string=\"false\">JSON value</｜DSML｜parameter>",
		func(r *toolfleetv1.ToolResult) string {
			return "<function_results>\n<result>" + resultJSON(r) + "</result>\n</function_results>"
		}),
}

// sectionDialect is the shape Kimi K2 and DeepSeek-V3.1 share: a section
// of calls, each callOpen HEAD sep {JSON arguments} callClose, where head
// writes a call's HEAD (its name, or Kimi's id) and read parses a call.
// Calls count only inside the section (outside it, the markers are text),
// and a call cut off after complete ones is dropped (docs/formats.md,
// "Recovery").
func sectionDialect(name, open, close, callOpen, callClose, sep, headExample string, head func(*toolfleetv1.ToolCall) string,
	read func(string, *scanCtx) ([]*rawCall, error), note string, result func(*toolfleetv1.ToolResult) string) *dialectSpec {
	g := newGrammar(name, enters(alone(open)), leaves(alone(close)), within(closedBy(callOpen, callClose, read)))
	g.dropCutTail = true
	return &dialectSpec{
		g:    g,
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
// marks string values when the dialect has that attribute. Invokes count
// only inside the section. whole: the section is one unit, its calls
// returned when it closes, and a section never closed is text (MiniMax,
// as the engines read it).
func invokeDialect(name, open, close, prefix, strAttr string, whole bool, param string, result func(*toolfleetv1.ToolResult) string) *dialectSpec {
	tag := func(t string) string { return "<" + prefix[min(1, len(prefix)):] + t }
	endTag := func(t string) string { return "</" + prefix[min(1, len(prefix)):] + t }
	invokeOpen, invokeClose := tag("invoke name="), endTag("invoke>")
	paramOpen, paramClose := tag("parameter name="), endTag("parameter>")
	invoke := func(inner string, sc *scanCtx) ([]*rawCall, error) {
		return invokeCall(inner, paramOpen, paramClose, sc)
	}
	g := newGrammar(name, enters(alone(open)), leaves(alone(close)), within(closedBy(invokeOpen, invokeClose, invoke)))
	if whole {
		g = newGrammar(name, textUnlessClosed(closedBy(open, close, func(inner string, sc *scanCtx) ([]*rawCall, error) {
			return invokeSection(inner, invokeOpen, invokeClose, invoke, sc)
		})))
	}
	return &dialectSpec{
		g:    g,
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
	b, _ := json.Marshal(map[string]any{"content": canon.ResultText(r), "is_error": r.GetIsError()})
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
