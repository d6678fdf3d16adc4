package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// Schemas are plain map[string]any JSON Schemas (2020-12) in this package;
// these helpers convert at the proto edges.

// SchemaFromStruct converts a proto Struct schema; nil yields an empty object schema.
func SchemaFromStruct(s *structpb.Struct) map[string]any { return canon.SchemaFromStruct(s) }

// SchemaToStruct converts a schema to a proto Struct.
func SchemaToStruct(schema map[string]any) (*structpb.Struct, error) {
	if schema == nil {
		return nil, nil
	}
	s, err := structpb.NewStruct(normalizeJSON(schema).(map[string]any))
	if err != nil {
		return nil, fmt.Errorf("%w: schema: %v", llm.ErrMalformed, err)
	}
	return s, nil
}

// normalizeJSON round-trips v through encoding/json so that typed slices and
// maps (e.g. []string) become []any and map[string]any, the only shapes the
// transforms and structpb understand.
func normalizeJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return v
	}
	return out
}

// OpenAIStrictSchema returns the schema OpenAI's strict mode accepts: every
// object lists all its properties in required, properties that were optional
// accept null instead (type unions or anyOf with {"type":"null"}),
// additionalProperties is false, oneOf becomes anyOf, and keywords strict
// mode rejects ($schema, $id, default, unsupported formats) are dropped. The
// transform recurses into properties, items, $defs and combinators; $ref is
// kept (strict mode resolves local refs, which keeps recursion possible). The
// input is not modified.
func OpenAIStrictSchema(schema map[string]any) map[string]any {
	out, _ := openAIStrict(normalizeJSON(schema)).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	if _, ok := out["type"]; !ok {
		out["type"] = "object"
	}
	if _, ok := out["properties"]; !ok && out["type"] == "object" {
		out = openAIStrict(out).(map[string]any)
	}
	return out
}

// openAIFormats are the string formats strict mode supports.
var openAIFormats = map[string]bool{
	"date-time": true, "time": true, "date": true, "duration": true, "email": true,
	"hostname": true, "ipv4": true, "ipv6": true, "uuid": true,
}

func openAIStrict(v any) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, val := range s {
		switch k {
		case "$schema", "$id", "default", "examples", "$comment":
			continue
		case "format":
			if f, _ := val.(string); !openAIFormats[f] {
				continue
			}
		case "oneOf":
			k = "anyOf"
		}
		out[k] = val
	}
	for _, key := range []string{"$defs", "definitions"} {
		if defs, ok := out[key].(map[string]any); ok {
			nd := map[string]any{}
			for name, d := range defs {
				nd[name] = openAIStrict(d)
			}
			out[key] = nd
		}
	}
	for _, key := range []string{"items", "not"} {
		if it, ok := out[key]; ok {
			out[key] = openAIStrict(it)
		}
	}
	for _, key := range []string{"anyOf", "allOf", "prefixItems"} {
		if list, ok := out[key].([]any); ok {
			nl := make([]any, len(list))
			for i, it := range list {
				nl[i] = openAIStrict(it)
			}
			out[key] = nl
		}
	}
	props, hasProps := out["properties"].(map[string]any)
	if hasProps || hasType(out, "object") {
		required := map[string]bool{}
		if list, ok := out["required"].([]any); ok {
			for _, r := range list {
				if name, ok := r.(string); ok {
					required[name] = true
				}
			}
		}
		np := map[string]any{}
		names := make([]string, 0, len(props))
		for name, p := range props {
			names = append(names, name)
			ps := openAIStrict(p)
			if !required[name] {
				ps = nullable(ps)
			}
			np[name] = ps
		}
		sort.Strings(names)
		req := make([]any, len(names))
		for i, n := range names {
			req[i] = n
		}
		out["properties"] = np
		out["required"] = req
		out["additionalProperties"] = false
	}
	return out
}

// hasType reports whether the schema's type is t or a union containing t.
func hasType(s map[string]any, t string) bool {
	switch typ := s["type"].(type) {
	case string:
		return typ == t
	case []any:
		return slices.Contains(typ, any(t))
	}
	return false
}

