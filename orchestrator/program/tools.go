package program

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/orchestrator/toolcall"
)

// boundTool is an allowed tool with its compiled input schema.
type boundTool struct {
	Tool
	schema *jsonschema.Schema
	// params are the input's top-level parameter names (the schema's
	// properties: protobuf JSON names, e.g. documentJson).
	params map[string]bool
}

// bindTools compiles the tools' input schemas (pure, so it may run in the
// workflow) and checks that their stub names are distinct.
func bindTools(tools []Tool) ([]*boundTool, error) {
	out := make([]*boundTool, 0, len(tools))
	seen := map[string]string{}
	for _, t := range tools {
		if prev, ok := seen[t.ModelName]; ok {
			return nil, fmt.Errorf("tools %s and %s share the name %s: allow one version", prev, t.ID, t.ModelName)
		}
		seen[t.ModelName] = t.ID
		bt := &boundTool{Tool: t}
		if t.InputSchema != "" {
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(t.InputSchema))
			if err != nil {
				return nil, fmt.Errorf("tool %s: input schema: %w", t.ID, err)
			}
			c := jsonschema.NewCompiler()
			url := "mem://" + t.ID + ".json"
			if err := c.AddResource(url, doc); err != nil {
				return nil, fmt.Errorf("tool %s: input schema: %w", t.ID, err)
			}
			if bt.schema, err = c.Compile(url); err != nil {
				return nil, fmt.Errorf("tool %s: input schema: %w", t.ID, err)
			}
			var props struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			_ = json.Unmarshal([]byte(t.InputSchema), &props)
			bt.params = make(map[string]bool, len(props.Properties))
			for n := range props.Properties {
				bt.params[n] = true
			}
		}
		out = append(out, bt)
	}
	slices.SortFunc(out, func(a, b *boundTool) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// paramOf is the parameter a keyword argument names when it spells a field by
// its proto name (document_json) instead of the JSON name the schema, the
// stub's doc and the description use (documentJson): the gateway's protojson
// takes both, so a stub does too. It returns "" when name is a parameter
// itself or names none.
func (t *boundTool) paramOf(name string) string {
	if t.params[name] || !strings.Contains(name, "_") {
		return ""
	}
	if j := jsonName(name); t.params[j] {
		return j
	}
	return ""
}

// jsonName is protobuf's JSON name of a field name (protoc's rule: drop each
// underscore and upper-case the letter after it).
func jsonName(name string) string {
	var b strings.Builder
	up := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_':
			up = true
		case up && 'a' <= c && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
			up = false
		default:
			b.WriteByte(c)
			up = false
		}
	}
	return b.String()
}

// validate checks an input against the tool's schema and returns the field
// errors (field path → message), or nil when the input fits.
func (t *boundTool) validate(input []byte) map[string]string {
	if t.schema == nil {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return map[string]string{"": err.Error()}
	}
	err = t.schema.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return map[string]string{"": err.Error()}
	}
	fields := toolcall.SchemaFieldErrors(ve)
	if len(fields) == 0 {
		fields[""] = ve.Error()
	}
	return fields
}

// Signature renders the stub's call shape for a model, e.g.
// "Calculator_Add(a: number, b: number)"; required parameters come first.
func (t *Tool) Signature() string {
	var schema struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	_ = json.Unmarshal([]byte(t.InputSchema), &schema)
	names := paramOrder(maps.Keys(schema.Properties), schema.Required)
	params := make([]string, len(names))
	for i, n := range names {
		typ := "any"
		switch ty := schema.Properties[n].Type.(type) {
		case string:
			typ = ty
		case []any:
			parts := make([]string, 0, len(ty))
			for _, p := range ty {
				parts = append(parts, fmt.Sprint(p))
			}
			typ = strings.Join(parts, "|")
		}
		opt := ""
		if !slices.Contains(schema.Required, n) {
			opt = "?"
		}
		params[i] = n + opt + ": " + typ
	}
	return t.ModelName + "(" + strings.Join(params, ", ") + ")"
}

