package gateway

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/schema"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// decodeInput is tool.DecodeInputStruct with a shortcut for the common input: a
// flat object of bool, string and number fields. tool.DecodeInputStruct renders
// the Struct as JSON, checks it with encoding/json and decodes it with protojson
// (≈ 11 µs per call in the benchmark, the pipeline's largest item); the shortcut
// sets the fields directly and runs the same protovalidate step. It only takes
// inputs for which protojson would produce exactly the same message and the JSON
// checks would find nothing; anything else (unknown or repeated fields, nulls,
// type mismatches, out-of-range or non-integral numbers, nested messages, enums,
// bytes, oneofs, invalid UTF-8) goes through tool.DecodeInputStruct, which owns
// every parameter_errors message. TestDecodeInputMatchesTool keeps them in step.
func decodeInput(md protoreflect.MessageDescriptor, input *structpb.Struct) (proto.Message, *toolfleetv1.ValidationError, error) {
	msg := scalarInput(md, input)
	if msg == nil {
		// Off the fast path (which takes only inputs these rules accept).
		if ve := validateInput(md, input); ve != nil {
			return nil, ve, nil
		}
		return tool.DecodeInputStruct(md, input)
	}
	ve, err := tool.ValidateMessage(msg)
	if err != nil || ve != nil {
		return nil, ve, err
	}
	return msg, nil, nil
}

// scalarInput builds the message for a flat scalar input, or returns nil.
func scalarInput(md protoreflect.MessageDescriptor, input *structpb.Struct) proto.Message {
	if input == nil || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil
	}
	var msg proto.Message
	// As tool.DecodeInput: the linked Go type only when it is the very same descriptor.
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil && mt.Descriptor() == md {
		msg = mt.New().Interface()
	} else {
		msg = dynamicpb.NewMessage(md)
	}
	m := msg.ProtoReflect()
	fields := md.Fields()
	var seenBuf [16]protoreflect.FieldNumber
	seen := seenBuf[:0]
	for key, v := range input.GetFields() {
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil || fd.IsList() || fd.IsMap() {
			return nil
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			return nil
		}
		for _, n := range seen {
			if n == fd.Number() {
				return nil // named twice (JSON and proto name): protojson refuses it
			}
		}
		seen = append(seen, fd.Number())
		val, ok := scalarValue(fd.Kind(), v)
		if !ok {
			return nil
		}
		m.Set(fd, val)
	}
	// A required field not named: tool.DecodeInputStruct reports it.
	for _, fd := range schema.RequiredFields(md) {
		if !slices.Contains(seen, fd.Number()) {
			return nil
		}
	}
	return msg
}

// scalarValue converts v for a field of kind k exactly as protojson would decode
// the JSON that protojson renders for v, or reports false.
func scalarValue(k protoreflect.Kind, v *structpb.Value) (protoreflect.Value, bool) {
	switch x := v.GetKind().(type) {
	case *structpb.Value_BoolValue:
		if k == protoreflect.BoolKind {
			return protoreflect.ValueOfBool(x.BoolValue), true
		}
	case *structpb.Value_StringValue:
		if k == protoreflect.StringKind && utf8.ValidString(x.StringValue) {
			return protoreflect.ValueOfString(x.StringValue), true
		}
	case *structpb.Value_NumberValue:
		return numberValue(k, x.NumberValue)
	}
	return protoreflect.Value{}, false
}

func numberValue(k protoreflect.Kind, n float64) (protoreflect.Value, bool) {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		return protoreflect.Value{}, false // protojson cannot render it
	}
	// protojson renders a number as its shortest decimal: for integers up to 2^53
	// that is the integer itself, decoded into any integer field whose range holds
	// it; above, it may be another integer (2^63 renders as 9223372036854776000).
	integral := n == math.Trunc(n) && math.Abs(n) <= 1<<53
	switch k {
	case protoreflect.DoubleKind:
		// The shortest decimal protojson writes parses back to n exactly.
		return protoreflect.ValueOfFloat64(n), true
	case protoreflect.FloatKind:
		if math.Abs(n) > math.MaxFloat32 {
			return protoreflect.Value{}, false
		}
		// protojson parses the decimal text straight to float32; so does this.
		f, err := strconv.ParseFloat(strconv.FormatFloat(n, 'g', -1, 64), 32)
		if err != nil {
			return protoreflect.Value{}, false
		}
		return protoreflect.ValueOfFloat32(float32(f)), true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if integral && n >= math.MinInt32 && n <= math.MaxInt32 {
			return protoreflect.ValueOfInt32(int32(n)), true
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if integral {
			return protoreflect.ValueOfInt64(int64(n)), true
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		// -0 renders as "-0", which protojson refuses for unsigned fields.
		if integral && !math.Signbit(n) && n <= math.MaxUint32 {
			return protoreflect.ValueOfUint32(uint32(n)), true
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if integral && !math.Signbit(n) {
			return protoreflect.ValueOfUint64(uint64(n)), true
		}
	}
	return protoreflect.Value{}, false
}

// scalarResult is the Value that protojson.Unmarshal makes of resultJSON's
// rendering of out, built directly for a flat message of bool, string, double
// and 32-bit integer fields (the common tool result), with an upper bound of that
// rendering's length; nil for anything else: 64-bit integers (rendered as
// strings), floats (rendered at 32-bit precision), enums, bytes, NaN or infinite
// doubles, invalid UTF-8, fields with presence, oneofs, repeated, map and message
// fields, extensions. It saves the JSON round trip (≈ 3–5 µs per call) whenever the
// bound is within the result limit; TestScalarResultMatchesProtojson keeps it in
// step with protojson.
func scalarResult(out proto.Message) (*structpb.Value, int64) {
	m := out.ProtoReflect()
	md := m.Descriptor()
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return nil, 0
	}
	fields := md.Fields()
	st := &structpb.Struct{Fields: make(map[string]*structpb.Value, fields.Len())}
	bound := int64(2) // {}
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsList() || fd.IsMap() || fd.HasPresence() || fd.ContainingOneof() != nil {
			return nil, 0
		}
		v := m.Get(fd)
		var val *structpb.Value
		// "name": value, — protojson may add a space after the colon.
		bound += int64(len(fd.JSONName())) + 5
		switch fd.Kind() {
		case protoreflect.BoolKind:
			val = structpb.NewBoolValue(v.Bool())
			bound += 5
		case protoreflect.StringKind:
			s := v.String()
			if !utf8.ValidString(s) {
				return nil, 0 // protojson refuses it
			}
			val = structpb.NewStringValue(s)
			bound += 2 + 6*int64(len(s)) // at worst \u00XX per byte
		case protoreflect.DoubleKind:
			f := v.Float()
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, 0 // rendered as the strings "NaN", "Infinity"
			}
			val = structpb.NewNumberValue(f)
			bound += 32 // the longest shortest form is 24 bytes
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			val = structpb.NewNumberValue(float64(v.Int()))
			bound += 11
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			val = structpb.NewNumberValue(float64(v.Uint()))
			bound += 10
		default:
			return nil, 0
		}
		st.Fields[fd.JSONName()] = val
	}
	extension := false
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		extension = fd.IsExtension()
		return !extension
	})
	if extension {
		return nil, 0
	}
	return structpb.NewStructValue(st), bound
}
