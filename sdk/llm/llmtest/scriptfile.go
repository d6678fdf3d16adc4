package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// A script file is a scripted model written as YAML, for testing a toolkit
// in agent runs and code mode without a model key ("scripted:turns.yaml"):
//
//	turns:
//	  - text: Opening the ticket.          # optional text before the calls
//	    calls:
//	      - tool: Tickets.Create           # Toolkit.Tool, Toolkit_Tool or Toolkit.Tool@1.0.0
//	        id: created                    # optional: names the result for placeholders
//	        args: {title: Printer on fire, priority: PRIORITY_HIGH}
//	  - calls:
//	      - tool: Tickets.Get
//	        args: {id: "${created.ticket.id}"}
//	  - text: Ticket ${created.ticket.id} is open (${last.ticket.title}).
//
// Turn n answers the model request that already holds n-1 assistant
// messages, so a retried or replayed turn gets the same reply. A turn with
// calls ends with stop reason tool_calls, one without with end_turn; a
// request past the last turn fails with ErrScriptExhausted.
//
// Placeholders ${ID.path} in text and in argument strings are replaced by
// an earlier call's result (its JSON; path is .field or [index] steps);
// ID "last" is the newest result. An argument that is exactly one
// placeholder takes the value with its JSON type (a number stays a number);
// "$${" writes a literal "${".

// Script file bounds: a bigger or deeper file is refused.
const (
	MaxScriptFileBytes = 1 << 20
	MaxScriptTurns     = 1000
	MaxScriptCalls     = 64
	maxScriptDepth     = 32
	// MaxScriptTurnBytes bounds what placeholders add to one turn (text and
	// arguments), so a script that repeats a large result cannot blow up.
	MaxScriptTurnBytes = 8 << 20
)

// ErrScriptFile matches every error about a script file: unreadable,
// malformed (with its line), or a placeholder an actual run cannot fill.
var ErrScriptFile = errors.New("llm: script file")

// OpenScriptFile reads and parses the script file name inside dir; name is
// a relative path that may not leave dir (an os.Root confines it). An
// empty dir refuses every name.
func OpenScriptFile(dir, name string) (llm.Model, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w %s: script files are off here (no script folder configured, e.g. toolfleet dev --script-dir)", ErrScriptFile, name)
	}
	if !filepath.IsLocal(name) {
		return nil, fmt.Errorf("%w %s: want a path relative to the script folder, without ..", ErrScriptFile, name)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: script folder: %w", ErrScriptFile, err)
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrScriptFile, name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxScriptFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrScriptFile, name, err)
	}
	return ParseScriptFile(name, b)
}

// ScriptFile is a parsed script file; it is a Model.
type ScriptFile struct {
	name  string
	turns []fileTurn
}

type fileTurn struct {
	line  int
	text  string
	calls []fileCall
}

type fileCall struct {
	line int
	tool string
	id   string
	args map[string]any
}

