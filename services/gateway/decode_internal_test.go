package gateway

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// scalarsDescriptor is a message with a field of every scalar kind, a proto3
// optional, a oneof, a repeated, a map, an enum, bytes and a nested message.
func scalarsDescriptor(t testing.TB) protoreflect.MessageDescriptor {
	t.Helper()
	type T = descriptorpb.FieldDescriptorProto_Type
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
	field := func(name string, n int32, typ T) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: opt.Enum(),
			JsonName: proto.String(jsonCamel(name))}
	}
	fields := []*descriptorpb.FieldDescriptorProto{
		field("b", 1, descriptorpb.FieldDescriptorProto_TYPE_BOOL),
		field("s", 2, descriptorpb.FieldDescriptorProto_TYPE_STRING),
		field("d", 3, descriptorpb.FieldDescriptorProto_TYPE_DOUBLE),
		field("f", 4, descriptorpb.FieldDescriptorProto_TYPE_FLOAT),
		field("i32", 5, descriptorpb.FieldDescriptorProto_TYPE_INT32),
		field("si32", 6, descriptorpb.FieldDescriptorProto_TYPE_SINT32),
		field("sf32", 7, descriptorpb.FieldDescriptorProto_TYPE_SFIXED32),
		field("u32", 8, descriptorpb.FieldDescriptorProto_TYPE_UINT32),
		field("fx32", 9, descriptorpb.FieldDescriptorProto_TYPE_FIXED32),
		field("i64", 10, descriptorpb.FieldDescriptorProto_TYPE_INT64),
		field("si64", 11, descriptorpb.FieldDescriptorProto_TYPE_SINT64),
		field("sf64", 12, descriptorpb.FieldDescriptorProto_TYPE_SFIXED64),
		field("u64", 13, descriptorpb.FieldDescriptorProto_TYPE_UINT64),
		field("fx64", 14, descriptorpb.FieldDescriptorProto_TYPE_FIXED64),
		field("by", 15, descriptorpb.FieldDescriptorProto_TYPE_BYTES),
		field("snake_name", 16, descriptorpb.FieldDescriptorProto_TYPE_INT32),
		field("opt", 17, descriptorpb.FieldDescriptorProto_TYPE_INT32),
		field("one_a", 18, descriptorpb.FieldDescriptorProto_TYPE_STRING),
		field("one_b", 19, descriptorpb.FieldDescriptorProto_TYPE_INT32),
		field("list", 20, descriptorpb.FieldDescriptorProto_TYPE_INT32),
	}
	fields[16].Proto3Optional = proto.Bool(true)
	fields[16].OneofIndex = proto.Int32(1)
	fields[17].OneofIndex = proto.Int32(0)
	fields[18].OneofIndex = proto.Int32(0)
	fields[19].Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("gatewaytest/scalars.proto"), Package: proto.String("gatewaytest"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Scalars"), Field: fields,
			OneofDecl: []*descriptorpb.OneofDescriptorProto{{Name: proto.String("one")}, {Name: proto.String("_opt")}},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

func jsonCamel(s string) string {
	out := []byte{}
	up := false
	for i := 0; i < len(s); i++ {
		if s[i] == '_' {
			up = true
			continue
		}
		c := s[i]
		if up && c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// decodeInput must answer exactly as tool.DecodeInputStruct: the same message,
// the same ValidationError, an error in the same cases.
func TestDecodeInputMatchesTool(t *testing.T) {
	scalars := scalarsDescriptor(t)
	// A copy of the calculator's descriptors, not the linked ones: the dynamicpb path.
	calcFile, err := protodesc.NewFile(protodesc.ToFileDescriptorProto(calculatorv1.File_tools_calculator_v1_calculator_proto), protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	numbers := []float64{0, math.Copysign(0, -1), 1, -1, 1.5, -2.25, 0.1, 1e-7, 3.4028234663852886e38, 3.5e38, 16777217, 1 << 31, -(1 << 31), -(1 << 31) - 1,
		1<<31 - 1, 1 << 32, 1<<32 - 1, 1 << 53, 1<<53 + 2, 1 << 63, -(1 << 63), 1 << 64, 1e20, 1e21, 1e300, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.NaN(), math.Inf(1), math.Inf(-1)}
	values := []*structpb.Value{structpb.NewNullValue(), structpb.NewBoolValue(true), structpb.NewBoolValue(false),
		structpb.NewStringValue(""), structpb.NewStringValue("héllo"), structpb.NewStringValue("bad \xff"), structpb.NewStringValue("12"),
		structpb.NewStringValue("NaN"), structpb.NewStringValue("aGk="), structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1)}}),
		structpb.NewStructValue(&structpb.Struct{})}
	for _, n := range numbers {
		values = append(values, structpb.NewNumberValue(n))
	}
	var inputs []*structpb.Struct
	inputs = append(inputs, nil, &structpb.Struct{})
	for i := range scalars.Fields().Len() {
		fd := scalars.Fields().Get(i)
		for _, v := range values {
			inputs = append(inputs, &structpb.Struct{Fields: map[string]*structpb.Value{fd.JSONName(): v}})
			if fd.JSONName() != string(fd.Name()) {
				inputs = append(inputs, &structpb.Struct{Fields: map[string]*structpb.Value{string(fd.Name()): v}})
			}
		}
	}
	num := structpb.NewNumberValue
	inputs = append(inputs,
		&structpb.Struct{Fields: map[string]*structpb.Value{"snakeName": num(1), "snake_name": num(2)}},
		&structpb.Struct{Fields: map[string]*structpb.Value{"unknown": num(1)}},
		&structpb.Struct{Fields: map[string]*structpb.Value{"b": structpb.NewBoolValue(true), "s": structpb.NewStringValue("x"), "d": num(2.5), "i64": num(-7), "u32": num(7)}},
	)
	check := func(md protoreflect.MessageDescriptor, in *structpb.Struct) {
		t.Helper()
		checkDecodeInput(t, md, in)
	}
	for _, in := range inputs {
		check(scalars, in)
	}
	// Which oneof member the error names depends on map order, in tool as well.
	if _, ve, _ := decodeInput(scalars, &structpb.Struct{Fields: map[string]*structpb.Value{"oneA": structpb.NewStringValue("x"), "oneB": num(2)}}); ve == nil {
		t.Error("two members of a oneof accepted")
	}
	// Contracts with protovalidate rules, linked and dynamic.
	for _, md := range []protoreflect.MessageDescriptor{
		(&calculatorv1.AddRequest{}).ProtoReflect().Descriptor(), (&calculatorv1.EvaluateRequest{}).ProtoReflect().Descriptor(),
		calcFile.Messages().ByName("AddRequest"), calcFile.Messages().ByName("EvaluateRequest"),
	} {
		for i := range md.Fields().Len() {
			for _, v := range values {
				check(md, &structpb.Struct{Fields: map[string]*structpb.Value{md.Fields().Get(i).JSONName(): v}})
			}
		}
		check(md, &structpb.Struct{Fields: map[string]*structpb.Value{"a": num(2), "b": num(3)}})
		check(md, &structpb.Struct{})
	}
}

