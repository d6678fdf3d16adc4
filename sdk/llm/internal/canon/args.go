package canon

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

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// DecodeJSONValue decodes exactly one JSON value, numbers kept exact.
func DecodeJSONValue(raw []byte) (*structpb.Value, error) {
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

// ExactNumber is llm.ExactNumber: an exact JSON number, or its decimal
// text where float64 would round it.
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

// EncodeArguments renders call arguments as compact JSON ("{}" for none).
func EncodeArguments(s *structpb.Struct) json.RawMessage {
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

// RawJSON marshals v; all values rendered here are JSON-safe by construction.
func RawJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("llm: marshal: %v", err))
	}
	return b
}

// FreeTextKey is the argument a free-text call's input travels under in
// formats without free-text tools.
const FreeTextKey = "input"

// CallArguments is the JSON object a format without free-text calls sends
// for c: its arguments, or {"input": text} for a free-text call.
func CallArguments(c *toolfleetv1.ToolCall) json.RawMessage {
	if c.Input != nil {
		return RawJSON(map[string]string{FreeTextKey: c.GetInput()})
	}
	return EncodeArguments(c.GetArguments())
}

// ArgumentsOf is CallArguments as a Struct, for the text protocols that
// render arguments one by one.
func ArgumentsOf(c *toolfleetv1.ToolCall) *structpb.Struct {
	if c.Input != nil {
		return &structpb.Struct{Fields: map[string]*structpb.Value{FreeTextKey: structpb.NewStringValue(c.GetInput())}}
	}
	return c.GetArguments()
}
