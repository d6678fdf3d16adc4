package dialect

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// Kimi K3 writes its reply as XTML channels built from three special
// tokens (<|open|>, <|close|>, <|sep|>): a think channel (reasoning), a
// response channel (the answer) and a tools channel holding the calls.
// Sources: vLLM vllm/frontend/processing/tool_parsers/kimi_k3_tool_parser.py
// and SGLang python/sglang/srt/function_call/kimik3_detector.py with
// kimik3_format.py (docs/formats.md names the commits).
const (
	k3ThinkOpen   = "<|open|>think<|sep|>"
	k3ThinkClose  = "<|close|>think<|sep|>"
	k3RespOpen    = "<|open|>response<|sep|>"
	k3RespClose   = "<|close|>response<|sep|>"
	k3ToolsOpen   = "<|open|>tools<|sep|>"
	k3ToolsClose  = "<|close|>tools<|sep|>"
	k3MsgClose    = "<|close|>message<|sep|>"
	k3CallOpen    = "<|open|>call"
	k3CallClose   = "<|close|>call<|sep|>"
	k3ArgOpen     = "<|open|>argument"
	k3ArgClose    = "<|close|>argument<|sep|>"
	k3Sep         = "<|sep|>"
	k3ToolMessage = `<|open|>message role="tool"`
)

func kimiK3Spec() *dialectSpec {
	call := closedBy(k3CallOpen, k3CallClose, kimiK3Call)
	read := call.read
	call.read = func(s string, eof bool, sc *scanCtx) (unit, error) {
		// "<|open|>call" opens a call only when attributes follow (the
		// engines' pattern); "<|open|>calls…" is text.
		rest := s[len(k3CallOpen):]
		switch {
		case rest == "" && !eof:
			return unit{}, nil
		case rest == "" || !strings.ContainsAny(rest[:1], " \t\r\n"):
			return unit{plain: true}, nil
		}
		return read(s, eof, sc)
	}
	g := newGrammar("kimi_k3",
		thinkBlock(k3ThinkOpen, k3ThinkClose, ""),
		alone(k3RespOpen), alone(k3RespClose), alone(k3MsgClose), alone("<|end_of_msg|>"),
		enters(alone(k3ToolsOpen)), leaves(alone(k3ToolsClose)), within(call))
	// The tools channel may end with the text (the engines read it open):
	// its complete calls stand, a call cut off after them is dropped.
	g.dropCutTail = true
	return &dialectSpec{
		g:    g,
		open: k3ToolsOpen, close: k3ToolsClose,
		shape: k3ToolsOpen + k3CallOpen + ` tool="TOOL_NAME" index="1"` + k3Sep +
			k3ArgOpen + ` key="PARAM_NAME" type="string"` + k3Sep + "text value" + k3ArgClose +
			k3ArgOpen + ` key="OTHER" type="object"` + k3Sep + "JSON value" + k3ArgClose +
			k3CallClose + k3ToolsClose + "\nString values are raw text; any other type is JSON. Number the calls of a turn 1, 2, …",
		call: func(c *toolfleetv1.ToolCall) string { return k3ToolsOpen + renderKimiK3Call(c, 1) + k3ToolsClose },
		result: func(r *toolfleetv1.ToolResult) string {
			// A tool message carries the tool's name (release encoder, as
			// the engines' K3 renderers describe it).
			return k3ToolMessage + ` tool="` + k3Escape(r.GetName()) + `" index="1"` + k3Sep + resultJSON(r) + k3MsgClose
		},
	}
}

// renderKimiK3Call writes one call block: string arguments raw, others as
// JSON with their JSON type named.
func renderKimiK3Call(c *toolfleetv1.ToolCall, index int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `%s tool="%s" index="%d"%s`, k3CallOpen, k3Escape(c.GetName()), index, k3Sep)
	args := canon.ArgumentsOf(c)
	for _, k := range sortedKeys(args) {
		v := args.GetFields()[k]
		b.WriteString(k3ArgOpen + ` key="` + k3Escape(k) + `" type="` + jsonTypeName(v) + `"` + k3Sep + valueText(v) + k3ArgClose)
	}
	return b.String() + k3CallClose
}

func jsonTypeName(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return "string"
	case *structpb.Value_NumberValue:
		return "number"
	case *structpb.Value_BoolValue:
		return "boolean"
	case *structpb.Value_ListValue:
		return "array"
	case *structpb.Value_StructValue:
		return "object"
	}
	return "null"
}

// The K3 encoder's attribute escaping, and its reverse.
var (
	k3Escaper   = strings.NewReplacer("&", "&amp;", `"`, "&quot;")
	k3Unescaper = strings.NewReplacer("&quot;", `"`, "&amp;", "&")
)

// k3Escape escapes an attribute value as the K3 encoder does.
func k3Escape(s string) string { return k3Escaper.Replace(s) }

// kimiK3Call reads the inside of a call block: ` tool="NAME" index="N"`,
// <|sep|>, then argument blocks. A type="string" value is the raw text;
// any other type is JSON, and a value that is not is an error (the engines
// pass it on as a string, which would run the tool with a mistyped value).
func kimiK3Call(inner string, sc *scanCtx) ([]*rawCall, error) {
	attrs, body, ok := strings.Cut(inner, k3Sep)
	if !ok {
		return nil, errors.New("call without <|sep|>")
	}
	name, err := toolName(k3Attrs(attrs)["tool"])
	if err != nil {
		return nil, err
	}
	fields := map[string]*structpb.Value{}
	for body = strings.TrimSpace(body); body != ""; body = strings.TrimSpace(body) {
		if !strings.HasPrefix(body, k3ArgOpen) {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: fmt.Errorf("text outside an argument: %.40q", body)}
		}
		arg, rest, ok := strings.Cut(body[len(k3ArgOpen):], k3ArgClose)
		if !ok {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: errors.New("argument without its close")}
		}
		attrs, raw, ok := strings.Cut(arg, k3Sep)
		if !ok {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: errors.New("argument without <|sep|>")}
		}
		a := k3Attrs(attrs)
		key := a["key"]
		if _, dup := fields[key]; dup || key == "" {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: fmt.Errorf("argument %q empty or repeated", key)}
		}
		if typ, ok := a["type"]; !ok || typ == "string" {
			fields[key] = structpb.NewStringValue(raw)
		} else if fields[key], err = canon.DecodeJSONValue([]byte(raw)); err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: fmt.Errorf("argument %q of type %s: %w", key, typ, err)}
		}
		body = rest
	}
	return []*rawCall{{name: name, args: &structpb.Struct{Fields: fields}}}, nil
}

// k3Attrs reads key="value" pairs (values unescaped as the encoder
// escaped them); anything else between them is skipped, as the engines do.
func k3Attrs(s string) map[string]string {
	out := map[string]string{}
	for {
		eq := strings.Index(s, `="`)
		if eq < 0 {
			return out
		}
		k := eq
		for k > 0 && (isNameByte(s[k-1]) && s[k-1] != '.' && s[k-1] != '-') {
			k--
		}
		v, rest, ok := strings.Cut(s[eq+2:], `"`)
		if !ok {
			return out
		}
		if key := s[k:eq]; key != "" {
			if _, seen := out[key]; !seen {
				out[key] = k3Unescaper.Replace(v)
			}
		}
		s = rest
	}
}