func TestDecodeInputShortcutTaken(t *testing.T) {
	in, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	if scalarInput((&calculatorv1.AddRequest{}).ProtoReflect().Descriptor(), in) == nil {
		t.Fatal("a flat numeric input did not take the shortcut")
	}
}

func BenchmarkDecodeInput(b *testing.B) {
	md := (&calculatorv1.AddRequest{}).ProtoReflect().Descriptor()
	in, _ := structpb.NewStruct(map[string]any{"a": 2, "b": 3})
	b.Run("gateway", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _, _ = decodeInput(md, in)
		}
	})
	b.Run("tool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _, _ = tool.DecodeInputStruct(md, in)
		}
	})
}

// scalarResult must give what mapResult's protojson round trip gives.
func TestScalarResultMatchesProtojson(t *testing.T) {
	scalars := scalarsDescriptor(t)
	numbers := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-7, 1e21, 1 << 53, math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(-1)}
	var msgs []proto.Message
	for _, n := range numbers {
		msgs = append(msgs, &calculatorv1.AddResponse{Result: n})
		d := dynamicpb.NewMessage(protodescAdd(t))
		d.Set(d.Descriptor().Fields().ByName("result"), protoreflect.ValueOfFloat64(n))
		msgs = append(msgs, d)
	}
	// Messages with one field of each kind set (and the rest zero), for every kind.
	set := map[protoreflect.Kind]protoreflect.Value{
		protoreflect.BoolKind: protoreflect.ValueOfBool(true), protoreflect.StringKind: protoreflect.ValueOfString("hé \"q\" \n"),
		protoreflect.DoubleKind: protoreflect.ValueOfFloat64(2.5), protoreflect.FloatKind: protoreflect.ValueOfFloat32(0.1),
		protoreflect.Int32Kind: protoreflect.ValueOfInt32(-7), protoreflect.Sint32Kind: protoreflect.ValueOfInt32(math.MinInt32),
		protoreflect.Sfixed32Kind: protoreflect.ValueOfInt32(math.MaxInt32), protoreflect.Uint32Kind: protoreflect.ValueOfUint32(math.MaxUint32),
		protoreflect.Fixed32Kind: protoreflect.ValueOfUint32(3), protoreflect.Int64Kind: protoreflect.ValueOfInt64(1 << 60),
		protoreflect.Sint64Kind: protoreflect.ValueOfInt64(-1), protoreflect.Sfixed64Kind: protoreflect.ValueOfInt64(5),
		protoreflect.Uint64Kind: protoreflect.ValueOfUint64(1 << 63), protoreflect.Fixed64Kind: protoreflect.ValueOfUint64(9),
		protoreflect.BytesKind: protoreflect.ValueOfBytes([]byte("hi")),
	}
	msgs = append(msgs, dynamicpb.NewMessage(scalars))
	for i := range scalars.Fields().Len() {
		fd := scalars.Fields().Get(i)
		d := dynamicpb.NewMessage(scalars)
		if fd.IsList() {
			d.Mutable(fd).List().Append(protoreflect.ValueOfInt32(4))
		} else {
			d.Set(fd, set[fd.Kind()])
		}
		msgs = append(msgs, d)
	}
	// A flat message of the kinds the shortcut takes, with every field set.
	flatFD := &descriptorpb.FileDescriptorProto{Name: proto.String("gatewaytest/flat.proto"), Package: proto.String("gatewaytest"),
		Syntax: proto.String("proto3"), MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Flat")}}}
	for i := range scalars.Fields().Len() {
		fd := scalars.Fields().Get(i)
		switch fd.Kind() {
		case protoreflect.BoolKind, protoreflect.StringKind, protoreflect.DoubleKind, protoreflect.Int32Kind, protoreflect.Sint32Kind,
			protoreflect.Sfixed32Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			if fd.HasPresence() || fd.ContainingOneof() != nil || fd.IsList() {
				continue
			}
			flatFD.MessageType[0].Field = append(flatFD.MessageType[0].Field, protodesc.ToFieldDescriptorProto(fd))
		}
	}
	flatFile, err := protodesc.NewFile(flatFD, nil)
	if err != nil {
		t.Fatal(err)
	}
	flat := flatFile.Messages().Get(0)
	full := dynamicpb.NewMessage(flat)
	for i := range flat.Fields().Len() {
		full.Set(flat.Fields().Get(i), set[flat.Fields().Get(i).Kind()])
	}
	msgs = append(msgs, dynamicpb.NewMessage(flat), full)
	if v, _ := scalarResult(full); v == nil || flat.Fields().Len() < 8 {
		t.Fatalf("the flat message (%d fields) did not take the shortcut", flat.Fields().Len())
	}
	for _, out := range msgs {
		b, err := resultJSON.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		want := &structpb.Value{}
		if err := protojson.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		got, bound := scalarResult(out)
		if got != nil && !proto.Equal(got, want) {
			t.Errorf("scalarResult(%v) = %v, want %v", out, got, want)
		}
		if got != nil && int64(len(b)) > bound {
			t.Errorf("scalarResult(%v): bound %d < %d bytes of %s", out, bound, len(b), b)
		}
	}
	if v, _ := scalarResult(&calculatorv1.AddResponse{Result: 5}); v == nil {
		t.Error("a flat double result did not take the shortcut")
	}
}

