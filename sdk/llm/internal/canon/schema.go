package canon

import (
	"regexp"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// SchemaOf returns the input schema of d as a map. A free-text tool (one
// with an input_format) is declared, where a format has no free-text tools,
// as an object with one string property "input" whose description carries
// the grammar: the model sees it, nothing enforces it.
func SchemaOf(d *toolfleetv1.ToolDefinition) map[string]any {
	if f := d.GetInputFormat(); f != nil {
		desc := "Free-form text input."
		if f.GetType() == "grammar" {
			desc = "Text in the language of this " + f.GetSyntax() + " grammar:\n" + f.GetDefinition()
		}
		return map[string]any{
			"type":                 "object",
			"properties":           map[string]any{FreeTextKey: map[string]any{"type": "string", "description": desc}},
			"required":             []any{FreeTextKey},
			"additionalProperties": false,
		}
	}
	return SchemaFromStruct(d.GetInputSchema())
}

// SchemaFromStruct converts a proto Struct schema; nil yields an empty object schema.
func SchemaFromStruct(s *structpb.Struct) map[string]any {
	if s == nil {
		return map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return s.AsMap()
}

func ToList(v any) []any {
	l, _ := v.([]any)
	return l
}

// SchemaTypes lists the JSON types a schema allows (nil when it says nothing).
func SchemaTypes(schema map[string]any) []string {
	var types []string
	switch t := schema["type"].(type) {
	case string:
		types = append(types, t)
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok {
				types = append(types, s)
			}
		}
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		for _, alt := range ToList(schema[key]) {
			if m, ok := alt.(map[string]any); ok {
				types = append(types, SchemaTypes(m)...)
			}
		}
	}
	if len(types) == 0 && schema["enum"] != nil {
		types = append(types, "string")
	}
	return types
}

var (
	// IntegerText and NumberText are JSON's integer and number grammars.
	IntegerText = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)
	NumberText  = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)
)
