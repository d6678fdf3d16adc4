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

// MiniMax-M3 prefixes every structural tag with a namespace marker:
//
//	]<]minimax[>[<tool_call>
//	]<]minimax[>[<invoke name="NAME">]<]minimax[>[<city>Paris]<]minimax[>[</city>]<]minimax[>[</invoke>
//	]<]minimax[>[</tool_call>
//
// An argument is an element named after it; an object nests elements, an
// array repeats <item> (a repeated name also makes a list). Leaf values
// are typed by the tool's schema. Sources: SGLang
// python/sglang/srt/function_call/minimax_m3.py, vLLM
// tests/tool_parsers/test_minimax_m3_tool_parser.py (docs/formats.md names
// the commits); the reasoning tags from xgrammar's minimax_m3 structural tag.
const (
	m3NS         = "]<]minimax[>["
	m3Open       = m3NS + "<tool_call>"
	m3Close      = m3NS + "</tool_call>"
	m3InvokeOpen = m3NS + `<invoke name="`
	m3InvokeEnd  = m3NS + "</invoke>"
	// m3MaxDepth bounds the nesting of one argument, so a hostile reply
	// cannot build an arbitrarily deep value.
	m3MaxDepth = 64
)

func miniMaxM3Spec() *dialectSpec {
	g := newGrammar("minimax_m3",
		thinkBlock("<mm:think>", "</mm:think>", ""),
		enters(alone(m3Open)), leaves(alone(m3Close)),
		within(closedBy(m3InvokeOpen, m3InvokeEnd, miniMaxM3Invoke)))
	// Invokes stand as they complete (the engines stream them so); one cut
	// off after them is dropped.
	g.dropCutTail = true
	return &dialectSpec{
		g:    g,
		open: m3Open, close: m3Close,
		shape: m3Open + "\n" + m3InvokeOpen + `TOOL_NAME">` + m3NS + "<PARAM_NAME>value" + m3NS + "</PARAM_NAME>" + m3InvokeEnd + "\n" + m3Close +
			"\nOne element per argument, named after it; nest elements for an object, repeat <item> for an array.",
		call: func(c *toolfleetv1.ToolCall) string {
			var b strings.Builder
			b.WriteString(m3Open + "\n" + m3InvokeOpen + c.GetName() + `">`)
			args := canon.ArgumentsOf(c)
			for _, k := range sortedKeys(args) {
				renderM3Element(&b, k, args.GetFields()[k])
			}
			b.WriteString(m3InvokeEnd + "\n" + m3Close)
			return b.String()
		},
		// The M3 template's tool-result form is in no stored source: results
		// go back in the generic <tool_response> form.
		result: toolResponse,
	}
}

// renderM3Element writes one argument as an element: objects as nested
// elements, arrays as <item>s, strings verbatim, other leaves as JSON.
func renderM3Element(b *strings.Builder, tag string, v *structpb.Value) {
	b.WriteString(m3NS + "<" + tag + ">")
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		for _, key := range sortedKeys(k.StructValue) {
			renderM3Element(b, key, k.StructValue.GetFields()[key])
		}
	case *structpb.Value_ListValue:
		for _, item := range k.ListValue.GetValues() {
			renderM3Element(b, "item", item)
		}
	default:
		b.WriteString(valueText(v))
	}
	b.WriteString(m3NS + "</" + tag + ">")
}

// m3Node is an element being read: its name, schema and value so far.
type m3Node struct {
	tag    string
	schema map[string]any
	text   string            // a leaf's text
	fields map[string]any    // an object's children (*structpb.Value or []*structpb.Value for a repeated name)
	order  []string          // the children's names, in order
	items  []*structpb.Value // an array's children
	array  bool
	leaf   bool
}