// ParseScriptFile parses a script file's content; name is used in errors
// and as the replies' model name. Errors say the line they are about and
// never quote the file's values.
func ParseScriptFile(name string, data []byte) (*ScriptFile, error) {
	fail := func(line int, format string, a ...any) error {
		where := name
		if line > 0 {
			where += ":" + strconv.Itoa(line)
		}
		return fmt.Errorf("%w %s: %s", ErrScriptFile, where, fmt.Sprintf(format, a...))
	}
	if len(data) > MaxScriptFileBytes {
		return nil, fail(0, "larger than %d bytes", MaxScriptFileBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fail(0, "not YAML: %s", yamlErrorLine(err))
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fail(doc.Line, "want a mapping with turns: [...]")
	}
	top := doc.Content[0]
	var turnsNode *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		switch k := top.Content[i]; k.Value {
		case "turns":
			turnsNode = top.Content[i+1]
		default:
			return nil, fail(k.Line, "unknown key (want turns)")
		}
	}
	if turnsNode == nil || turnsNode.Kind != yaml.SequenceNode || len(turnsNode.Content) == 0 {
		return nil, fail(top.Line, "want turns: a non-empty list of turns")
	}
	if len(turnsNode.Content) > MaxScriptTurns {
		return nil, fail(turnsNode.Line, "more than %d turns", MaxScriptTurns)
	}
	s := &ScriptFile{name: name}
	ids := map[string]int{}
	for n, tn := range turnsNode.Content {
		if tn.Kind != yaml.MappingNode {
			return nil, fail(tn.Line, "turn %d: want a mapping with text and/or calls", n+1)
		}
		t := fileTurn{line: tn.Line}
		for i := 0; i+1 < len(tn.Content); i += 2 {
			k, v := tn.Content[i], tn.Content[i+1]
			switch k.Value {
			case "text":
				if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
					return nil, fail(v.Line, "turn %d: text must be a string", n+1)
				}
				t.text = v.Value
			case "calls":
				if v.Kind != yaml.SequenceNode {
					return nil, fail(v.Line, "turn %d: calls must be a list", n+1)
				}
				if len(v.Content) > MaxScriptCalls {
					return nil, fail(v.Line, "turn %d: more than %d calls", n+1, MaxScriptCalls)
				}
				for j, cn := range v.Content {
					c, err := parseFileCall(cn, n+1, j+1, fail)
					if err != nil {
						return nil, err
					}
					if prev, dup := ids[c.id]; dup {
						return nil, fail(c.line, "turn %d: call id %s is used on line %d already", n+1, c.id, prev)
					}
					ids[c.id] = c.line
					t.calls = append(t.calls, c)
				}
			default:
				return nil, fail(k.Line, "turn %d: unknown key (want text or calls)", n+1)
			}
		}
		if t.text == "" && len(t.calls) == 0 {
			return nil, fail(tn.Line, "turn %d: needs text or calls", n+1)
		}
		s.turns = append(s.turns, t)
	}
	return s, nil
}

var callIDPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

func parseFileCall(cn *yaml.Node, turn, index int, fail func(int, string, ...any) error) (fileCall, error) {
	c := fileCall{line: cn.Line, id: fmt.Sprintf("call_%d_%d", turn, index), args: map[string]any{}}
	if cn.Kind != yaml.MappingNode {
		return c, fail(cn.Line, "turn %d, call %d: want a mapping with tool and args", turn, index)
	}
	for i := 0; i+1 < len(cn.Content); i += 2 {
		k, v := cn.Content[i], cn.Content[i+1]
		switch k.Value {
		case "tool":
			if v.Kind != yaml.ScalarNode || v.Value == "" {
				return c, fail(v.Line, "turn %d, call %d: tool must be a tool name (Toolkit.Tool)", turn, index)
			}
			c.tool = v.Value
		case "id":
			if v.Kind != yaml.ScalarNode || !callIDPattern.MatchString(v.Value) || v.Value == "last" {
				return c, fail(v.Line, "turn %d, call %d: id must be a letter then up to 63 letters, digits, _ or - (and not \"last\")", turn, index)
			}
			c.id = v.Value
		case "args":
			if v.Kind != yaml.MappingNode {
				return c, fail(v.Line, "turn %d, call %d: args must be a mapping (the tool's JSON input)", turn, index)
			}
			a, err := yamlValue(v, 0, fail)
			if err != nil {
				return c, err
			}
			c.args = a.(map[string]any)
		default:
			return c, fail(k.Line, "turn %d, call %d: unknown key (want tool, id or args)", turn, index)
		}
	}
	if c.tool == "" {
		return c, fail(cn.Line, "turn %d, call %d: no tool", turn, index)
	}
	return c, nil
}

