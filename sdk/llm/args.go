package llm

import (
	"bytes"
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/canon"
)

// DecodeArguments turns the arguments a model sent for call (its name, used
// in errors) into a Struct. Accepted: a JSON object, a JSON string holding a
// JSON object (OpenAI's encoding), an empty JSON string or absent arguments
// (both meaning {}). Anything else fails with an *ArgumentsError naming the
// call, so no call is ever dropped silently. Numbers keep the model's exact
// value (see ExactNumber).
func DecodeArguments(call string, raw []byte) (*structpb.Struct, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, &ArgumentsError{Call: call, Err: err}
		}
		return DecodeArgumentString(call, s)
	}
	return decodeObject(call, raw)
}

// DecodeArgumentString decodes arguments already unwrapped from a JSON
// string: "" means {}, otherwise the text must be a JSON object.
func DecodeArgumentString(call, s string) (*structpb.Struct, error) {
	if len(bytes.TrimSpace([]byte(s))) == 0 {
		return &structpb.Struct{Fields: map[string]*structpb.Value{}}, nil
	}
	return decodeObject(call, []byte(s))
}

func decodeObject(call string, raw []byte) (*structpb.Struct, error) {
	v, err := canon.DecodeJSONValue(raw)
	if err != nil {
		return nil, &ArgumentsError{Call: call, Err: err}
	}
	s := v.GetStructValue()
	if s == nil {
		return nil, &ArgumentsError{Call: call, Err: errors.New("arguments are not a JSON object")}
	}
	return s, nil
}

// ExactNumber turns the text of a JSON number into a Value without losing
// what the model wrote. A Struct holds numbers as float64, which is exact
// for every integer up to 2^53 and for any fraction a tool reads as a
// double; an integer beyond that (a 64-bit id such as 9007199254740993)
// would be rounded, so it is kept as its decimal text, a string Value.
// protojson reads that text into an int64 or uint64 field exactly, and the
// schemas toolfleet derives for 64-bit fields accept it. A number outside
// the float64 range is an error.
func ExactNumber(text string) (*structpb.Value, error) { return canon.ExactNumber(text) }

// CallArguments is the JSON object of c's arguments as a format without
// free-text calls sends it: its arguments with exact numbers, or
// {"input": text} for a free-text call (ToolCall.input).
func CallArguments(c *toolfleetv1.ToolCall) json.RawMessage { return canon.CallArguments(c) }
