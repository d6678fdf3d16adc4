package schema_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/sdk/schema"
)

// enumValue is one value of a test enum; model is its explicit
// (toolfleet.v1.model_name), "" for none.
type enumValue struct {
	name   string
	number int32
	model  string
}

// testEnum builds a message Msg{E e = 1; repeated E es = 2} around an enum
// named enumName, through descriptor protos, as a contract loaded by
// reflection would be; raw puts the option's bytes as unknown fields.
func testEnum(t *testing.T, enumName string, raw bool, vals ...enumValue) protoreflect.MessageDescriptor {
	t.Helper()
	ed := &descriptorpb.EnumDescriptorProto{Name: proto.String(enumName)}
	for _, v := range vals {
		evd := &descriptorpb.EnumValueDescriptorProto{Name: proto.String(v.name), Number: proto.Int32(v.number)}
		if v.model != "" {
			opts := &descriptorpb.EnumValueOptions{}
			proto.SetExtension(opts, toolfleetv1.E_ModelName, v.model)
			if raw {
				b, err := proto.Marshal(opts)
				if err != nil {
					t.Fatal(err)
				}
				opts = &descriptorpb.EnumValueOptions{}
				opts.ProtoReflect().SetUnknown(b)
			}
			evd.Options = opts
		}
		ed.Value = append(ed.Value, evd)
	}
	typ := "." + "enumtest." + enumName
	fdp := &descriptorpb.FileDescriptorProto{
		Name:     proto.String("enumtest_" + strings.ToLower(enumName) + ".proto"),
		Package:  proto.String("enumtest"),
		Syntax:   proto.String("proto3"),
		EnumType: []*descriptorpb.EnumDescriptorProto{ed},
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Msg"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("e"), JsonName: proto.String("e"), Number: proto.Int32(1), Type: descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum(), TypeName: proto.String(typ), Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()},
				{Name: proto.String("es"), JsonName: proto.String("es"), Number: proto.Int32(2), Type: descriptorpb.FieldDescriptorProto_TYPE_ENUM.Enum(), TypeName: proto.String(typ), Label: descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()},
			},
		}},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0)
}

func TestEnumModelNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		enum     string
		raw      bool
		vals     []enumValue
		want     []string // offered model names
		wantErr  string
		lookups  map[string]int32 // input name -> number (-1: refused)
		zeroName string           // ModelName(0)
	}{
		{
			name: "prefix stripped, unspecified hidden", enum: "Priority",
			vals:     []enumValue{{"PRIORITY_UNSPECIFIED", 0, ""}, {"PRIORITY_LOW", 1, ""}, {"PRIORITY_VERY_HIGH", 2, ""}},
			want:     []string{"low", "very_high"},
			lookups:  map[string]int32{"low": 1, "PRIORITY_LOW": 1, "very_high": 2, "PRIORITY_UNSPECIFIED": 0, "unspecified": -1, "LOW": -1, "Low": -1, "high": -1},
			zeroName: "unspecified",
		},
		{
			name: "camel-case enum name", enum: "HTTPMethod",
			vals: []enumValue{{"HTTP_METHOD_UNSPECIFIED", 0, ""}, {"HTTP_METHOD_GET", 1, ""}, {"POST", 2, ""}},
			want: []string{"get", "post"},
		},
		{
			name: "explicit model names", enum: "Size",
			vals:    []enumValue{{"SIZE_UNSPECIFIED", 0, "any"}, {"SIZE_S", 1, "small"}, {"SIZE_L", 2, ""}},
			want:    []string{"any", "small", "l"},
			lookups: map[string]int32{"any": 0, "small": 1, "SIZE_S": 1, "s": -1},
		},
		{
			name: "explicit names from unknown option bytes", enum: "Size", raw: true,
			vals: []enumValue{{"SIZE_UNSPECIFIED", 0, ""}, {"SIZE_S", 1, "small"}},
			want: []string{"small"},
		},
		{
			name: "meaningful zero value offered", enum: "Mode",
			vals: []enumValue{{"MODE_FAST", 0, ""}, {"MODE_SAFE", 1, ""}},
			want: []string{"fast", "safe"},
		},
		{
			name: "two values with one model name", enum: "Clash",
			vals:    []enumValue{{"CLASH_UNSPECIFIED", 0, ""}, {"CLASH_A", 1, ""}, {"CLASH_B", 2, "a"}},
			wantErr: `enumtest.CLASH_A and enumtest.CLASH_B are both shown to models as "a"`,
		},
		{
			name: "model name is another value's name", enum: "Clash",
			vals:    []enumValue{{"CLASH_UNSPECIFIED", 0, ""}, {"CLASH_A", 1, ""}, {"CLASH_B", 2, "CLASH_A"}},
			wantErr: `the model name "CLASH_A" of enumtest.CLASH_B is the name of enumtest.CLASH_A`,
		},
		{
			name: "model name with a space", enum: "Bad",
			vals:    []enumValue{{"BAD_UNSPECIFIED", 0, ""}, {"BAD_A", 1, "a b"}},
			wantErr: `must be 1-64 characters`,
		},
		{
			name: "model name too long", enum: "Bad",
			vals:    []enumValue{{"BAD_UNSPECIFIED", 0, ""}, {"BAD_A", 1, strings.Repeat("a", 65)}},
			wantErr: `must be 1-64 characters`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			md := testEnum(t, tt.enum, tt.raw, tt.vals...)
			e, err := schema.Enum(md.Fields().Get(0).Enum())
			_, serr := schema.For(md)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, schema.ErrContract) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Enum: %v, want an ErrContract with %q", err, tt.wantErr)
				}
				if serr == nil || !strings.Contains(serr.Error(), tt.wantErr) {
					t.Fatalf("For: %v, want %q", serr, tt.wantErr)
				}
				return
			}
			if err != nil || serr != nil {
				t.Fatalf("Enum: %v, For: %v", err, serr)
			}
			if got := e.Names(); !slices.Equal(got, tt.want) {
				t.Errorf("Names() = %q, want %q", got, tt.want)
			}
			for in, want := range tt.lookups {
				got := int32(-1)
				if v := e.Lookup(in); v != nil {
					got = int32(v.Number())
				}
				if got != want {
					t.Errorf("Lookup(%q) = %d, want %d", in, got, want)
				}
			}
			if tt.zeroName != "" && e.ModelName(0) != tt.zeroName {
				t.Errorf("ModelName(0) = %q, want %q", e.ModelName(0), tt.zeroName)
			}
			s, _ := schema.For(md)
			props := s["properties"].(map[string]any)
			var want []any
			for _, n := range tt.want {
				want = append(want, n)
			}
			if got := props["e"].(map[string]any)["enum"]; !slices.Equal(got.([]any), want) {
				t.Errorf("schema enum = %v, want %v", got, want)
			}
			if got := props["es"].(map[string]any)["items"].(map[string]any)["enum"]; !slices.Equal(got.([]any), want) {
				t.Errorf("schema item enum = %v, want %v", got, want)
			}
		})
	}
}

