package llm

import (
	"slices"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// OneCallPerTurn reports whether r asks for at most one tool call per turn
// (ParallelToolCalls set to false).
func (r *Request) OneCallPerTurn() bool {
	return r != nil && r.ParallelToolCalls != nil && !*r.ParallelToolCalls
}

// KeepFirstCall enforces a request that allows one tool call per turn on a
// finished assistant message: only its first call is kept. Providers treat
// parallel_tool_calls=false as a hint at best (Gemini and Bedrock have no
// such flag, OpenAI-compatible servers may ignore it, a text-protocol model
// may write several blocks), so every Model in this package and its
// sub-packages applies it to Complete and Stream. msg is trimmed in place
// and returned; it is unchanged when req allows parallel calls.
func KeepFirstCall(req *Request, msg *toolfleetv1.Message) *toolfleetv1.Message {
	if !req.OneCallPerTurn() || len(ToolCalls(msg)) < 2 {
		return msg
	}
	parts := msg.Parts[:0]
	calls := 0
	for _, p := range msg.GetParts() {
		if p.GetToolCall() != nil {
			calls++
			if calls > 1 {
				continue
			}
		}
		parts = append(parts, p)
	}
	clear(msg.Parts[len(parts):])
	msg.Parts = parts
	return msg
}

// FirstCallDeltas wraps onDelta (may be nil) for a request that allows one
// tool call per turn: the fragments of a second and later call never reach
// it, while text, usage and the stop reason still do, so the stream is read
// to its end and the turn's usage is complete. Pair it with KeepFirstCall
// on the assembled message. For other requests onDelta is returned as is.
func FirstCallDeltas(req *Request, onDelta func(Delta) error) func(Delta) error {
	if !req.OneCallPerTurn() || onDelta == nil {
		return onDelta
	}
	// The shadow assembler tells which call a fragment belongs to with the
	// same rules that assemble the message; it never holds arguments.
	var shadow Assembler
	return func(d Delta) error {
		if tc := d.ToolCall; tc != nil {
			id := *tc
			id.Arguments, id.Signature = "", nil
			if shadow.callOrdinal(&id) > 1 {
				d.ToolCall = nil
				if d.Empty() {
					return nil
				}
			}
		}
		return onDelta(d)
	}
}

// FinishTurn applies what every Model guarantees to a finished assistant
// turn for req: KeepFirstCall, then FitNumbers with req's tools.
func FinishTurn(req *Request, msg *toolfleetv1.Message) *toolfleetv1.Message {
	if req == nil {
		return msg
	}
	return FitNumbers(KeepFirstCall(req, msg), req.Tools)
}

// FitNumbers gives a "number" field its number back: an integer too big
// for float64 is kept as its decimal text (see ExactNumber) so that 64-bit
// integer fields receive it exactly, but where the tool's input schema
// wants only a number (a double, which cannot hold it exactly anyway), a
// string would be refused by validation. Such values, and numeric text in
// a number-only field, become numbers. Fields the schema does not describe
// are left alone. msg is changed in place and returned.
func FitNumbers(msg *toolfleetv1.Message, tools []*toolfleetv1.ToolDefinition) *toolfleetv1.Message {
	calls := ToolCalls(msg)
	if len(calls) == 0 || len(tools) == 0 {
		return msg
	}
	byName := make(map[string]*toolfleetv1.ToolDefinition, len(tools))
	for _, d := range tools {
		byName[d.GetModelName()] = d
	}
	for _, c := range calls {
		if d := byName[c.GetName()]; d != nil && c.GetArguments() != nil {
			fitStruct(c.GetArguments(), canon.SchemaOf(d), 0)
		}
	}
	return msg
}

// maxFitDepth bounds the walk over nested schemas and values.
const maxFitDepth = 32

func fitStruct(s *structpb.Struct, schema map[string]any, depth int) {
	props, _ := schema["properties"].(map[string]any)
	for name, v := range s.GetFields() {
		if ps, ok := props[name].(map[string]any); ok {
			s.Fields[name] = fitValue(v, ps, depth+1)
		}
	}
}

func fitValue(v *structpb.Value, schema map[string]any, depth int) *structpb.Value {
	if depth > maxFitDepth {
		return v
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		types := canon.SchemaTypes(schema)
		if slices.Contains(types, "number") && !slices.Contains(types, "string") && canon.NumberText.MatchString(k.StringValue) {
			if f, err := strconv.ParseFloat(k.StringValue, 64); err == nil {
				return structpb.NewNumberValue(f)
			}
		}
	case *structpb.Value_StructValue:
		fitStruct(k.StructValue, schema, depth)
	case *structpb.Value_ListValue:
		if items, ok := schema["items"].(map[string]any); ok {
			for i, e := range k.ListValue.GetValues() {
				k.ListValue.Values[i] = fitValue(e, items, depth+1)
			}
		}
	}
	return v
}
