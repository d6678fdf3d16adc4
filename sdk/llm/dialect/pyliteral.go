package dialect

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// maxLiteralDepth bounds the nesting of a Python literal.
const maxLiteralDepth = 64

// pyReader reads Python literals (the pythonic dialect's arguments, and
// values the XML-ish dialects write as Python): strings in single or double
// quotes with their escapes, numbers, True/False/None, lists, tuples and
// dicts with string keys. Numbers stay exact (ExactNumber).
type pyReader struct {
	s string
	i int
}

func (r *pyReader) space() {
	for r.i < len(r.s) && strings.IndexByte(" \t\r\n", r.s[r.i]) >= 0 {
		r.i++
	}
}

func (r *pyReader) peek() byte {
	r.space()
	if r.i < len(r.s) {
		return r.s[r.i]
	}
	return 0
}

func (r *pyReader) expect(c byte) error {
	if r.peek() != c {
		return fmt.Errorf("expected %q at byte %d", c, r.i)
	}
	r.i++
	return nil
}

// ident reads a name (letters, digits, _ and .).
// isIdentStart reports whether b may begin a Python identifier (ASCII).
func isIdentStart(b byte) bool { return b == '_' || b|0x20 >= 'a' && b|0x20 <= 'z' }

func (r *pyReader) ident() string {
	r.space()
	start := r.i
	for r.i < len(r.s) && (isNameByte(r.s[r.i]) && r.s[r.i] != '-') {
		r.i++
	}
	return r.s[start:r.i]
}

func (r *pyReader) value(depth int) (*structpb.Value, error) {
	if depth > maxLiteralDepth {
		return nil, errors.New("literal nested too deeply")
	}
	switch c := r.peek(); {
	case c == '\'' || c == '"':
		s, err := r.str()
		return structpb.NewStringValue(s), err
	case c == '[' || c == '(':
		closer := map[byte]byte{'[': ']', '(': ')'}[c]
		r.i++
		var list []*structpb.Value
		for r.peek() != closer {
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
			if r.peek() != ',' {
				break
			}
			r.i++
		}
		if err := r.expect(closer); err != nil {
			return nil, err
		}
		return structpb.NewListValue(&structpb.ListValue{Values: list}), nil
	case c == '{':
		r.i++
		fields := map[string]*structpb.Value{}
		for r.peek() != '}' {
			k, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			if _, ok := k.GetKind().(*structpb.Value_StringValue); !ok {
				return nil, errors.New("dict key is not a string")
			}
			if err := r.expect(':'); err != nil {
				return nil, err
			}
			v, err := r.value(depth + 1)
			if err != nil {
				return nil, err
			}
			fields[k.GetStringValue()] = v
			if r.peek() != ',' {
				break
			}
			r.i++
		}
		if err := r.expect('}'); err != nil {
			return nil, err
		}
		return structpb.NewStructValue(&structpb.Struct{Fields: fields}), nil
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		start := r.i
		r.i++
		for r.i < len(r.s) && strings.IndexByte("0123456789.eE+-_", r.s[r.i]) >= 0 {
			r.i++
		}
		text := strings.TrimPrefix(strings.ReplaceAll(r.s[start:r.i], "_", ""), "+")
		if !canon.NumberText.MatchString(text) {
			f, err := strconv.ParseFloat(text, 64)
			if err != nil {
				return nil, fmt.Errorf("bad number %.40q", text)
			}
			return structpb.NewNumberValue(f), nil
		}
		return llm.ExactNumber(text)
	default:
		switch w := r.ident(); w {
		case "True", "true":
			return structpb.NewBoolValue(true), nil
		case "False", "false":
			return structpb.NewBoolValue(false), nil
		case "None", "null":
			return structpb.NewNullValue(), nil
		case "":
			return nil, fmt.Errorf("unexpected %q at byte %d", c, r.i)
		default:
			return nil, fmt.Errorf("%.40q is not a literal", w)
		}
	}
}

// str reads a quoted string with Python's common escapes.
func (r *pyReader) str() (string, error) {
	q := r.s[r.i]
	r.i++
	var b strings.Builder
	for r.i < len(r.s) {
		c := r.s[r.i]
		switch {
		case c == q:
			r.i++
			return b.String(), nil
		case c == '\\' && r.i+1 < len(r.s):
			r.i += 2
			switch e := r.s[r.i-1]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case '0':
				b.WriteByte(0)
			case 'u', 'x':
				n := map[byte]int{'u': 4, 'x': 2}[e]
				if r.i+n > len(r.s) {
					return "", errors.New("bad escape")
				}
				code, err := strconv.ParseUint(r.s[r.i:r.i+n], 16, 32)
				if err != nil {
					return "", errors.New("bad escape")
				}
				b.WriteRune(rune(code))
				r.i += n
			default: // \\, \', \" and unknown escapes keep the character
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			r.i++
		}
	}
	return "", errors.New("unterminated string")
}