// miniMaxM3Invoke reads `NAME">` and the argument elements of one invoke.
func miniMaxM3Invoke(inner string, sc *scanCtx) ([]*rawCall, error) {
	name, body, ok := strings.Cut(inner, `">`)
	if !ok {
		return nil, errors.New(`expected "> after the invoke name`)
	}
	name, err := toolName(name)
	if err != nil {
		return nil, err
	}
	props := propertySchemas(sc.tools, name)
	root := &m3Node{schema: map[string]any{"type": "object", "properties": anyMap(props)}, fields: map[string]any{}}
	stack := []*m3Node{root}
	fail := func(err error) ([]*rawCall, error) {
		return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: err}
	}
	pieces := strings.Split(body, m3NS)
	if strings.TrimSpace(pieces[0]) != "" {
		return fail(fmt.Errorf("text outside an argument: %.40q", pieces[0]))
	}
	for _, piece := range pieces[1:] {
		top := stack[len(stack)-1]
		if tag, ok := strings.CutPrefix(piece, "</"); ok {
			tag, rest, ok := strings.Cut(tag, ">")
			if !ok || len(stack) == 1 || strings.TrimSpace(tag) != top.tag {
				return fail(fmt.Errorf("unexpected closing tag %.40q", piece))
			}
			if strings.TrimSpace(rest) != "" {
				return fail(fmt.Errorf("text between elements: %.40q", rest))
			}
			v, err := top.value()
			if err != nil {
				return fail(err)
			}
			stack = stack[:len(stack)-1]
			stack[len(stack)-1].add(top.tag, v)
			continue
		}
		tag, text, ok := strings.Cut(strings.TrimPrefix(piece, "<"), ">")
		tag = strings.TrimSpace(tag)
		if !strings.HasPrefix(piece, "<") || !ok || tag == "" {
			return fail(fmt.Errorf("expected an element at %.40q", piece))
		}
		if top.leaf {
			return fail(fmt.Errorf("element %q inside the value of %q", tag, top.tag))
		}
		if len(stack) > m3MaxDepth {
			return fail(fmt.Errorf("arguments nested deeper than %d", m3MaxDepth))
		}
		stack = append(stack, top.child(tag, text))
	}
	if len(stack) != 1 {
		return fail(fmt.Errorf("element %q not closed", stack[len(stack)-1].tag))
	}
	args, err := root.value()
	if err != nil {
		return fail(err)
	}
	return []*rawCall{{name: name, args: args.GetStructValue()}}, nil
}

func anyMap(m map[string]any) any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// child opens element tag under n, its text being what followed the tag.
// Text makes it a leaf; an element with none holds elements, an array
// when the schema says so (or, with no schema, when its children are
// <item>s: decided at the first child).
func (n *m3Node) child(tag, text string) *m3Node {
	var schema map[string]any
	if n.array {
		schema, _ = n.schema["items"].(map[string]any)
	} else {
		props, _ := n.schema["properties"].(map[string]any)
		if schema, _ = props[tag].(map[string]any); schema == nil {
			schema, _ = n.schema["additionalProperties"].(map[string]any)
		}
	}
	c := &m3Node{tag: tag, schema: schema}
	types := canon.SchemaTypes(schema)
	scalar := len(types) > 0 && !containsAny(types, "object", "array")
	if strings.TrimSpace(text) != "" || scalar {
		c.leaf, c.text = true, strings.TrimRightFunc(text, isSpace)
	}
	c.array = containsAny(types, "array") && !containsAny(types, "object")
	return c
}

func isSpace(r rune) bool { return r == ' ' || r == '\t' || r == '\r' || r == '\n' }

func containsAny(types []string, want ...string) bool {
	for _, t := range types {
		for _, w := range want {
			if t == w {
				return true
			}
		}
	}
	return false
}

// add sets a closed child's value: appended in an array, a name seen
// before making a list.
func (n *m3Node) add(tag string, v *structpb.Value) {
	if n.fields == nil && !n.array && len(n.items) == 0 && tag == "item" && len(canon.SchemaTypes(n.schema)) == 0 {
		n.array = true // no schema: a list of <item>s is an array
	}
	if n.array {
		n.items = append(n.items, v)
		return
	}
	if n.fields == nil {
		n.fields = map[string]any{}
	}
	switch prev := n.fields[tag].(type) {
	case nil:
		n.fields[tag] = v
		n.order = append(n.order, tag)
	case *structpb.Value:
		n.fields[tag] = []*structpb.Value{prev, v}
	case []*structpb.Value:
		n.fields[tag] = append(prev, v)
	}
}

// value is the element's value: a leaf typed by its schema, an array, or
// an object.
func (n *m3Node) value() (*structpb.Value, error) {
	switch {
	case n.leaf:
		text := n.text
		if containsAny(canon.SchemaTypes(n.schema), "integer") {
			text = trimLeadingZeros(strings.TrimSpace(text))
		}
		v, err := coerceParameter(text, n.schema)
		if err != nil {
			return nil, fmt.Errorf("argument %q: %w", n.tag, err)
		}
		return v, nil
	case n.array:
		return structpb.NewListValue(&structpb.ListValue{Values: n.items}), nil
	}
	fields := map[string]*structpb.Value{}
	for _, k := range n.order {
		switch v := n.fields[k].(type) {
		case *structpb.Value:
			fields[k] = v
		case []*structpb.Value:
			fields[k] = structpb.NewListValue(&structpb.ListValue{Values: v})
		}
	}
	return structpb.NewStructValue(&structpb.Struct{Fields: fields}), nil
}

// trimLeadingZeros reads "018956" as the integer the engines make of it.
func trimLeadingZeros(s string) string {
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	if len(digits) < 2 || digits[0] != '0' || strings.Trim(digits, "0123456789") != "" {
		return s
	}
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		digits = "0"
	}
	if neg {
		return "-" + digits
	}
	return digits
}
