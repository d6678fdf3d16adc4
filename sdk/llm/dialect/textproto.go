package dialect

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// TextProtocols returns every text protocol: the three prompt protocols
// (the order ParseAuto tries them in a native model's text), then every
// Dialect.
func TextProtocols() []llm.TextProtocol {
	out := promptProtocols()
	for _, d := range Dialects() {
		out = append(out, d)
	}
	return out
}

// promptProtocols are the protocols toolfleet teaches in the prompt, tried
// in this order in the text of a model that has native calls.
func promptProtocols() []llm.TextProtocol {
	return []llm.TextProtocol{XMLFunction{}, Hermes{}, Fenced{}}
}

// TextProtocolByName returns the text protocol with that Name.
func TextProtocolByName(name string) (llm.TextProtocol, bool) {
	for _, p := range TextProtocols() {
		if p.Name() == name {
			return p, true
		}
	}
	return nil, false
}

// BlockError is a malformed text-protocol block. errors.Is matches
// ErrMalformed, and ErrInvalidArguments when the block's arguments were the
// problem (Err is then the *ArgumentsError).
type BlockError struct {
	Protocol string
	Block    int // 1-based position of the block in the text
	// Call is the tool name the block names, when it can be read ("" otherwise).
	Call string
	Err  error
}

func (e *BlockError) Error() string {
	where := fmt.Sprintf("llm: %s tool-call block %d", e.Protocol, e.Block)
	if e.Call != "" {
		where += fmt.Sprintf(" (%s)", e.Call)
	}
	inner := e.Err
	if ae, ok := e.Err.(*llm.ArgumentsError); ok {
		inner = fmt.Errorf("arguments: %w", ae.Err) // the call is named already
	}
	return fmt.Sprintf("%s: %v", where, inner)
}

func (e *BlockError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrMalformed) true.
func (e *BlockError) Is(target error) bool { return target == llm.ErrMalformed }

// namedCall reads the "name" of a JSON call block that does not decode, so
// the error can still say which call was malformed.
var namedCall = regexp.MustCompile(`"name"\s*:\s*"([A-Za-z0-9_.\-]{1,64})"`)

func blockCallName(body string) string {
	if m := namedCall.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// Augment appends p's instructions for tools to a system prompt.
func Augment(system string, p llm.TextProtocol, tools []*toolfleetv1.ToolDefinition) string {
	inst := p.Instructions(tools)
	if strings.TrimSpace(system) == "" {
		return inst
	}
	return strings.TrimRight(system, "\n") + "\n\n" + inst
}

// toolCatalog lists tools with their schemas for the instructions.
func toolCatalog(tools []*toolfleetv1.ToolDefinition) string {
	var b strings.Builder
	for _, d := range tools {
		schema, _ := json.Marshal(canon.SchemaOf(d))
		fmt.Fprintf(&b, "- %s: %s\n  input schema: %s\n", d.GetModelName(), strings.TrimSpace(d.GetDescription()), schema)
	}
	return b.String()
}

// jsonCall is the JSON body of a fenced or Hermes block.
type jsonCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Parameters is accepted for models that use that key instead.
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

func decodeJSONCall(protocol string, block int, body string) (*toolfleetv1.ToolCall, error) {
	var c jsonCall
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&c); err != nil {
		return nil, &BlockError{Protocol: protocol, Block: block, Call: blockCallName(body), Err: err}
	}
	if rest := strings.TrimSpace(body[dec.InputOffset():]); rest != "" {
		return nil, &BlockError{Protocol: protocol, Block: block, Call: c.Name, Err: fmt.Errorf("unexpected text after the call object: %.40q", rest)}
	}
	if c.Name == "" {
		return nil, &BlockError{Protocol: protocol, Block: block, Err: errors.New(`missing "name"`)}
	}
	raw := c.Arguments
	if len(raw) == 0 {
		raw = c.Parameters
	}
	id := c.ID
	if id == "" {
		id = "call_" + strconv.Itoa(block)
	}
	args, err := llm.DecodeArguments(c.Name+" ("+id+")", raw)
	if err != nil {
		return nil, &BlockError{Protocol: protocol, Block: block, Call: c.Name + " (" + id + ")", Err: err}
	}
	return &toolfleetv1.ToolCall{Id: id, Name: c.Name, Arguments: args}, nil
}

