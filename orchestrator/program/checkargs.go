package program

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"go.starlark.net/syntax"

	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// CallSite is one tool call a script makes with the tool named in the
// source — a stub (Calculator_Add(a=1, b=2)) or call("Calculator.Add", …) —
// and what can be known of its arguments without running it.
type CallSite struct {
	// Tool is the stub's name or call()'s literal tool id.
	Tool string `json:"tool"`
	// Position is file:line:col of the call.
	Position string `json:"position"`
	// Args are the keyword arguments' names, in order.
	Args []string `json:"args,omitempty"`
	// Literals are the JSON values of the arguments written as constants
	// (numbers, strings, True/False/None, and lists and dicts of them).
	Literals map[string]any `json:"-"`
	// Open is set when the call passes arguments the source does not name
	// (**kwargs, positional ones): its missing arguments may come from there.
	Open bool `json:"open,omitempty"`
}

// callSite reads a call's arguments; skip is the number of positional
// arguments that are not the tool's (call()'s tool id).
func callSite(tool string, n *syntax.CallExpr, skip int) CallSite {
	start, _ := n.Span()
	site := CallSite{Tool: tool, Position: fmt.Sprintf("%s:%d:%d", start.Filename(), start.Line, start.Col), Literals: map[string]any{}}
	for i, a := range n.Args {
		switch a := a.(type) {
		case *syntax.BinaryExpr:
			id, ok := a.X.(*syntax.Ident)
			if a.Op != syntax.EQ || !ok {
				site.Open = true
				continue
			}
			site.Args = append(site.Args, id.Name)
			if v, ok := literal(a.Y); ok {
				site.Literals[id.Name] = v
			}
		case *syntax.UnaryExpr: // *args, **kwargs
			site.Open = true
		default:
			if i >= skip {
				site.Open = true
			}
		}
	}
	return site
}

// literal is the JSON value of a constant expression.
func literal(e syntax.Expr) (any, bool) {
	switch e := e.(type) {
	case *syntax.Literal:
		switch v := e.Value.(type) {
		case string:
			return v, true
		case int64:
			return v, true
		case *big.Int:
			return json.Number(v.String()), true
		case float64:
			return v, true
		}
	case *syntax.Ident:
		switch e.Name {
		case "True":
			return true, true
		case "False":
			return false, true
		case "None":
			return nil, true
		}
	case *syntax.UnaryExpr:
		if e.Op == syntax.MINUS {
			switch v, ok := literal(e.X); {
			case !ok:
			case isInt(v):
				return json.Number("-" + fmt.Sprint(v)), true
			default:
				if f, isFloat := v.(float64); isFloat {
					return -f, true
				}
			}
		}
	case *syntax.ParenExpr:
		return literal(e.X)
	case *syntax.ListExpr:
		return literalList(e.List)
	case *syntax.TupleExpr:
		return literalList(e.List)
	case *syntax.DictExpr:
		m := make(map[string]any, len(e.List))
		for _, x := range e.List {
			kv, ok := x.(*syntax.DictEntry)
			if !ok {
				return nil, false
			}
			k, ok := literal(kv.Key)
			ks, isString := k.(string)
			if !ok || !isString {
				return nil, false
			}
			v, ok := literal(kv.Value)
			if !ok {
				return nil, false
			}
			m[ks] = v
		}
		return m, true
	}
	return nil, false
}

func isInt(v any) bool {
	switch v.(type) {
	case int64, json.Number:
		return true
	}
	return false
}

func literalList(list []syntax.Expr) (any, bool) {
	out := make([]any, len(list))
	for i, x := range list {
		v, ok := literal(x)
		if !ok {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// CheckCall checks a call site's arguments against t's input schema, as far
// as the source tells them: an argument the tool has no parameter for, a
// required one missing (unless the call passes arguments the source does not
// name) and a constant that breaks the schema. It returns the problems in the
// script's terms, one per line, or none.
func CheckCall(t Tool, site CallSite) []string {
	bound, err := bindTools([]Tool{t})
	if err != nil || bound[0].schema == nil {
		return nil // no schema: the gateway decides at run time
	}
	bt := bound[0]
	var problems []string
	input := map[string]any{}
	known := true
	for _, name := range site.Args {
		param := name
		if p := bt.paramOf(name); p != "" && !slices.Contains(site.Args, p) {
			param = p
		}
		if len(bt.params) > 0 && !bt.params[param] {
			problems = append(problems, fmt.Sprintf("%s has no parameter %q (its parameters: %s)", t.Name, name, strings.Join(slices.Sorted(maps.Keys(bt.params)), ", ")))
			continue
		}
		v, ok := site.Literals[name]
		if !ok {
			known = false
			continue
		}
		input[param] = v
	}
	b, err := json.Marshal(input)
	if err != nil {
		return problems
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
	if err != nil {
		return problems
	}
	var ve *jsonschema.ValidationError
	if err := bt.schema.Validate(doc); !errors.As(err, &ve) {
		return problems
	}
	// Only what the source settles: a missing argument counts when every
	// argument is named, an unknown one was said above.
	complete := known && !site.Open
	for _, leaf := range leaves(ve) {
		switch k := leaf.ErrorKind.(type) {
		case *kind.Required:
			if complete && len(leaf.InstanceLocation) == 0 {
				problems = append(problems, fmt.Sprintf("%s needs %s", t.Name, quoteAll(k.Missing)))
			}
			if len(leaf.InstanceLocation) == 0 {
				continue
			}
		case *kind.AdditionalProperties:
			if len(leaf.InstanceLocation) == 0 {
				continue // said above, by name
			}
		}
		where := "argument " + strings.Join(leaf.InstanceLocation, ".")
		if len(leaf.InstanceLocation) == 0 {
			where = "the arguments"
		}
		problems = append(problems, fmt.Sprintf("%s: %s: %s", t.Name, where, leaf.ErrorKind.LocalizedString(toolcall.SchemaPrinter)))
	}
	return problems
}

// leaves are a validation error's innermost causes.
func leaves(ve *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(ve.Causes) == 0 {
		return []*jsonschema.ValidationError{ve}
	}
	var out []*jsonschema.ValidationError
	for _, c := range ve.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
