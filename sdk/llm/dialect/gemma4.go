package dialect

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// Gemma 4's markers and its string quote (one token each).
const (
	gemmaOpen, gemmaClose = "<|tool_call>", "<tool_call|>"
	gemmaQuote            = `<|"|>`
)

func gemma4Spec() *dialectSpec {
	return &dialectSpec{
		g: newGrammar("gemma4",
			thinkBlock("<|channel>", "<channel|>", "thought\n"),
			endedBy(closedBy(gemmaOpen, gemmaClose, gemmaCall), gemmaComplete, gemmaCall)),
		open: gemmaOpen, close: gemmaClose,
		shape: gemmaOpen + `call:TOOL_NAME{param:` + gemmaQuote + `text` + gemmaQuote + `,count:3,flag:true,list:[1,2]}` + gemmaClose +
			"\nQuote strings with " + gemmaQuote + "; keys are bare.",
		call: func(c *toolfleetv1.ToolCall) string {
			var b strings.Builder
			b.WriteString(gemmaOpen + "call:" + c.GetName())
			renderGemmaValue(&b, structpb.NewStructValue(canon.ArgumentsOf(c)))
			b.WriteString(gemmaClose)
			return b.String()
		},
		result: func(r *toolfleetv1.ToolResult) string {
			var b strings.Builder
			b.WriteString("<|tool_response>response:" + r.GetName() + "{value:")
			renderGemmaValue(&b, structpb.NewStringValue(canon.ResultText(r)))
			b.WriteString("}<tool_response|>")
			return b.String()
		},
	}
}

// gemmaCall reads the inside of a call: call:NAME{arguments}.
func gemmaCall(inner string, sc *scanCtx) ([]*rawCall, error) {
	t := strings.TrimSpace(inner)
	rest, ok := strings.CutPrefix(t, "call:")
	if !ok {
		return nil, fmt.Errorf("gemma4 call does not start with \"call:\": %.40q", t)
	}
	brace := strings.IndexByte(rest, '{')
	if brace < 0 {
		return nil, fmt.Errorf("gemma4 call %.40q has no arguments", rest)
	}
	name, err := toolName(rest[:brace])
	if err != nil {
		return nil, err
	}
	p := gemmaParser{s: rest, i: brace}
	v, err := p.object()
	if err == nil && strings.TrimSpace(p.s[p.i:]) != "" {
		err = fmt.Errorf("text after the arguments: %.40q", p.s[p.i:])
	}
	if err != nil {
		return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
	}
	return []*rawCall{{name: name, args: v.GetStructValue()}}, nil
}

// gemmaComplete: a call the text ends inside stands when its arguments are
// complete (the closing brace came; only the end marker is missing).
func gemmaComplete(inner string) (string, bool) {
	t := strings.TrimSpace(inner)
	rest, ok := strings.CutPrefix(t, "call:")
	brace := strings.IndexByte(rest, '{')
	if !ok || brace < 0 {
		return "", false
	}
	p := gemmaParser{s: rest, i: brace}
	if _, err := p.object(); err != nil || strings.TrimSpace(p.s[p.i:]) != "" {
		return "", false
	}
	return t, true
}

// errGemmaEnd is a value the text ends inside.
var errGemmaEnd = errors.New("arguments end early")

// gemmaParser reads Gemma 4's argument syntax: {key:value,…} with bare
// keys, strings in <|"|> (or JSON quotes), arrays, and bare true, false,
// null and numbers.
type gemmaParser struct {
	s     string
	i     int
	depth int
}