func renderJSONCall(c *toolfleetv1.ToolCall) string {
	b, _ := json.Marshal(map[string]any{"id": c.GetId(), "name": c.GetName(), "arguments": json.RawMessage(canon.CallArguments(c))})
	return string(b)
}

// Fenced is the fenced-block protocol: a line "~~~tool_call", a JSON object
// {"name", "arguments", "id"?}, a line "~~~". Several blocks may appear in
// one message; missing ids are generated as "call_<n>".
type Fenced struct{}

// Name implements TextProtocol.
func (Fenced) Name() string { return "fenced" }

// OpenTag implements TextProtocol.
func (Fenced) OpenTag() string { return "~~~tool_call" }

// CloseTag implements TextProtocol.
func (Fenced) CloseTag() string { return "\n~~~" }

// Instructions implements TextProtocol.
func (Fenced) Instructions(tools []*toolfleetv1.ToolDefinition) string {
	return "You can call tools. To call one, write a block exactly like this, on its own lines:\n" +
		"~~~tool_call\n{\"name\": \"TOOL_NAME\", \"arguments\": {…}}\n~~~\n" +
		"Write one block per call; you may write several. After your calls, stop and wait: the results come back in the next message.\n" +
		"Tools:\n" + toolCatalog(tools)
}

// RenderCall implements TextProtocol.
func (Fenced) RenderCall(c *toolfleetv1.ToolCall) string {
	return "~~~tool_call\n" + renderJSONCall(c) + "\n~~~"
}

// RenderResult implements TextProtocol.
func (Fenced) RenderResult(r *toolfleetv1.ToolResult) string {
	return renderResultText("~~~tool_result", "~~~", r)
}

func renderResultText(open, close string, r *toolfleetv1.ToolResult) string {
	b, _ := json.Marshal(map[string]any{"id": r.GetCallId(), "name": r.GetName(), "content": canon.ResultText(r), "is_error": r.GetIsError()})
	return open + "\n" + string(b) + "\n" + close
}

// Parse implements TextProtocol.
func (Fenced) Parse(text string, _ []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error) {
	lines := strings.SplitAfter(text, "\n")
	var rest strings.Builder
	var calls []*toolfleetv1.ToolCall
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "~~~tool_call" {
			rest.WriteString(lines[i])
			continue
		}
		block := len(calls) + 1
		var body strings.Builder
		closed := false
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == "~~~" {
				closed = true
				break
			}
			body.WriteString(lines[i])
		}
		if !closed {
			return "", nil, &BlockError{Protocol: "fenced", Block: block, Call: blockCallName(body.String()), Err: errors.New("no closing ~~~ line")}
		}
		c, err := decodeJSONCall("fenced", block, body.String())
		if err != nil {
			return "", nil, err
		}
		calls = append(calls, c)
	}
	return strings.TrimSpace(rest.String()), calls, nil
}

// Hermes is the Hermes / Qwen protocol: <tool_call>{"name": …,
// "arguments": …}</tool_call>.
type Hermes struct{}

// Name implements TextProtocol.
func (Hermes) Name() string { return "hermes" }

// OpenTag implements TextProtocol.
func (Hermes) OpenTag() string { return "<tool_call>" }

// CloseTag implements TextProtocol.
func (Hermes) CloseTag() string { return "</tool_call>" }