// TestResultToModel: a result as protojson renders it reads with model names;
// a singular hidden zero value is dropped.
func TestResultToModel(t *testing.T) {
	t.Parallel()
	md := testEnum(t, "Priority", false, enumValue{"PRIORITY_UNSPECIFIED", 0, ""}, enumValue{"PRIORITY_LOW", 1, ""}, enumValue{"PRIORITY_HIGH", 2, "urgent"})
	tests := map[string]string{
		`{"e": "PRIORITY_LOW", "es": ["PRIORITY_HIGH", "PRIORITY_LOW"]}`: `{"e":"low","es":["urgent","low"]}`,
		`{"e": "PRIORITY_UNSPECIFIED", "es": []}`:                        `{"es":[]}`,
		`{"e": "PRIORITY_HIGH", "es": ["PRIORITY_UNSPECIFIED"]}`:         `{"e":"urgent","es":["unspecified"]}`,
		`{"e": 7}`: `{"e":7}`, // an unknown number stays as protojson wrote it
	}
	for in, want := range tests {
		v := &structpb.Value{}
		if err := protojson.Unmarshal([]byte(in), v); err != nil {
			t.Fatal(err)
		}
		schema.ResultToModel(md, v)
		got, err := protojson.MarshalOptions{}.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if compact(string(got)) != want {
			t.Errorf("ResultToModel(%s) = %s, want %s", in, got, want)
		}
	}
}

func compact(s string) string { return strings.NewReplacer(" ", "", "\n", "").Replace(s) }

func TestReachesEnum(t *testing.T) {
	t.Parallel()
	for md, want := range map[protoreflect.MessageDescriptor]bool{
		(&schematestv1.TypesResponse{}).ProtoReflect().Descriptor():      true, // echo.color
		(&schematestv1.ConstraintsRequest{}).ProtoReflect().Descriptor(): true,
		(&schematestv1.Node{}).ProtoReflect().Descriptor():               false, // recursive, no enum
		(&calculatorv1.AddResponse{}).ProtoReflect().Descriptor():        false,
		(&schematestv1.SleepRequest{}).ProtoReflect().Descriptor():       false, // well-known types only
	} {
		if got := schema.ReachesEnum(md); got != want {
			t.Errorf("ReachesEnum(%s) = %v, want %v", md.FullName(), got, want)
		}
	}
}