// pyLiteral reads exactly one Python literal.
func pyLiteral(s string) (*structpb.Value, error) {
	r := &pyReader{s: s}
	v, err := r.value(0)
	if err != nil {
		return nil, err
	}
	if r.space(); r.i != len(s) {
		return nil, fmt.Errorf("unexpected text after the literal: %.40q", s[r.i:])
	}
	return v, nil
}

// pyCalls reads a pythonic call list, "[f(a=1), g()]" or one bare call,
// each call's keyword arguments typed by its tool's schema.
func pyCalls(s string, sc *scanCtx) ([]*rawCall, error) {
	r := &pyReader{s: s}
	list := r.peek() == '['
	if list {
		r.i++
	}
	var calls []*rawCall
	for {
		if list && r.peek() == ']' {
			break
		}
		c, err := r.call(sc)
		if err != nil {
			return calls, err
		}
		calls = append(calls, c)
		sc.pending++ // labels of later calls; the scanner numbers them
		if r.peek() != ',' {
			break
		}
		r.i++
	}
	if list {
		if err := r.expect(']'); err != nil {
			return nil, err
		}
	}
	if r.space(); r.i != len(s) {
		return nil, fmt.Errorf("unexpected text after the calls: %.40q", s[r.i:])
	}
	if len(calls) == 0 {
		return nil, errors.New("empty call list")
	}
	return calls, nil
}

func (r *pyReader) call(sc *scanCtx) (*rawCall, error) {
	name, err := toolName(r.ident())
	if err != nil {
		return nil, err
	}
	if !isIdentStart(name[0]) {
		return nil, fmt.Errorf("function name %.40q does not start with a letter", name)
	}
	if err := r.expect('('); err != nil {
		return nil, err
	}
	props := propertySchemas(sc.tools, name)
	fields := map[string]*structpb.Value{}
	for r.peek() != ')' {
		k := r.ident()
		if k == "" || r.peek() != '=' {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: errors.New("positional argument: write name=value")}
		}
		if !isIdentStart(k[0]) {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: fmt.Errorf("argument name %.40q does not start with a letter", k)}
		}
		r.i++
		v, err := r.value(0)
		if err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: fmt.Errorf("argument %q: %w", k, err)}
		}
		if _, dup := fields[k]; dup {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: fmt.Errorf("argument %q repeated", k)}
		}
		schema, _ := props[k].(map[string]any)
		if fields[k], err = fitLiteral(v, schema); err != nil {
			return nil, &llm.ArgumentsError{Call: sc.callName(name), Err: fmt.Errorf("argument %q: %w", k, err)}
		}
		if r.peek() != ',' {
			break
		}
		r.i++
	}
	if err := r.expect(')'); err != nil {
		return nil, err
	}
	return &rawCall{name: name, args: &structpb.Struct{Fields: fields}}, nil
}

// fitLiteral types a literal by its schema: a string where the schema
// wants another type is read as that type (coerceParameter), a number
// where it wants only a string becomes its text.
func fitLiteral(v *structpb.Value, schema map[string]any) (*structpb.Value, error) {
	types := canon.SchemaTypes(schema)
	if len(types) == 0 {
		return v, nil
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		if !slices.Contains(types, "string") {
			return coerceParameter(k.StringValue, schema)
		}
	case *structpb.Value_NumberValue:
		if slices.Equal(types, []string{"string"}) {
			return structpb.NewStringValue(strconv.FormatFloat(k.NumberValue, 'f', -1, 64)), nil
		}
	}
	return v, nil
}

// renderPyLiteral writes v as a Python literal.
func renderPyLiteral(b *strings.Builder, v *structpb.Value) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		b.WriteByte('\'')
		for _, r := range k.StringValue {
			switch {
			case r == '\'' || r == '\\':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r == '\n':
				b.WriteString(`\n`)
			case r == utf8.RuneError || r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('\'')
	case *structpb.Value_BoolValue:
		b.WriteString(map[bool]string{true: "True", false: "False"}[k.BoolValue])
	case *structpb.Value_NumberValue:
		b.WriteString(strconv.FormatFloat(k.NumberValue, 'g', -1, 64))
	case *structpb.Value_ListValue:
		b.WriteByte('[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				b.WriteString(", ")
			}
			renderPyLiteral(b, e)
		}
		b.WriteByte(']')
	case *structpb.Value_StructValue:
		b.WriteByte('{')
		for i, key := range sortedKeys(k.StructValue) {
			if i > 0 {
				b.WriteString(", ")
			}
			renderPyLiteral(b, structpb.NewStringValue(key))
			b.WriteString(": ")
			renderPyLiteral(b, k.StructValue.GetFields()[key])
		}
		b.WriteByte('}')
	default:
		b.WriteString("None")
	}
}

// sortedKeys is s's field names in order.
func sortedKeys(s *structpb.Struct) []string {
	keys := make([]string, 0, len(s.GetFields()))
	for k := range s.GetFields() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
