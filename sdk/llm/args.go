package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
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
	v, err := decodeJSONValue(raw)
	if err != nil {
		return nil, &ArgumentsError{Call: call, Err: err}
	}
	s := v.GetStructValue()
	if s == nil {
		return nil, &ArgumentsError{Call: call, Err: errors.New("arguments are not a JSON object")}
	}
	return s, nil
}

// decodeJSONValue decodes exactly one JSON value, numbers kept exact.
func decodeJSONValue(raw []byte) (*structpb.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(raw[dec.InputOffset():])) > 0 {
		return nil, errors.New("trailing data after the JSON value")
	}
	return jsonValue(v)
}

// jsonValue converts a value decoded with UseNumber into a structpb.Value.
func jsonValue(v any) (*structpb.Value, error) {
	switch t := v.(type) {
	case nil:
		return structpb.NewNullValue(), nil
	case bool:
		return structpb.NewBoolValue(t), nil
	case string:
		return structpb.NewStringValue(t), nil
	case json.Number:
		return ExactNumber(t.String())
	case []any:
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(t))}
		for i, e := range t {
			ev, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			l.Values[i] = ev
		}
		return structpb.NewListValue(l), nil
	case map[string]any:
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(t))}
		for k, e := range t {
			ev, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			s.Fields[k] = ev
		}
		return structpb.NewStructValue(s), nil
	}
	return nil, fmt.Errorf("unexpected JSON value %T", v)
}

// ExactNumber turns the text of a JSON number into a Value without losing
// what the model wrote. A Struct holds numbers as float64, which is exact
// for every integer up to 2^53 and for any fraction a tool reads as a
// double; an integer beyond that (a 64-bit id such as 9007199254740993)
// would be rounded, so it is kept as its decimal text, a string Value.
// protojson reads that text into an int64 or uint64 field exactly, and the
// schemas toolfleet derives for 64-bit fields accept it. A number outside
// the float64 range is an error.
func ExactNumber(text string) (*structpb.Value, error) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return nil, fmt.Errorf("number %.40s: %w", text, err)
	}
	if strings.ContainsAny(text, ".eE") {
		return structpb.NewNumberValue(f), nil
	}
	// An integer literal: ParseFloat bounded it to ~309 digits, so the exact
	// comparison below is cheap.
	exact, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return nil, fmt.Errorf("number %.40s: not an integer", text)
	}
	rounded, _ := big.NewFloat(f).Int(nil)
	if exact.Cmp(rounded) != 0 {
		return structpb.NewStringValue(exact.String()), nil
	}
	return structpb.NewNumberValue(f), nil
}

// encodeArguments renders call arguments as compact JSON ("{}" for none).
func encodeArguments(s *structpb.Struct) json.RawMessage {
	if s == nil {
		return json.RawMessage("{}")
	}
	b, err := json.Marshal(exactFloats(s.AsMap()))
	if err != nil {
		// A Struct always holds JSON values.
		panic(fmt.Sprintf("llm: encode arguments: %v", err))
	}
	return b
}

// exactFloats replaces each float beyond 2^53 whose shortest decimal form
// would read back as a different integer (json.Marshal writes
// 1000000000000000128 as 1000000000000000100, which ExactNumber then keeps as
// a string) by its exponent form, which reads back as the same number.
func exactFloats(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = exactFloats(e)
		}
	case []any:
		for i, e := range t {
			t[i] = exactFloats(e)
		}
	case float64:
		if math.Abs(t) < 1<<53 || math.IsInf(t, 0) || math.IsNaN(t) {
			return t
		}
		if n, err := ExactNumber(strconv.FormatFloat(t, 'f', -1, 64)); err == nil && n.GetNumberValue() == t {
			return t
		}
		return json.Number(strconv.FormatFloat(t, 'e', -1, 64))
	}
	return v
}
