package client

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolfleet/toolfleet/internal/jsonerr"
)

// InputOf converts a call input to the Struct the gateway takes: nil (no
// fields), a *structpb.Struct, a proto.Message (a generated request, rendered
// as protojson), a json.RawMessage, []byte or string holding a JSON object, or
// any value encoding/json renders as an object: a map[string]any whose values
// may be typed slices, maps and structs ([]string, map[string]int, …), or a
// struct with json tags.
func InputOf(input any) (*structpb.Struct, error) {
	var raw []byte
	switch v := input.(type) {
	case nil:
		return &structpb.Struct{}, nil
	case *structpb.Struct:
		return v, nil
	case proto.Message:
		b, err := protojson.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("client: input: %w", err)
		}
		raw = b
	case map[string]any:
		// structpb.NewStruct takes only []any and map[string]any containers;
		// typed ones go through encoding/json below.
		if s, err := structpb.NewStruct(v); err == nil {
			return s, nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("client: input: %w", err)
		}
		raw = b
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("client: input: %w", err)
		}
		raw = b
	}
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("client: input must be a JSON object: %w", jsonerr.Describe(raw, err))
	}
	return s, nil
}

// Decode unmarshals a successful result's value into v (as encoding/json
// would); it returns the execution error for a failed call.
func (r *Result) Decode(v any) error {
	if err := r.Err(); err != nil {
		return err
	}
	b, err := protojson.Marshal(r.Value)
	if err != nil {
		return fmt.Errorf("client: result of %s: %w", r.ToolID, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("client: result of %s: %w", r.ToolID, err)
	}
	return nil
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
