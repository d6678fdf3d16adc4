package wire

import (
	"encoding/json"
	"slices"
	"sort"
	"testing"

	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// protoStyleSchema is shaped like the schemas derived from proto contracts:
// enums as strings, int64 as string-or-integer, oneOf, a recursive message
// through $defs/$ref, formats and bounds.
func protoStyleSchema(t testing.TB) map[string]any {
	t.Helper()
	var s map[string]any
	err := json.Unmarshal([]byte(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "description": "Create a task.",
  "properties": {
    "title": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Short title."},
    "priority": {"type": "string", "enum": ["PRIORITY_LOW", "PRIORITY_HIGH"]},
    "estimate_ms": {"type": ["string", "integer"], "format": "int64", "minimum": 0},
    "due": {"type": "string", "format": "date-time"},
    "owner_email": {"type": "string", "format": "email"},
    "ratio": {"type": "number", "exclusiveMaximum": 1, "default": 0.5},
    "kind": {"const": "task"},
    "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 10, "uniqueItems": true},
    "meta": {"type": "object", "additionalProperties": {"type": "string"}},
    "target": {"oneOf": [
      {"type": "object", "properties": {"user": {"type": "string"}}, "required": ["user"]},
      {"type": "object", "properties": {"team": {"type": "string"}}, "required": ["team"]}
    ]},
    "root": {"$ref": "#/$defs/Node"}
  },
  "required": ["title"],
  "additionalProperties": false,
  "$defs": {
    "Node": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}
      },
      "required": ["name"]
    }
  }
}`), &s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// walk calls fn for every subschema.
func walk(v any, fn func(map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		fn(t)
		for k, c := range t {
			switch k {
			case "enum", "const", "required", "default":
			case "properties", "$defs", "definitions":
				// Maps from names to schemas, not schemas themselves.
				for _, sub := range c.(map[string]any) {
					walk(sub, fn)
				}
			default:
				walk(c, fn)
			}
		}
	case []any:
		for _, c := range t {
			walk(c, fn)
		}
	}
}

func marshalIndent(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestOpenAIStrictSchema(t *testing.T) {
	t.Parallel()
	in := protoStyleSchema(t)
	before := string(marshalIndent(t, in))
	out := OpenAIStrictSchema(in)
	golden(t, "schema/openai_strict.json", marshalIndent(t, out))
	if string(marshalIndent(t, in)) != before {
		t.Error("input schema was modified")
	}
	walk(out, func(s map[string]any) {
		for _, k := range []string{"$schema", "oneOf", "default"} {
			if _, ok := s[k]; ok {
				t.Errorf("strict schema keeps %q: %v", k, s)
			}
		}
		if f, ok := s["format"].(string); ok && !openAIFormats[f] {
			t.Errorf("unsupported format %q kept", f)
		}
		props, ok := s["properties"].(map[string]any)
		if !ok {
			return
		}
		if s["additionalProperties"] != false {
			t.Errorf("object without additionalProperties:false: %v", s)
		}
		var names []string
		for n := range props {
			names = append(names, n)
		}
		sort.Strings(names)
		var req []string
		for _, r := range s["required"].([]any) {
			req = append(req, r.(string))
		}
		if !slices.Equal(names, req) {
			t.Errorf("required = %v, want every property %v", req, names)
		}
	})
	props := out["properties"].(map[string]any)
	if got := props["title"].(map[string]any)["type"]; got != "string" {
		t.Errorf("required title became %v", got)
	}
	if got := props["due"].(map[string]any)["type"]; !slices.Equal(canon.ToList(got), []any{"string", "null"}) {
		t.Errorf("optional due type = %v, want [string null]", got)
	}
	if got := props["priority"].(map[string]any)["enum"]; !slices.Contains(canon.ToList(got), nil) {
		t.Errorf("optional enum does not accept null: %v", got)
	}
	if _, ok := props["root"].(map[string]any)["anyOf"]; !ok {
		t.Errorf("optional $ref not wrapped in anyOf with null: %v", props["root"])
	}
}

func TestGeminiSchema(t *testing.T) {
	t.Parallel()
	out := GeminiSchema(protoStyleSchema(t))
	golden(t, "schema/gemini.json", marshalIndent(t, out))
	walk(out, func(s map[string]any) {
		for k := range s {
			if !geminiKeys[k] {
				t.Errorf("keyword %q outside Gemini's subset in %v", k, s)
			}
		}
		if typ, ok := s["type"]; ok {
			if _, isString := typ.(string); !isString {
				t.Errorf("type union kept: %v", typ)
			}
		}
		for _, e := range canon.ToList(s["enum"]) {
			if _, ok := e.(string); !ok {
				t.Errorf("non-string enum value %v", e)
			}
		}
	})
	props := out["properties"].(map[string]any)
	if got := props["kind"].(map[string]any)["enum"]; !slices.Equal(canon.ToList(got), []any{"task"}) {
		t.Errorf("const not turned into enum: %v", got)
	}
	if _, ok := props["estimate_ms"].(map[string]any)["anyOf"]; !ok {
		t.Errorf("string-or-integer union not anyOf: %v", props["estimate_ms"])
	}
	root := props["root"].(map[string]any)
	if root["type"] != "object" || root["properties"] == nil {
		t.Errorf("$ref not inlined: %v", root)
	}
}

func TestGeminiSchemaNullable(t *testing.T) {
	t.Parallel()
	got := GeminiSchema(map[string]any{"type": "object", "properties": map[string]any{
		"a": map[string]any{"type": []any{"string", "null"}},
		"b": map[string]any{"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "null"}}},
	}})
	props := got["properties"].(map[string]any)
	for _, name := range []string{"a", "b"} {
		p := props[name].(map[string]any)
		if p["nullable"] != true || p["type"] == nil {
			t.Errorf("%s = %v, want a single type with nullable", name, p)
		}
	}
}

func TestAnthropicSchema(t *testing.T) {
	t.Parallel()
	loose := AnthropicSchema(protoStyleSchema(t), false)
	if _, ok := loose["$schema"]; ok {
		t.Error("$schema kept")
	}
	if loose["properties"].(map[string]any)["title"].(map[string]any)["maxLength"] == nil {
		t.Error("non-strict transform dropped a constraint")
	}
	strict := AnthropicSchema(protoStyleSchema(t), true)
	golden(t, "schema/anthropic_strict.json", marshalIndent(t, strict))
	walk(strict, func(s map[string]any) {
		if _, ok := s["properties"]; ok && s["additionalProperties"] != false {
			t.Errorf("strict object allows extra properties: %v", s)
		}
		for k := range anthropicStrictDrops {
			if _, ok := s[k]; ok {
				t.Errorf("strict schema keeps %q", k)
			}
		}
	})
	if empty := AnthropicSchema(nil, false); empty["type"] != "object" || empty["properties"] == nil {
		t.Errorf("empty schema = %v, want an object schema", empty)
	}
}