// protodescAdd is a copy of AddResponse's descriptor (the dynamicpb path).
func protodescAdd(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	f, err := protodesc.NewFile(protodesc.ToFileDescriptorProto(calculatorv1.File_tools_calculator_v1_calculator_proto), protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return f.Messages().ByName("AddResponse")
}

func BenchmarkResultValue(b *testing.B) {
	out := &calculatorv1.AddResponse{Result: 5}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = scalarResult(out)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			js, _ := resultJSON.Marshal(out)
			_ = protojson.Unmarshal(js, &structpb.Value{})
		}
	})
}

// TestValidateInput: inputs that break the published schema are validation errors
// naming the field, never Internal (NaN, ±Inf, an empty Value) and never
// silently converted (a string for a number, a number for an enum).
func TestValidateInput(t *testing.T) {
	t.Parallel()
	md := (&schematestv1.TypesRequest{}).ProtoReflect().Descriptor()
	num, str := structpb.NewNumberValue, structpb.NewStringValue
	obj := func(kv ...any) *structpb.Value {
		s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for i := 0; i < len(kv); i += 2 {
			s.Fields[kv[i].(string)] = kv[i+1].(*structpb.Value)
		}
		return structpb.NewStructValue(s)
	}
	list := func(vs ...*structpb.Value) *structpb.Value {
		return structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	tests := []struct {
		name  string
		input *structpb.Value
		want  map[string]string // field → start of the message; nil: valid
	}{
		{"NaN", obj("d", num(math.NaN())), map[string]string{"d": "must be a finite number"}},
		{"+Inf", obj("f", num(math.Inf(1))), map[string]string{"f": "must be a finite number"}},
		{"-Inf in a free-form struct", obj("meta", obj("x", num(math.Inf(-1)))), map[string]string{"meta.x": "must be a finite number"}},
		{"empty Value", obj("anyValue", &structpb.Value{}), map[string]string{"anyValue": "has no value"}},
		{"empty Value in a list", obj("list", list(num(1), &structpb.Value{})), map[string]string{"list[1]": "has no value"}},
		{"string for int32", obj("i32", str("12")), map[string]string{"i32": "must be a number, not a string"}},
		{"string NaN for double", obj("d", str("NaN")), map[string]string{"d": "must be a number, not a string"}},
		{"nested messages", obj("inner", obj("note", str("1")), "inners", list(obj("note", str("x")))), nil},
		{"NaN in a list of messages", obj("inners", list(obj("note", num(math.NaN())))), map[string]string{"inners[0].note": "must be a finite number"}},
		{"number for an enum", obj("color", num(1)), map[string]string{"color": "must be one of the enum's names"}},
		{"digit string for int64 (published)", obj("i64", str("12")), nil},
		{"valid mix", obj("d", num(1.5), "i32", num(3), "color", str("COLOR_RED"), "meta", obj("k", str("v"))), nil},
	}
	for _, tt := range tests {
		ve := validateInput(md, tt.input.GetStructValue())
		if tt.want == nil {
			if ve != nil {
				t.Errorf("%s: %v, want valid", tt.name, ve)
			}
			continue
		}
		if ve == nil || len(ve.GetParameterErrors()) != len(tt.want) {
			t.Errorf("%s: %v, want errors on %v", tt.name, ve, tt.want)
			continue
		}
		for field, msg := range tt.want {
			if got := ve.GetParameterErrors()[field]; !strings.HasPrefix(got, msg) {
				t.Errorf("%s: %s: %q, want %q", tt.name, field, got, msg)
			}
		}
	}
}

// checkDecodeInput checks that decodeInput gives in what the schema's rules
// and tool.DecodeInputStruct give it: its shortcut changes only the speed.
func checkDecodeInput(t testing.TB, md protoreflect.MessageDescriptor, in *structpb.Struct) {
	t.Helper()
	gotMsg, gotVE, gotErr := decodeInput(md, in)
	name := fmt.Sprintf("%s %v", md.FullName(), in)
	if ve := validateInput(md, in); ve != nil {
		// The schema's rules, stricter than protojson: see TestValidateInput.
		if gotMsg != nil || gotErr != nil || !proto.Equal(gotVE, ve) {
			t.Errorf("%s: got %v %v %v, want the schema's validation error %v", name, gotMsg, gotVE, gotErr, ve)
		}
		return
	}
	wantMsg, wantVE, wantErr := tool.DecodeInputStruct(md, in)
	if (wantErr == nil) != (gotErr == nil) {
		t.Errorf("%s: err %v, want %v", name, gotErr, wantErr)
	}
	if !proto.Equal(gotVE, wantVE) {
		t.Errorf("%s: validation error %v, want %v", name, gotVE, wantVE)
	}
	if (wantMsg == nil) != (gotMsg == nil) || wantMsg != nil && !proto.Equal(gotMsg, wantMsg) {
		t.Errorf("%s: message %v, want %v", name, gotMsg, wantMsg)
	}
}
