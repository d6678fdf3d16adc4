// Package yamlproto reads a protobuf message written as YAML (a run spec, for
// `toolfleet agent run --spec`) and says what is wrong with it in the terms
// of the file its author wrote: the line and column in the YAML, and the
// field, never the position in an intermediate JSON document nor a decoder's
// prefix.
//
// The YAML is turned into JSON while the position of every key and value is
// remembered; protojson (with its field names, both the proto and the JSON
// spelling, and its well-known types) decodes that JSON, and a position in
// its error is mapped back to the YAML node it came from.
package yamlproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Bounds of one document: its size and the nodes it expands to (aliases
// count each time they are used, so a few lines cannot expand to millions).
const (
	MaxBytes = 1 << 20
	MaxNodes = 100_000
)

// ErrSpec matches (errors.Is) every error about the document's content.
var ErrSpec = errors.New("invalid spec")

// specError reads "NAME: line L, column C: what"; it is ErrSpec.
type specError struct{ msg string }

func (e *specError) Error() string        { return e.msg }
func (e *specError) Is(target error) bool { return target == ErrSpec }

// Unmarshal decodes the YAML document b into m. name names the document in
// errors ("run.yaml: line 4, column 3: unknown field \"modle\""). An empty
// document leaves m as it is.
func Unmarshal(name string, b []byte, m proto.Message) error {
	fail := func(line, col int, format string, a ...any) error {
		where := name
		if line > 0 {
			where += fmt.Sprintf(": line %d, column %d", line, col)
		}
		return &specError{where + ": " + fmt.Sprintf(format, a...)}
	}
	if len(b) > MaxBytes {
		return fail(0, 0, "larger than %d bytes", MaxBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return &specError{name + ": not YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil
	}
	e := &encoder{}
	if err := e.node(doc.Content[0], "", 0); err != nil {
		var pe *posError
		if errors.As(err, &pe) {
			return fail(pe.line, pe.col, "%s", pe.msg)
		}
		return fail(0, 0, "%s", err.Error())
	}
	js := e.buf.Bytes()
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, m); err != nil {
		msg := err.Error()
		if m := protoErr.FindStringSubmatch(msg); m != nil {
			col, _ := strconv.Atoi(m[2])
			if mk, ok := e.at(byteOffset(js, col)); ok {
				return fail(mk.node.Line, mk.node.Column, "%s", reword(m[3], mk))
			}
			return fail(0, 0, "%s", m[3])
		}
		// No position: drop protobuf's prefix (its spacing varies on purpose).
		return fail(0, 0, "%s", strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(msg, "proto:"), "\u00a0")))
	}
	return nil
}

// protoErr matches protojson's "proto: (line L:C): what".
var protoErr = regexp.MustCompile(`\(line (\d+):(\d+)\): (.*)$`)

// invalidValue matches protojson's "invalid value for KIND field NAME: TOKEN".
var invalidValue = regexp.MustCompile(`^invalid value for (\S+) field (\S+): (.*)$`)

// reword says protojson's complaint about the node at mk in YAML's terms:
// the field's path, and a list or a mapping as such, not as the
// intermediate JSON's "[" or "{".
func reword(msg string, mk mark) string {
	got := "a value"
	switch mk.node.Kind {
	case yaml.SequenceNode:
		got = "a list"
	case yaml.MappingNode:
		got = "a mapping"
	}
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		if got == "a value" {
			got = m[3]
		}
		return fmt.Sprintf("%s: want %s %s value, not %s", cmpOr(mk.path, m[2]), article(m[1]), m[1], got)
	}
	if strings.HasPrefix(msg, "unexpected token") && mk.path != "" {
		return fmt.Sprintf("%s: %s is not allowed here", mk.path, got)
	}
	if mk.path != "" && !strings.Contains(msg, "field") {
		return mk.path + ": " + msg
	}
	return msg
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// article is "an" before a vowel, else "a".
func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an"
	}
	return "a"
}

// byteOffset is the byte offset of 1-based rune column col in the one-line js.
func byteOffset(js []byte, col int) int {
	off := 0
	for i := 1; i < col && off < len(js); i++ {
		_, n := utf8.DecodeRune(js[off:])
		off += n
	}
	return off
}

// encoder writes JSON on one line and remembers where each node begins.
type encoder struct {
	buf   bytes.Buffer
	marks []mark
	nodes int
}

type mark struct {
	off  int
	node *yaml.Node
	path string // where the node is in the document: "budget.maxTurns", "tools[1]"
}

type posError struct {
	line, col int
	msg       string
}

func (e *posError) Error() string { return e.msg }

func errAt(n *yaml.Node, format string, a ...any) error {
	return &posError{line: n.Line, col: n.Column, msg: fmt.Sprintf(format, a...)}
}

// at is the mark of the node whose JSON begins last at or before off.
func (e *encoder) at(off int) (mark, bool) {
	i, found := slices.BinarySearchFunc(e.marks, off, func(m mark, off int) int { return m.off - off })
	if found {
		// A key and its value never share an offset; a node and its alias target may: the last one wins.
		for i+1 < len(e.marks) && e.marks[i+1].off == off {
			i++
		}
		return e.marks[i], true
	}
	if i == 0 {
		return mark{}, false
	}
	return e.marks[i-1], true
}

func (e *encoder) node(n *yaml.Node, path string, depth int) error {
	if e.nodes++; e.nodes > MaxNodes {
		return errAt(n, "more than %d values (aliases included)", MaxNodes)
	}
	if depth > 100 {
		return errAt(n, "nested more than 100 levels deep")
	}
	if n.Kind == yaml.AliasNode {
		return e.node(n.Alias, path, depth+1)
	}
	e.marks = append(e.marks, mark{off: e.buf.Len(), node: n, path: path})
	switch n.Kind {
	case yaml.MappingNode:
		e.buf.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				return errAt(k, "a key must be a plain name")
			}
			if k.Tag == "!!merge" {
				return errAt(k, "merge keys (<<) are not supported: write the fields out")
			}
			if i > 0 {
				e.buf.WriteByte(',')
			}
			kp := k.Value
			if path != "" {
				kp = path + "." + k.Value
			}
			e.marks = append(e.marks, mark{off: e.buf.Len(), node: k, path: kp})
			kb, _ := json.Marshal(k.Value)
			e.buf.Write(kb)
			e.buf.WriteByte(':')
			if err := e.node(v, kp, depth+1); err != nil {
				return err
			}
		}
		e.buf.WriteByte('}')
	case yaml.SequenceNode:
		e.buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				e.buf.WriteByte(',')
			}
			if err := e.node(c, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		e.buf.WriteByte(']')
	case yaml.ScalarNode:
		return e.scalar(n)
	default:
		return errAt(n, "unexpected YAML node")
	}
	return nil
}

// scalar writes a YAML scalar as the JSON value protojson reads for it.
func (e *encoder) scalar(n *yaml.Node) error {
	var v any
	if err := n.Decode(&v); err != nil {
		return errAt(n, "%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	switch x := v.(type) {
	case time.Time:
		v = n.Value // a timestamp field wants the text as written (RFC 3339)
	case float64:
		switch {
		case math.IsNaN(x):
			v = "NaN"
		case math.IsInf(x, 1):
			v = "Infinity"
		case math.IsInf(x, -1):
			v = "-Infinity"
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return errAt(n, "a value JSON cannot hold")
	}
	e.buf.Write(b)
	return nil
}