// nullable lets a schema also accept null, the way strict mode expresses
// "optional".
func nullable(v any) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v
	}
	switch typ := s["type"].(type) {
	case string:
		if typ == "null" {
			return s
		}
		s["type"] = []any{typ, "null"}
		if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, nil) {
			s["enum"] = append(enum, nil)
		}
		return s
	case []any:
		if !slices.Contains(typ, any("null")) {
			s["type"] = append(typ, "null")
		}
		return s
	}
	if list, ok := s["anyOf"].([]any); ok {
		s["anyOf"] = append(list, map[string]any{"type": "null"})
		return s
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

// AnthropicSchema returns an input_schema Anthropic accepts: the root is an
// object schema and $schema/$id are dropped. With strict (Anthropic's strict
// tool use) objects also get additionalProperties: false and the numeric and
// length constraints strict mode does not support are dropped — the server
// still validates them when the call runs.
func AnthropicSchema(schema map[string]any, strict bool) map[string]any {
	out, _ := anthropic(normalizeJSON(schema), strict).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	if _, ok := out["type"]; !ok {
		out["type"] = "object"
	}
	if _, ok := out["properties"]; !ok {
		out["properties"] = map[string]any{}
	}
	return out
}

var anthropicStrictDrops = map[string]bool{
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"multipleOf": true, "minLength": true, "maxLength": true, "minItems": true, "maxItems": true,
	"pattern": true,
}

func anthropic(v any, strict bool) any {
	switch t := v.(type) {
	case []any:
		out := make([]any, len(t))
		for i, it := range t {
			out[i] = anthropic(it, strict)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, val := range t {
			if k == "$schema" || k == "$id" || (strict && anthropicStrictDrops[k]) {
				continue
			}
			switch k {
			case "properties", "$defs", "definitions":
				if m, ok := val.(map[string]any); ok {
					nm := map[string]any{}
					for name, s := range m {
						nm[name] = anthropic(s, strict)
					}
					out[k] = nm
					continue
				}
			case "enum", "const", "required", "examples", "default":
				out[k] = val
				continue
			}
			out[k] = anthropic(val, strict)
		}
		if strict {
			if _, ok := out["properties"]; ok || hasType(out, "object") {
				out["additionalProperties"] = false
			}
		}
		return out
	}
	return v
}

// geminiKeys are the schema keywords of Gemini's OpenAPI subset.
var geminiKeys = map[string]bool{
	"type": true, "format": true, "title": true, "description": true, "nullable": true,
	"enum": true, "items": true, "properties": true, "required": true, "anyOf": true,
	"minItems": true, "maxItems": true, "minLength": true, "maxLength": true, "pattern": true,
	"minimum": true, "maximum": true, "minProperties": true, "maxProperties": true,
	"propertyOrdering": true, "default": true, "example": true,
}

// geminiMaxDepth bounds $ref inlining: Gemini's subset has no references,
// so recursive types are cut off below this depth as a described object.
const geminiMaxDepth = 8

// GeminiSchema returns a schema in Gemini's OpenAPI subset: local $refs are
// inlined (recursion is cut at a fixed depth), type unions with null become
// nullable and other unions become anyOf, oneOf becomes anyOf, const
// becomes a one-value enum, enum values become strings, and keywords outside
// the subset ($schema, additionalProperties, patternProperties, exclusive
// bounds, unsupported formats, …) are dropped.
func GeminiSchema(schema map[string]any) map[string]any {
	root, _ := normalizeJSON(schema).(map[string]any)
	if root == nil {
		root = map[string]any{}
	}
	defs := map[string]any{}
	for _, key := range []string{"$defs", "definitions"} {
		if m, ok := root[key].(map[string]any); ok {
			for name, d := range m {
				defs["#/"+key+"/"+name] = d
			}
		}
	}
	out, _ := gemini(root, defs, 0).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	if _, ok := out["type"]; !ok && out["anyOf"] == nil {
		out["type"] = "object"
	}
	return out
}

func gemini(v any, defs map[string]any, depth int) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if ref, ok := s["$ref"].(string); ok {
		target, found := defs[ref]
		if !found || depth >= geminiMaxDepth {
			desc, _ := s["description"].(string)
			return map[string]any{"type": "object", "description": strings.TrimSpace(desc + " (nested value; structure omitted)")}
		}
		merged := map[string]any{}
		for k, v := range target.(map[string]any) {
			merged[k] = v
		}
		if d, ok := s["description"]; ok {
			merged["description"] = d
		}
		return gemini(merged, defs, depth+1)
	}
	out := map[string]any{}
	if c, ok := s["const"]; ok {
		out["enum"] = []any{fmt.Sprint(c)}
		out["type"] = "string"
	}
	if one, ok := s["oneOf"].([]any); ok {
		s = maps(s)
		s["anyOf"] = append(canon.ToList(s["anyOf"]), one...)
	}
	for k, val := range s {
		if !geminiKeys[k] {
			continue
		}
		switch k {
		case "type":
			if list, ok := val.([]any); ok {
				var types []any
				for _, t := range list {
					if t == "null" {
						out["nullable"] = true
					} else {
						types = append(types, t)
					}
				}
				switch len(types) {
				case 0:
					out["type"] = "string"
				case 1:
					out["type"] = types[0]
				default:
					var alts []any
					for _, t := range types {
						alts = append(alts, map[string]any{"type": t})
					}
					out["anyOf"] = alts
				}
				continue
			}
			if val == "null" {
				out["nullable"] = true
				continue
			}
		case "properties":
			m, _ := val.(map[string]any)
			nm := map[string]any{}
			for name, p := range m {
				nm[name] = gemini(p, defs, depth+1)
			}
			val = nm
		case "items":
			val = gemini(val, defs, depth+1)
		case "anyOf":
			var alts []any
			for _, a := range canon.ToList(val) {
				if am, ok := a.(map[string]any); ok && am["type"] == "null" && len(am) == 1 {
					out["nullable"] = true
					continue
				}
				alts = append(alts, gemini(a, defs, depth+1))
			}
			if len(alts) == 1 {
				for k2, v2 := range alts[0].(map[string]any) {
					if _, taken := out[k2]; !taken {
						out[k2] = v2
					}
				}
				continue
			}
			val = alts
		case "enum":
			var vals []any
			for _, e := range canon.ToList(val) {
				if e != nil {
					vals = append(vals, fmt.Sprint(e))
				} else {
					out["nullable"] = true
				}
			}
			val = vals
			out["type"] = "string"
			out["format"] = "enum"
		case "format":
			f, _ := val.(string)
			if !geminiFormat(s["type"], f) {
				continue
			}
		}
		if _, taken := out[k]; taken && (k == "type" || k == "format" || k == "enum") {
			continue
		}
		out[k] = val
	}
	if out["format"] == "enum" && out["enum"] == nil {
		delete(out, "format")
	}
	if _, ok := out["anyOf"]; ok {
		delete(out, "type")
	}
	return out
}

// geminiFormat reports whether Gemini accepts format f for the type.
func geminiFormat(typ any, f string) bool {
	switch typ {
	case "string":
		return f == "date-time" || f == "enum"
	case "integer":
		return f == "int32" || f == "int64"
	case "number":
		return f == "float" || f == "double"
	}
	return false
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
