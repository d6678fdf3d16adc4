package dialect

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// The readers of the dialects (dialects.go): each turns the text of one call
// unit, as the scanner (dialect.go) cut it, into raw calls, typed by the tool's
// schema where the dialect writes untyped values.

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

// pythonStart is "[" then a tool name and "(": a pythonic call list;
// pythonHeadPrefix is text that may still grow into one.
var (
	pythonStart      = regexp.MustCompile(`^\[\s*[A-Za-z_][A-Za-z0-9_.\-]*\s*\(`)
	pythonHeadPrefix = regexp.MustCompile(`^\[\s*(?:[A-Za-z_][A-Za-z0-9_.\-]*\s*)?$`)
)

// pythonicList reads a call list on a line of its own; any other "[" is
// text. As in vLLM's and SGLang's pattern (pythonic_tool_parser.py,
// pythonic_detector.py), the "(" of the first call is followed at once by
// ")" or a keyword argument's name: "[get_time( )]" or "[f('x')]" is text.
func pythonicList(s string, eof bool, sc *scanCtx) (unit, error) {
	head := pythonStart.FindStringIndex(s)
	if head == nil {
		if !eof && len(s) < 256 && pythonHeadPrefix.MatchString(s) {
			return unit{}, nil // not decided yet
		}
		return unit{plain: true}, nil
	}
	if len(s) == head[1] {
		if eof {
			return unit{plain: true}, nil
		}
		return unit{}, nil // not decided yet
	}
	if c := s[head[1]]; c != ')' && !isIdentStart(c) {
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
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
		}
		val, rest, err := element(strings.TrimSpace(rest), "<arg_value>", "</arg_value>")
		if err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
		}
		if err := setParameter(fields, strings.TrimSpace(key), val, props, ""); err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
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
		if v, err = canon.DecodeJSONValue([]byte(raw)); err != nil {
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
	if body := strings.TrimSpace(rest); strings.HasPrefix(body, "{") && strings.Contains(paramOpen, "DSML") {
		// The DSML lineage (V3.2 on) also takes the arguments as one JSON
		// object in the invoke, as the engines read it.
		return oneCall(jsonArgs(sc, name, body))
	}
	props := propertySchemas(sc.tools, name)
	fields := map[string]*structpb.Value{}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		body, after, err := element(rest, paramOpen, paramClose)
		if err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
		}
		key, attrs, err := attrValue(body)
		if err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
		}
		attrs, value, ok := strings.Cut(attrs, ">")
		if !ok {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: errors.New("expected > after the parameter name")}
		}
		str := ""
		if a, ok := strings.CutPrefix(strings.TrimSpace(attrs), "string="); ok {
			if str, _, err = attrValue(a); err != nil {
				return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
			}
		}
		if err := setParameter(fields, key, value, props, str); err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
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
	for _, k := range sortedKeys(canon.ArgumentsOf(c)) {
		v := canon.ArgumentsOf(c).GetFields()[k]
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

// qwenComplete is the part of an unclosed Qwen3-Coder <tool_call> that
// stands without its </tool_call>: a complete JSON object, or the text up
// to the last </function> when no <function= is open after it (what
// follows it is dropped). ok is false when the call was cut off.
func qwenComplete(inner string) (string, bool) {
	if t := strings.TrimSpace(inner); strings.HasPrefix(t, "{") {
		return t, json.Valid([]byte(t))
	}
	i := strings.LastIndex(inner, "</function>")
	if i < 0 || strings.Contains(inner[i:], "<function=") {
		return "", false
	}
	return inner[:i+len("</function>")], true
}

// invokeSection reads the inside of a MiniMax section: invokes separated
// by whitespace.
func invokeSection(inner, open, close string, invoke func(string, *scanCtx) ([]*rawCall, error), sc *scanCtx) ([]*rawCall, error) {
	var calls []*rawCall
	for rest := strings.TrimSpace(inner); rest != ""; rest = strings.TrimSpace(rest) {
		body, after, err := element(rest, open, close)
		if err != nil {
			return nil, err
		}
		c, err := invoke(body, sc)
		if err != nil {
			return nil, err
		}
		calls = append(calls, c...)
		sc.pending += len(c)
		rest = after
	}
	return calls, nil
}