// Doc renders the stub for a model: the signature with each parameter's
// constraints (enum values, bounds, lengths, patterns, formats; required
// parameters first and without "?"), then the description, e.g.
//
//	Tickets_Create(priority: "low"|"high", title: string 1..200 chars, body?: string ≤4000 chars)
func (t *Tool) Doc() string {
	s := t.docSignature()
	if t.Description != "" {
		s += "\n    " + strings.ReplaceAll(strings.TrimSpace(t.Description), "\n", "\n    ")
	}
	return s
}

// PromptSection renders the allowed tools' stubs for a model that writes
// programs (code mode): how to call them, what a call returns, and each
// stub's signature and description.
func PromptSection(tools []Tool) string {
	var b strings.Builder
	b.WriteString(`You can run a Starlark program that calls tools. Call a tool with its stub (keyword arguments only) or call("Toolkit.Tool", **kwargs).
A call returns r with r.ok, r.value (the result) and r.error (message, can_retry, kind, fields); failures do not raise.
parallel([lambda: ..., ...]) runs calls concurrently and returns their results in order. json.encode/json.decode, print() and fail(msg) are available; args holds the inputs.
Set a top-level variable result to the value to return; only result comes back to you.

Tools:
`)
	for _, t := range tools {
		b.WriteString(t.Doc())
		b.WriteString("\n")
	}
	return b.String()
}

// PromptFor renders the code-mode prompt section of an agent run
// (agent.Activities.ProgramPrompt): the stubs of the run's tools, in the
// order a program binds them, refusing tools a program could not tell apart.
func PromptFor(defs []*toolfleetv1.ToolDefinition) (string, error) {
	tools := make([]Tool, 0, len(defs))
	for _, d := range defs {
		t, err := ToolOf(d)
		if err != nil {
			return "", err
		}
		tools = append(tools, t)
	}
	if _, err := bindTools(tools); err != nil {
		return "", err
	}
	slices.SortFunc(tools, func(a, b Tool) int { return strings.Compare(a.ID, b.ID) })
	return PromptSection(tools), nil
}

// resultObject is what call() returns: r.ok, r.value, r.error, r.call_id.
func resultObject(res CallResult, callID string, maxDigits int) (starlark.Value, error) {
	value := starlark.Value(starlark.None)
	if res.ValueJSON != "" {
		v, err := fromJSON(res.ValueJSON, maxDigits)
		if err != nil {
			return nil, fmt.Errorf("tool result: %w", err)
		}
		value = v
	}
	errv := starlark.Value(starlark.None)
	if e := res.Error; e != nil {
		keys := make([]string, 0, len(e.Fields))
		for k := range e.Fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fields := starlark.NewDict(len(keys))
		for _, k := range keys {
			_ = fields.SetKey(starlark.String(k), starlark.String(e.Fields[k]))
		}
		errv = starlarkstruct.FromStringDict(starlark.String("error"), starlark.StringDict{
			"kind":      starlark.String(string(e.Kind)),
			"message":   starlark.String(e.Message),
			"can_retry": starlark.Bool(e.CanRetry),
			"fields":    fields,
		})
	}
	return starlarkstruct.FromStringDict(starlark.String("result"), starlark.StringDict{
		"ok":      starlark.Bool(res.Error == nil),
		"value":   value,
		"error":   errv,
		"call_id": starlark.String(callID),
	}), nil
}