// yamlValue converts a node to a JSON value (map[string]any, []any,
// string, float64, bool, nil), refusing aliases, tags outside JSON and
// nesting past maxScriptDepth.
func yamlValue(n *yaml.Node, depth int, fail func(int, string, ...any) error) (any, error) {
	if depth > maxScriptDepth {
		return nil, fail(n.Line, "nested deeper than %d", maxScriptDepth)
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, fail(k.Line, "a key must be a string")
			}
			if _, dup := m[k.Value]; dup {
				return nil, fail(k.Line, "key %q appears twice", k.Value)
			}
			v, err := yamlValue(n.Content[i+1], depth+1, fail)
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		l := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlValue(c, depth+1, fail)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return n.Value, nil
		case "!!null":
			return nil, nil
		case "!!bool":
			return n.Value == "true" || n.Value == "True" || n.Value == "TRUE", nil
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, fail(n.Line, "not a number")
			}
			return f, nil
		default:
			return nil, fail(n.Line, "value of type %s is not JSON (quote it to send a string)", n.Tag)
		}
	case yaml.AliasNode:
		return nil, fail(n.Line, "aliases (*name) are not supported")
	}
	return nil, fail(n.Line, "not a JSON value")
}

// yamlErrorLine keeps what a YAML syntax error says about where it is,
// e.g. "line 3: did not find expected key".
func yamlErrorLine(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

// Turns is the number of turns in the script.
func (s *ScriptFile) Turns() int { return len(s.turns) }

// pick is the turn that answers req: the one after the assistant messages
// it already holds.
func (s *ScriptFile) pick(req *llm.Request) (*Scripted, error) {
	n := 0
	for _, m := range req.Messages {
		if m.GetRole() == toolfleetv1.Role_ROLE_ASSISTANT {
			n++
		}
	}
	if n >= len(s.turns) {
		return nil, fmt.Errorf("%w: %s has %d turns and the run asks for turn %d", llm.ErrScriptExhausted, s.name, len(s.turns), n+1)
	}
	t := s.turns[n]
	return NewScripted(ScriptTurn{Render: func(req *llm.Request) (*toolfleetv1.Message, error) { return s.render(req, n+1, t) }}), nil
}

// Complete implements Model.
func (s *ScriptFile) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	sc, err := s.pick(req)
	if err != nil {
		return nil, err
	}
	return sc.Complete(ctx, req)
}

// Stream implements Model.
func (s *ScriptFile) Stream(ctx context.Context, req *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	sc, err := s.pick(req)
	if err != nil {
		return nil, err
	}
	return sc.Stream(ctx, req, onDelta)
}

// render builds turn n's reply against the results in req.
func (s *ScriptFile) render(req *llm.Request, n int, t fileTurn) (*toolfleetv1.Message, error) {
	res := scriptResults(req)
	fail := func(line int, format string, a ...any) error {
		return fmt.Errorf("%w %s:%d: turn %d: %s", ErrScriptFile, s.name, line, n, fmt.Sprintf(format, a...))
	}
	text, err := res.expand(t.text, false)
	if err != nil {
		return nil, fail(t.line, "%v", err)
	}
	if len(t.calls) == 0 {
		turn := SayText(text.(string))
		turn.Reply.Model = "scripted:" + s.name
		return turn.Reply, nil
	}
	names, err := llm.NewNames(req.Tools)
	if err != nil {
		return nil, fail(t.line, "%v", err)
	}
	var parts []*toolfleetv1.Part
	for _, c := range t.calls {
		tool, _, _ := strings.Cut(c.tool, "@")
		def, err := names.Lookup(tool)
		if err != nil {
			return nil, fail(c.line, "tool %s is not offered to this run (offered: %s)", c.tool, offeredNames(req))
		}
		args, err := res.expandValue(c.args)
		if err != nil {
			return nil, fail(c.line, "%v", err)
		}
		st, err := structpb.NewStruct(args.(map[string]any))
		if err != nil {
			return nil, fail(c.line, "args: %v", err)
		}
		parts = append(parts, &toolfleetv1.Part{Kind: &toolfleetv1.Part_ToolCall{ToolCall: &toolfleetv1.ToolCall{
			Id: c.id, Name: def.GetModelName(), Arguments: st}}})
	}
	turn := CallTools(text.(string), parts...)
	turn.Reply.Model = "scripted:" + s.name
	return turn.Reply, nil
}

