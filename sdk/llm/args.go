package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
)

// DecodeArguments turns the arguments a model sent for call (its name, used
// in errors) into a Struct. Accepted: a JSON object, a JSON string holding a
// JSON object (OpenAI's encoding), an empty JSON string or absent arguments
// (both meaning {}). Anything else fails with an *ArgumentsError naming the
// call, so no call is ever dropped silently.
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
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&obj); err != nil {
		return nil, &ArgumentsError{Call: call, Err: err}
	}
	if obj == nil {
		return nil, &ArgumentsError{Call: call, Err: errors.New("arguments are not a JSON object")}
	}
	if len(bytes.TrimSpace(raw[dec.InputOffset():])) > 0 {
		return nil, &ArgumentsError{Call: call, Err: errors.New("trailing data after the arguments object")}
	}
	s, err := structpb.NewStruct(obj)
	if err != nil {
		return nil, &ArgumentsError{Call: call, Err: err}
	}
	return s, nil
}

// encodeArguments renders call arguments as compact JSON ("{}" for none).
func encodeArguments(s *structpb.Struct) json.RawMessage {
	if s == nil {
		return json.RawMessage("{}")
	}
	b, err := json.Marshal(s.AsMap())
	if err != nil {
		// A Struct always holds JSON values.
		panic(fmt.Sprintf("llm: encode arguments: %v", err))
	}
	return b
}