// Instructions implements TextProtocol.
func (Hermes) Instructions(tools []*toolfleetv1.ToolDefinition) string {
	var b strings.Builder
	b.WriteString("You may call one or more functions to assist with the user query.\n")
	b.WriteString("You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n")
	for _, d := range tools {
		sig, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]any{"name": d.GetModelName(), "description": d.GetDescription(), "parameters": canon.SchemaOf(d)}})
		b.Write(sig)
		b.WriteByte('\n')
	}
	b.WriteString("</tools>\nFor each function call, return a JSON object with the function name and arguments within <tool_call></tool_call> XML tags:\n")
	b.WriteString("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>\n")
	return b.String()
}

// RenderCall implements TextProtocol.
func (Hermes) RenderCall(c *toolfleetv1.ToolCall) string {
	return "<tool_call>\n" + renderJSONCall(c) + "\n</tool_call>"
}

// RenderResult implements TextProtocol.
func (Hermes) RenderResult(r *toolfleetv1.ToolResult) string {
	return renderResultText("<tool_response>", "</tool_response>", r)
}

// Parse implements TextProtocol.
func (Hermes) Parse(text string, _ []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error) {
	var rest strings.Builder
	var calls []*toolfleetv1.ToolCall
	for {
		start := strings.Index(text, "<tool_call>")
		if start < 0 {
			rest.WriteString(text)
			break
		}
		rest.WriteString(text[:start])
		block := len(calls) + 1
		body := text[start+len("<tool_call>"):]
		end := strings.Index(body, "</tool_call>")
		if end < 0 {
			// A complete JSON call whose </tool_call> never came stands
			// (the serving engines agree); a cut one is ErrTruncated.
			if t := strings.TrimSpace(body); strings.HasPrefix(t, "{") && json.Valid([]byte(t)) {
				end = len(body)
			} else {
				return "", nil, &BlockError{Protocol: "hermes", Block: block, Call: blockCallName(body), Err: fmt.Errorf("no closing </tool_call>: %w", ErrTruncated)}
			}
		}
		c, err := decodeJSONCall("hermes", block, body[:end])
		if err != nil {
			return "", nil, err
		}
		calls = append(calls, c)
		text = body[min(end+len("</tool_call>"), len(body)):]
	}
	return strings.TrimSpace(rest.String()), calls, nil
}

// XMLFunction is the prompt protocol of bare
// <function=NAME><parameter=P>value</parameter></function> blocks that the
// augmenter teaches, one call per turn by definition: Parse and the stream
// stop at the first complete block, whatever the run's parallel setting, and
// what follows it is the model rambling on (dropped, never executed). An
// enclosing <tool_call> is accepted. Parameter values are text, coerced by
// the tool's input schema: integers, numbers and booleans parsed, arrays and
// objects as JSON, strings kept verbatim. With no schema for a parameter,
// JSON is tried, then text. Qwen3-Coder's own form, several wrapped calls
// per turn, is [Qwen3Coder].
type XMLFunction struct{}

// oneCallPerTurn implements singleCall.
func (XMLFunction) oneCallPerTurn() {}

// singleCall is implemented by protocols that allow one call per turn by
// definition (their instructions say so).
type singleCall interface{ oneCallPerTurn() }

// isSingleCall reports whether p allows one call per turn by definition.
func isSingleCall(p llm.TextProtocol) bool {
	_, ok := p.(singleCall)
	return ok
}

// Name implements TextProtocol.
func (XMLFunction) Name() string { return "xml" }

// OpenTag implements TextProtocol.
func (XMLFunction) OpenTag() string { return "<function=" }

// CloseTag implements TextProtocol.
func (XMLFunction) CloseTag() string { return "</function>" }

// Instructions implements TextProtocol.
func (XMLFunction) Instructions(tools []*toolfleetv1.ToolDefinition) string {
	return "You can call tools. To call one, write exactly:\n" +
		"<function=TOOL_NAME>\n<parameter=PARAM_NAME>\nvalue\n</parameter>\n</function>\n" +
		"One <parameter> per argument; write arrays and objects as JSON. Make one call, then stop and wait for its result.\n" +
		"Tools:\n" + toolCatalog(tools)
}