func offeredNames(req *llm.Request) string {
	var names []string
	for _, d := range req.Tools {
		names = append(names, d.GetModelName())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// results are the tool results a request holds, by call id, plus the newest.
type results struct {
	byID map[string]*toolfleetv1.ToolResult
	last *toolfleetv1.ToolResult
	// spent counts the bytes placeholders added to the turn so far.
	spent *int
}

func scriptResults(req *llm.Request) results {
	r := results{byID: map[string]*toolfleetv1.ToolResult{}, spent: new(int)}
	for _, m := range req.Messages {
		for _, p := range m.GetParts() {
			if tr := p.GetToolResult(); tr != nil {
				r.byID[tr.GetCallId()] = tr
				r.last = tr
			}
		}
	}
	return r
}

var placeholder = regexp.MustCompile(`\$\$\{|\$\{([^}]*)\}`)

// expandValue expands placeholders in every string of v.
func (r results) expandValue(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			ev, err := r.expandValue(e)
			if err != nil {
				return nil, err
			}
			out[k] = ev
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			ev, err := r.expandValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = ev
		}
		return out, nil
	case string:
		return r.expand(x, true)
	}
	return v, nil
}

// expand replaces placeholders in s. With typed, a string that is exactly
// one placeholder becomes the value itself.
func (r results) expand(s string, typed bool) (any, error) {
	if typed {
		if m := placeholder.FindStringSubmatchIndex(s); m != nil && m[0] == 0 && m[1] == len(s) && m[2] >= 0 {
			return r.lookup(s[m[2]:m[3]])
		}
	}
	var firstErr error
	out := placeholder.ReplaceAllStringFunc(s, func(p string) string {
		if p == "$${" {
			return "${"
		}
		v, err := r.lookup(p[2 : len(p)-1])
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return ""
		}
		if str, ok := v.(string); ok {
			return str
		}
		b, _ := json.Marshal(v)
		return string(b)
	})
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

var refStep = regexp.MustCompile(`^(?:\.([A-Za-z0-9_-]+)|\[([0-9]+)\])`)

// lookup resolves "ID.path" against the results.
func (r results) lookup(ref string) (any, error) {
	ref = strings.TrimSpace(ref)
	end := strings.IndexAny(ref, ".[")
	if end < 0 {
		end = len(ref)
	}
	id, path := ref[:end], ref[end:]
	tr := r.byID[id]
	if id == "last" {
		tr = r.last
	}
	if tr == nil {
		return nil, fmt.Errorf("${%s}: no result of call %q yet", ref, id)
	}
	var v any
	if sv := tr.GetStructured(); sv != nil {
		v = sv.AsInterface()
	} else if err := json.Unmarshal([]byte(tr.GetContent()), &v); err != nil {
		v = tr.GetContent()
	}
	for path != "" {
		m := refStep.FindStringSubmatch(path)
		if m == nil {
			return nil, fmt.Errorf("${%s}: want .field or [index] steps after the call id", ref)
		}
		path = path[len(m[0]):]
		switch {
		case m[1] != "":
			obj, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("${%s}: .%s of a value that is not an object", ref, m[1])
			}
			if v, ok = obj[m[1]]; !ok {
				return nil, fmt.Errorf("${%s}: the result has no field %s", ref, m[1])
			}
		default:
			i, _ := strconv.Atoi(m[2])
			l, ok := v.([]any)
			if !ok || i >= len(l) {
				return nil, fmt.Errorf("${%s}: [%d] is not an element of the result", ref, i)
			}
			v = l[i]
		}
	}
	size := 0
	if str, ok := v.(string); ok {
		size = len(str)
	} else if b, err := json.Marshal(v); err == nil {
		size = len(b)
	}
	if *r.spent += size; *r.spent > MaxScriptTurnBytes {
		return nil, fmt.Errorf("${%s}: placeholders add more than %d bytes to this turn", ref, MaxScriptTurnBytes)
	}
	return v, nil
}
