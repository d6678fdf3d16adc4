package tool_test

import (
	"maps"
	"testing"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// TestDecodeInputEnumModelNames: an enum value may be sent by its model name
// ("red") or its proto name ("COLOR_RED"), in singular, repeated and nested
// fields, and both decode to the same number.
func TestDecodeInputEnumModelNames(t *testing.T) {
	t.Parallel()
	md := (&schematestv1.TypesRequest{}).ProtoReflect().Descriptor()
	tests := []struct {
		input      string
		color      schematestv1.Color
		colors     []schematestv1.Color
		wantErrors map[string]string
	}{
		{input: `{"color": "red"}`, color: schematestv1.Color_COLOR_RED},
		{input: `{"color": "COLOR_GREEN"}`, color: schematestv1.Color_COLOR_GREEN},
		{input: `{"color": 2}`, color: schematestv1.Color_COLOR_GREEN},
		{input: `{"color": "green", "colors": ["red", "COLOR_GREEN", "green"], "s": "<&>"}`,
			color: schematestv1.Color_COLOR_GREEN, colors: []schematestv1.Color{1, 2, 2}},
		{input: `{"color": "COLOR_UNSPECIFIED"}`, color: 0},
		// Case-sensitive, and the hidden zero value has no model name.
		{input: `{"color": "Red"}`, wantErrors: map[string]string{"color": "must be one of: red, green"}},
		{input: `{"color": "unspecified", "colors": ["blue"]}`, wantErrors: map[string]string{
			"color": "must be one of: red, green", "colors[0]": "must be one of: red, green"}},
	}
	for _, tt := range tests {
		msg, ve, err := tool.DecodeInput(md, []byte(tt.input))
		if err != nil {
			t.Fatalf("%s: %v", tt.input, err)
		}
		if tt.wantErrors != nil {
			if ve == nil || !maps.Equal(ve.GetParameterErrors(), tt.wantErrors) {
				t.Errorf("%s: parameter_errors = %q, want %q", tt.input, ve.GetParameterErrors(), tt.wantErrors)
			}
			continue
		}
		if ve != nil {
			t.Errorf("%s: refused: %v", tt.input, ve)
			continue
		}
		got := msg.(*schematestv1.TypesRequest)
		if got.GetColor() != tt.color || len(got.GetColors()) != len(tt.colors) {
			t.Errorf("%s: decoded %v", tt.input, got)
			continue
		}
		for i, c := range tt.colors {
			if got.GetColors()[i] != c {
				t.Errorf("%s: colors[%d] = %v, want %v", tt.input, i, got.GetColors()[i], c)
			}
		}
		if tt.input == `{"color": "green", "colors": ["red", "COLOR_GREEN", "green"], "s": "<&>"}` && got.GetS() != "<&>" {
			t.Errorf("the rewrite changed another field: s = %q", got.GetS())
		}
	}
}

// TestDecodeInputEnumInvalidUTF8: rewriting model names never launders invalid
// UTF-8 that protojson refuses.
func TestDecodeInputEnumInvalidUTF8(t *testing.T) {
	t.Parallel()
	md := (&schematestv1.TypesRequest{}).ProtoReflect().Descriptor()
	_, ve, err := tool.DecodeInput(md, []byte("{\"color\": \"red\", \"s\": \"\xff\"}"))
	if err != nil || ve == nil {
		t.Fatalf("invalid UTF-8 accepted: %v %v", ve, err)
	}
}

// priorityRequest is message Req { Priority priority = 1 [(buf.validate.field).enum = {defined_only: true, not_in: [0]}]; }
// built at run time, as a contract loaded by reflection.
func priorityRequest(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	opts := &descriptorpb.FieldOptions{}
	proto.SetExtension(opts, validate.E_Field, validate.FieldRules_builder{
		Enum: validate.EnumRules_builder{DefinedOnly: proto.Bool(true), NotIn: []int32{0}}.Build(),
	}.Build())
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("enumrequired.proto"),
		Package:    proto.String("enumrequired"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"buf/validate/validate.proto"},
		EnumType: []*descriptorpb.EnumDescriptorProto{{
			Name: proto.String("Priority"),
			Value: []*descriptorpb.EnumValueDescriptorProto{
				{Name: proto.String("PRIORITY_UNSPECIFIED"), Number: proto.Int32(0)},
				{Name: proto.String("PRIORITY_LOW"), Number: proto.Int32(1)},
				{Name: proto.String("PRIORITY_HIGH"), Number: proto.Int32(2)},
			},
		}},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Req"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("priority"), JsonName: proto.String("priority"), Number: proto.Int32(1),
				Type: descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum(), TypeName: proto.String(".enumrequired.Priority"),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), Options: opts,
			}},
		}},
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

// TestDecodeInputEnumRequired: an enum whose rules refuse the zero value says
// "is required" when left out, not "must not be one of: PRIORITY_UNSPECIFIED";
// other refusals name the model names.
func TestDecodeInputEnumRequired(t *testing.T) {
	t.Parallel()
	md := priorityRequest(t)
	tests := map[string]map[string]string{
		`{}`:                                   {"priority": "is required"},
		`{"priority": "PRIORITY_UNSPECIFIED"}`: {"priority": "is required"},
		`{"priority": 7}`:                      {"priority": "must be one of: low, high"},
		`{"priority": "medium"}`:               {"priority": "must be one of: low, high"},
		`{"priority": "high"}`:                 nil,
	}
	for in, want := range tests {
		_, ve, err := tool.DecodeInput(md, []byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if !maps.Equal(ve.GetParameterErrors(), want) {
			t.Errorf("%s: parameter_errors = %q, want %q", in, ve.GetParameterErrors(), want)
		}
	}
}