// RenderCall implements TextProtocol.
func (XMLFunction) RenderCall(c *toolfleetv1.ToolCall) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<function=%s>\n", c.GetName())
	args := canon.ArgumentsOf(c).AsMap()
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := args[k]
		text, ok := v.(string)
		if !ok {
			raw, _ := json.Marshal(v)
			text = string(raw)
		}
		fmt.Fprintf(&b, "<parameter=%s>\n%s\n</parameter>\n", k, text)
	}
	b.WriteString("</function>")
	return b.String()
}

// RenderResult implements TextProtocol.
func (XMLFunction) RenderResult(r *toolfleetv1.ToolResult) string {
	return renderResultText("<tool_response>", "</tool_response>", r)
}

// Parse implements TextProtocol: the first block is the call, text before
// it (less an opening <tool_call> wrapper) the remaining text, and what
// follows it is not read.
func (XMLFunction) Parse(text string, tools []*toolfleetv1.ToolDefinition) (string, []*toolfleetv1.ToolCall, error) {
	start := strings.Index(text, "<function=")
	if start < 0 {
		return strings.TrimSpace(text), nil, nil
	}
	c, _, err := functionBlock("xml", 1, text[start:], tools)
	if err != nil {
		return "", nil, err
	}
	before := strings.TrimSuffix(strings.TrimSpace(text[:start]), "<tool_call>")
	return strings.TrimSpace(before), []*toolfleetv1.ToolCall{c}, nil
}

// functionBlock reads the <function=NAME><parameter=…>…</function> block s
// begins with as call number block of protocol.
func functionBlock(protocol string, block int, s string, tools []*toolfleetv1.ToolDefinition) (*toolfleetv1.ToolCall, int, error) {
	id := "call_" + strconv.Itoa(block)
	name, args, n, err := readFunction(s, tools, func(name string) string { return name + " (" + id + ")" })
	if err != nil {
		e := &BlockError{Protocol: protocol, Block: block, Err: err}
		if name != "" {
			e.Call = name
			if errors.Is(err, llm.ErrInvalidArguments) {
				e.Call = name + " (" + id + ")"
			}
		}
		return nil, 0, e
	}
	return &toolfleetv1.ToolCall{Id: id, Name: name, Arguments: args}, n, nil
}

// readFunction reads the <function=NAME>…</function> block s begins with,
// its values typed by the tool's schema (label names the call in argument
// errors); n is the block's length. name is set whenever it could be read.
func readFunction(s string, tools []*toolfleetv1.ToolDefinition, label func(string) string) (name string, args *structpb.Struct, n int, err error) {
	body := s[len("<function="):]
	gt := strings.IndexByte(body, '>')
	end := strings.Index(body, "</function>")
	if gt < 0 || end < 0 || gt > end {
		if gt >= 0 && canon.ModelNamePattern.MatchString(strings.TrimSpace(body[:gt])) {
			name = strings.TrimSpace(body[:gt])
		}
		return name, nil, 0, errors.New("no closing </function>")
	}
	name = strings.TrimSpace(body[:gt])
	if name == "" || strings.ContainsAny(name, "<\n") {
		return "", nil, 0, fmt.Errorf("bad function name %.40q", name)
	}
	args, err = xmlParameters(label(name), body[gt+1:end], propertySchemas(tools, name))
	if err != nil {
		return name, nil, 0, err
	}
	return name, args, len("<function=") + end + len("</function>"), nil
}

// propertySchemas returns the property schemas of the named tool's input.
func propertySchemas(tools []*toolfleetv1.ToolDefinition, name string) map[string]any {
	for _, d := range tools {
		if d.GetModelName() == name {
			props, _ := canon.SchemaOf(d)["properties"].(map[string]any)
			return props
		}
	}
	return nil
}