func (p *gemmaParser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *gemmaParser) value() (*structpb.Value, error) {
	p.space()
	switch {
	case p.i >= len(p.s):
		return nil, errGemmaEnd
	case strings.HasPrefix(p.s[p.i:], gemmaQuote):
		end := strings.Index(p.s[p.i+len(gemmaQuote):], gemmaQuote)
		if end < 0 {
			return nil, errGemmaEnd
		}
		v := p.s[p.i+len(gemmaQuote) : p.i+len(gemmaQuote)+end]
		p.i += 2*len(gemmaQuote) + end
		return structpb.NewStringValue(v), nil
	case p.s[p.i] == '"':
		j := p.i + 1
		for ; j < len(p.s) && p.s[j] != '"'; j++ {
			if p.s[j] == '\\' {
				j++
			}
		}
		if j >= len(p.s) {
			return nil, errGemmaEnd
		}
		v, err := strconv.Unquote(p.s[p.i : j+1])
		if err != nil {
			return nil, fmt.Errorf("bad quoted string %.40q", p.s[p.i:j+1])
		}
		p.i = j + 1
		return structpb.NewStringValue(v), nil
	case p.s[p.i] == '{':
		return p.object()
	case p.s[p.i] == '[':
		return p.list()
	}
	j := p.i
	for j < len(p.s) && strings.IndexByte(",}]", p.s[j]) < 0 {
		j++
	}
	if j >= len(p.s) {
		return nil, errGemmaEnd
	}
	bare := strings.TrimSpace(p.s[p.i:j])
	p.i = j
	switch bare {
	case "true", "false":
		return structpb.NewBoolValue(bare == "true"), nil
	case "null":
		return structpb.NewNullValue(), nil
	}
	f, err := strconv.ParseFloat(bare, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("bad value %.40q", bare)
	}
	return structpb.NewNumberValue(f), nil
}

func (p *gemmaParser) enter() error {
	if p.depth++; p.depth > 64 {
		return errors.New("arguments nested too deep")
	}
	p.i++
	return nil
}

func (p *gemmaParser) object() (*structpb.Value, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	fields := map[string]*structpb.Value{}
	for first := true; ; first = false {
		p.space()
		if p.i >= len(p.s) {
			return nil, errGemmaEnd
		}
		if p.s[p.i] == '}' {
			p.i++
			return structpb.NewStructValue(&structpb.Struct{Fields: fields}), nil
		}
		if !first {
			if p.s[p.i] != ',' {
				return nil, fmt.Errorf("want \",\" or \"}\" at %.20q", p.s[p.i:])
			}
			p.i++
			p.space()
		}
		colon := strings.IndexByte(p.s[p.i:], ':')
		if colon < 0 {
			return nil, errGemmaEnd
		}
		key := strings.TrimSpace(p.s[p.i : p.i+colon])
		key = strings.TrimSuffix(strings.TrimPrefix(key, gemmaQuote), gemmaQuote)
		if key == "" || strings.ContainsAny(key, "{}[],") {
			return nil, fmt.Errorf("bad key %.40q", key)
		}
		p.i += colon + 1
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		fields[key] = v
	}
}

func (p *gemmaParser) list() (*structpb.Value, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	var items []*structpb.Value
	for first := true; ; first = false {
		p.space()
		if p.i >= len(p.s) {
			return nil, errGemmaEnd
		}
		if p.s[p.i] == ']' {
			p.i++
			return structpb.NewListValue(&structpb.ListValue{Values: items}), nil
		}
		if !first {
			if p.s[p.i] != ',' {
				return nil, fmt.Errorf("want \",\" or \"]\" at %.20q", p.s[p.i:])
			}
			p.i++
		}
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		items = append(items, v)
	}
}

// renderGemmaValue writes v in Gemma 4's argument syntax.
func renderGemmaValue(b *strings.Builder, v *structpb.Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		b.WriteString(gemmaQuote + k.StringValue + gemmaQuote)
	case *structpb.Value_StructValue:
		b.WriteByte('{')
		for i, key := range sortedKeys(k.StructValue) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(key + ":")
			renderGemmaValue(b, k.StructValue.GetFields()[key])
		}
		b.WriteByte('}')
	case *structpb.Value_ListValue:
		b.WriteByte('[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				b.WriteByte(',')
			}
			renderGemmaValue(b, e)
		}
		b.WriteByte(']')
	default:
		b.WriteString(valueText(v))
	}
}
