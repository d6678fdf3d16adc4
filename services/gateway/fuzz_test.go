package gateway

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
)

// FuzzDecodeInput: for any JSON object a caller sends as a tool's input, the
// pipeline's decodeInput (with its fast path) agrees with the schema's rules
// and with tool.DecodeInputStruct, on a message of every field kind and on
// real contracts with protovalidate rules.
func FuzzDecodeInput(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1,"b":2}`, `{"a":"1"}`, `{"a":1e400}`, `{"i64":"9007199254740993"}`, `{"s":"x","b":true,"d":2.5}`,
		`{"rep":[1,2,{"x":1}]}`, `{"m":{"k":"v"}}`, `{"e":"COLOR_RED"}`, `{"e":1}`, `{"oneA":"x","oneB":2}`, `{"nested":{"s":null}}`,
		`{"expression":""}`, `{"by":"aGk="}`, `{"unknown":1}`} {
		f.Add([]byte(s))
	}
	mds := []protoreflect.MessageDescriptor{scalarsDescriptor(f),
		(&calculatorv1.AddRequest{}).ProtoReflect().Descriptor(), (&calculatorv1.EvaluateRequest{}).ProtoReflect().Descriptor(),
		(&schematestv1.TypesRequest{}).ProtoReflect().Descriptor()}
	f.Fuzz(func(t *testing.T, b []byte) {
		in := &structpb.Struct{}
		if protojson.Unmarshal(b, in) != nil {
			return // the surfaces refuse what is not a JSON object before the pipeline
		}
		for _, md := range mds {
			checkDecodeInput(t, md, in)
		}
	})
}

// FuzzRequestCodecs: the bytes of a request — protobuf on gRPC, JSON on
// Connect — either decode into a CallToolRequest or fail with an error that
// the gateway turns into InvalidArgument; the JSON codec refuses a body over
// its value bound before decoding it.
func FuzzRequestCodecs(f *testing.F) {
	ok, _ := proto.Marshal(&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", CallId: "c1"})
	f.Add(ok)
	f.Add([]byte(`{"toolId":"Calculator.Add","input":{"a":1,"b":2}}`))
	f.Add([]byte{0x0a, 0x05, 'a'})
	f.Add([]byte(strings.Repeat("[", 200)))
	codec, jsonCodec := newLenientCodec(), limitedJSON{name: "json", maxValues: 50}
	f.Fuzz(func(t *testing.T, b []byte) {
		// gRPC: a marked message's decode failure is kept aside, never returned.
		req := &toolfleetv1.CallToolRequest{}
		dec := func(v any) error { return codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, v) }
		if err := decode(dec, req); err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("gRPC decode of %q: %v, want InvalidArgument", b, err)
		}
		// Connect JSON.
		jreq := &toolfleetv1.CallToolRequest{}
		if err := jsonCodec.Unmarshal(b, jreq); err == nil {
			if _, err := jsonCodec.Marshal(jreq); err != nil {
				t.Fatalf("a decoded request does not encode: %v", err)
			}
			if proto.Size(jreq.GetInput()) > 0 && countValues(jreq.GetInput()) > 50 {
				t.Fatalf("the codec decoded %d input values past its bound of 50", countValues(jreq.GetInput()))
			}
		}
	})
}

// countValues counts a Struct's values as jsonsize does (containers and members).
func countValues(s *structpb.Struct) int {
	n := 1
	for _, v := range s.GetFields() {
		n += countValue(v)
	}
	return n
}

func countValue(v *structpb.Value) int {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return countValues(k.StructValue)
	case *structpb.Value_ListValue:
		n := 1
		for _, e := range k.ListValue.GetValues() {
			n += countValue(e)
		}
		return n
	}
	return 1
}