func xmlParameters(call, body string, props map[string]any) (*structpb.Struct, error) {
	args := map[string]*structpb.Value{}
	for {
		start := strings.Index(body, "<parameter=")
		if start < 0 {
			break
		}
		if stray := strings.TrimSpace(body[:start]); stray != "" {
			return nil, &llm.ArgumentsError{Call: call, Err: fmt.Errorf("text outside <parameter>: %.40q", stray)}
		}
		body = body[start+len("<parameter="):]
		gt := strings.IndexByte(body, '>')
		end := strings.Index(body, "</parameter>")
		if gt < 0 || end < 0 || gt > end {
			return nil, &llm.ArgumentsError{Call: call, Err: errors.New("no closing </parameter>")}
		}
		name := strings.TrimSpace(body[:gt])
		if _, dup := args[name]; dup || name == "" {
			return nil, &llm.ArgumentsError{Call: call, Err: fmt.Errorf("parameter %q empty or repeated", name)}
		}
		raw := strings.TrimSuffix(strings.TrimPrefix(body[gt+1:end], "\n"), "\n")
		schema, _ := props[name].(map[string]any)
		v, err := coerceParameter(raw, schema)
		if err != nil {
			return nil, &llm.ArgumentsError{Call: call, Err: fmt.Errorf("parameter %q: %w", name, err)}
		}
		args[name] = v
		body = body[end+len("</parameter>"):]
	}
	if stray := strings.TrimSpace(body); stray != "" {
		return nil, &llm.ArgumentsError{Call: call, Err: fmt.Errorf("text outside <parameter>: %.40q", stray)}
	}
	return &structpb.Struct{Fields: args}, nil
}

// coerceParameter turns a parameter's text into the JSON value its schema
// wants: the one helper that types the values of every XML-ish dialect
// (xml, qwen3_coder, glm45, minimax_m2, deepseek_v32) and pythonic strings.
// A string schema keeps the text verbatim; typed values must parse (arrays
// and objects as JSON or Python literals).
// Numbers stay exact (see ExactNumber).
func coerceParameter(raw string, schema map[string]any) (*structpb.Value, error) {
	types := canon.SchemaTypes(schema)
	trimmed := strings.TrimSpace(raw)
	if len(types) == 0 {
		if v, err := canon.DecodeJSONValue([]byte(trimmed)); err == nil {
			return v, nil
		}
		return structpb.NewStringValue(raw), nil
	}
	for _, t := range types {
		switch t {
		case "integer":
			if canon.IntegerText.MatchString(trimmed) {
				if v, err := llm.ExactNumber(trimmed); err == nil {
					return v, nil
				}
			}
		case "number":
			if canon.NumberText.MatchString(trimmed) {
				if v, err := llm.ExactNumber(trimmed); err == nil {
					return v, nil
				}
			}
		case "boolean":
			if b, err := strconv.ParseBool(strings.ToLower(trimmed)); err == nil && (trimmed != "1" && trimmed != "0") {
				return structpb.NewBoolValue(b), nil
			}
		case "null":
			if trimmed == "null" || trimmed == "" || trimmed == "None" {
				return structpb.NewNullValue(), nil
			}
		case "array":
			if v := jsonOrPython(trimmed); v.GetListValue() != nil {
				return v, nil
			}
		case "object":
			if v := jsonOrPython(trimmed); v.GetStructValue() != nil {
				return v, nil
			}
		}
	}
	if slices.Contains(types, "string") {
		return structpb.NewStringValue(raw), nil
	}
	return nil, fmt.Errorf("%.40q is not a valid %s", raw, strings.Join(types, " or "))
}

// jsonOrPython reads text as JSON, else as a Python literal (models write
// both); nil when it is neither.
func jsonOrPython(text string) *structpb.Value {
	if v, err := canon.DecodeJSONValue([]byte(text)); err == nil {
		return v
	}
	if v, err := pyLiteral(text); err == nil {
		return v
	}
	return nil
}