// docSignature is Signature with each parameter's constraints.
func (t *Tool) docSignature() string {
	var schema struct {
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	if json.Unmarshal([]byte(t.InputSchema), &schema) != nil {
		return t.Signature()
	}
	names := paramOrder(maps.Keys(schema.Properties), schema.Required)
	params := make([]string, len(names))
	for i, n := range names {
		opt := ""
		if !slices.Contains(schema.Required, n) {
			opt = "?"
		}
		params[i] = n + opt + ": " + paramDoc(schema.Properties[n])
	}
	return t.ModelName + "(" + strings.Join(params, ", ") + ")"
}

// durationPattern is the pattern sdk/schema gives a google.protobuf.Duration.
const durationPattern = `^-?[0-9]+(\.[0-9]{1,9})?s$`

// paramDoc renders one parameter's schema compactly: its enum values, or its
// type with the bounds that say more than the type does.
func paramDoc(p map[string]any) string {
	if vals, ok := p["enum"].([]any); ok && len(vals) > 0 {
		parts := make([]string, 0, len(vals))
		for _, v := range vals {
			b, _ := json.Marshal(v)
			parts = append(parts, string(b))
		}
		return strings.Join(parts, "|")
	}
	if c, ok := p["const"]; ok {
		b, _ := json.Marshal(c)
		return string(b)
	}
	typ := "any"
	switch ty := p["type"].(type) {
	case string:
		typ = ty
	case []any:
		var parts []string
		for _, x := range ty {
			if x == "string" && slices.Contains(ty, any("integer")) {
				continue // a 64-bit integer, also accepted as a digit string
			}
			parts = append(parts, fmt.Sprint(x))
		}
		typ = strings.Join(parts, "|")
	}
	var notes []string
	switch typ {
	case "array":
		if items, ok := p["items"].(map[string]any); ok {
			typ = "list of " + paramDoc(items)
		}
		notes = appendRange(notes, p["minItems"], p["maxItems"], "items")
	case "string":
		if p["pattern"] == durationPattern {
			return `duration such as "1.5s"`
		}
		notes = appendRange(notes, p["minLength"], p["maxLength"], "chars")
		if f, ok := p["format"].(string); ok && f != "int64" && f != "uint64" {
			notes = append(notes, f)
		}
		if pat, ok := p["pattern"].(string); ok {
			notes = append(notes, "matching "+pat)
		}
	case "integer", "number", "integer|null", "number|null":
		lo, hi := p["minimum"], p["maximum"]
		// sdk/schema states the range of 32-bit and unsigned types on every
		// such field; only tighter bounds say something.
		unsigned := hi == float64(math.MaxUint32) || p["format"] == "uint64" || p["pattern"] == "^[0-9]+$" // a uint64's digits
		if lo == float64(math.MinInt32) || lo == float64(0) && unsigned {
			lo = nil
		}
		if hi == float64(math.MaxInt32) || hi == float64(math.MaxUint32) {
			hi = nil
		}
		notes = appendRange(notes, lo, hi, "")
		if x, ok := p["exclusiveMinimum"]; ok {
			notes = append(notes, fmt.Sprintf(">%v", x))
		}
		if x, ok := p["exclusiveMaximum"]; ok {
			notes = append(notes, fmt.Sprintf("<%v", x))
		}
	}
	if not, ok := p["not"].(map[string]any); ok {
		if vals, ok := not["enum"].([]any); ok {
			for _, v := range vals {
				b, _ := json.Marshal(v)
				notes = append(notes, "not "+string(b))
			}
		}
	}
	if len(notes) == 0 {
		return typ
	}
	return typ + " " + strings.Join(notes, " ")
}

// appendRange adds "lo..hi unit", "≥lo unit" or "≤hi unit".
func appendRange(notes []string, lo, hi any, unit string) []string {
	var r string
	switch {
	case lo != nil && hi != nil:
		r = fmt.Sprintf("%v..%v", lo, hi)
	case lo != nil:
		r = fmt.Sprintf("≥%v", lo)
	case hi != nil:
		r = fmt.Sprintf("≤%v", hi)
	default:
		return notes
	}
	if unit != "" {
		r += " " + unit
	}
	return append(notes, r)
}

// paramOrder lists a stub's parameters as its signature shows them: required
// ones first, each group by name.
func paramOrder(names iter.Seq[string], required []string) []string {
	return slices.SortedFunc(names, func(a, b string) int {
		ra, rb := slices.Contains(required, a), slices.Contains(required, b)
		if ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
}
