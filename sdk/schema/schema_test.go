package schema_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	webv1 "github.com/toolfleet/toolfleet/gen/tools/web/v1"
	"github.com/toolfleet/toolfleet/sdk/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// bundled lists every bundled toolkit contract; each method's input and output
// schema has a golden file under testdata/<file>/<Method>.{input,output}.json.
var bundled = []protoreflect.FileDescriptor{
	calculatorv1.File_tools_calculator_v1_calculator_proto,
	clockv1.File_tools_clock_v1_clock_proto,
	jsonqv1.File_tools_jsonq_v1_jsonq_proto,
	kvv1.File_tools_kv_v1_kv_proto,
	webv1.File_tools_web_v1_web_proto,
	schematestv1.File_tools_schematest_v1_schematest_proto,
}

// compile checks a schema against the 2020-12 metaschema and returns it compiled.
func compile(t *testing.T, s map[string]any) *jsonschema.Schema {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("mem://schema.json", doc); err != nil {
		t.Fatalf("add resource: %v", err)
	}
	sch, err := c.Compile("mem://schema.json")
	if err != nil {
		t.Fatalf("schema does not compile against the 2020-12 metaschema: %v\n%s", err, b)
	}
	return sch
}

func instance(t *testing.T, js string) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(js))
	if err != nil {
		t.Fatalf("instance %s: %v", js, err)
	}
	return v
}

func TestGoldenBundledSchemas(t *testing.T) {
	t.Parallel()
	for _, fd := range bundled {
		svcs := fd.Services()
		for i := range svcs.Len() {
			methods := svcs.Get(i).Methods()
			for j := range methods.Len() {
				m := methods.Get(j)
				for kind, md := range map[string]protoreflect.MessageDescriptor{"input": m.Input(), "output": m.Output()} {
					name := filepath.Join("testdata", strings.TrimSuffix(filepath.Base(fd.Path()), ".proto"), string(m.Name())+"."+kind+".json")
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						s, err := schema.For(md)
						if err != nil {
							t.Fatalf("For(%s): %v", md.FullName(), err)
						}
						compile(t, s)
						got, err := schema.MarshalIndent(s)
						if err != nil {
							t.Fatal(err)
						}
						if *update {
							if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
								t.Fatal(err)
							}
							if err := os.WriteFile(name, got, 0o644); err != nil {
								t.Fatal(err)
							}
							return
						}
						want, err := os.ReadFile(name)
						if err != nil {
							t.Fatalf("%v (run go test ./sdk/schema -update to create it)", err)
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("schema of %s changed (run go test ./sdk/schema -update if intended):\n%s", md.FullName(), got)
						}
					})
				}
			}
		}
	}
}

// TestSchemaAcceptsProtojson checks that what protojson writes for valid messages
// conforms to the derived schema.
func TestSchemaAcceptsProtojson(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		md   protoreflect.MessageDescriptor
		json string
	}{
		{"types", (&schematestv1.TypesRequest{}).ProtoReflect().Descriptor(), `{
			"d": 1.5, "f": 2, "i32": -3, "i64": "-9007199254740993", "u32": 4, "u64": "18446744073709551615",
			"s32": 5, "s64": 6, "fx32": 7, "fx64": "8", "sfx32": -9, "sfx64": 10, "b": true, "s": "x",
			"data": "aGk=", "nickName": "", "color": "COLOR_RED", "inner": {"note": "n"},
			"tree": {"name": "root", "children": [{"name": "leaf", "children": []}]},
			"tags": ["a"], "inners": [{"note": "x"}], "counts": {"a": 1}, "byId": {"-5": {"note": "y"}},
			"url": "https://example.com", "at": "2024-05-01T12:00:00Z", "wait": "1.5s",
			"meta": {"k": [1, "two"]}, "anyValue": null, "list": [1, {"a": 2}], "maybeNumber": 1.25,
			"maybeText": "t", "maybeBig": "12", "maybeFlag": false, "nothing": {}, "mask": "a,b.c",
			"extra": {"@type": "type.googleapis.com/google.protobuf.Empty", "value": {}}, "colors": ["COLOR_GREEN"]}`},
		{"types with 64-bit numbers", (&schematestv1.TypesRequest{}).ProtoReflect().Descriptor(), `{"i64": 5, "u64": 7, "targetId": "12"}`},
		{"constraints", (&schematestv1.ConstraintsRequest{}).ProtoReflect().Descriptor(), strings.Replace(validConstraints, `"red"`, `"COLOR_RED"`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The instance must be real protojson for the message...
			msg := newMessage(tt.md)
			if err := protojson.Unmarshal([]byte(tt.json), msg); err != nil {
				t.Fatalf("not valid protojson: %v", err)
			}
			s, err := schema.For(tt.md)
			if err != nil {
				t.Fatal(err)
			}
			sch := compile(t, s)
			if err := sch.Validate(instance(t, toModel(t, tt.md, tt.json))); err != nil {
				t.Fatalf("input rejected by its schema: %v", err)
			}
			// ...and what protojson writes back must conform too.
			out, err := protojson.Marshal(msg)
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(instance(t, toModel(t, tt.md, string(out)))); err != nil {
				t.Fatalf("protojson output rejected by the schema: %v\n%s", err, out)
			}
		})
	}
}

// toModel rewrites protojson's enum names into the model names the schema
// offers, as the gateway does with results (schema.ResultToModel).
func toModel(t *testing.T, md protoreflect.MessageDescriptor, js string) string {
	t.Helper()
	v := &structpb.Value{}
	if err := protojson.Unmarshal([]byte(js), v); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	schema.ResultToModel(md, v)
	b, err := protojson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// validConstraints is a ConstraintsRequest in JSON that passes every rule.
const validConstraints = `{
	"name": "ok", "code": "ABC", "op": "add", "email": "a@example.com", "link": "https://x.y/z",
	"id": "123e4567-e89b-12d3-a456-426614174000", "count": 10, "ratio": 0.5, "big": "1000",
	"fixed": "v1", "notSeven": 8, "tags": ["a", "b"], "color": "red",
	"items": [{"name": "x", "quantity": 1}], "labels": {"ab": "xyz"}, "blob": "AAE=",
	"inner": {}, "wait": "60s", "limit": 99, "epoch": "0"}`

// patch returns validConstraints with key set to the JSON value (or removed when
// value is "").
func patch(t *testing.T, key, value string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(validConstraints), &m); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(m, key)
	} else {
		m[key] = json.RawMessage(value)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSchemaRejects shows that each feature of the schema constrains what a model
// may send: every case is a valid instance with one thing broken.
func TestSchemaRejects(t *testing.T) {
	t.Parallel()
	types := (&schematestv1.TypesRequest{}).ProtoReflect().Descriptor()
	cons := (&schematestv1.ConstraintsRequest{}).ProtoReflect().Descriptor()
	tests := []struct {
		name       string
		md         protoreflect.MessageDescriptor
		key, value string // for cons: one change to validConstraints
		json       string // for types: the whole instance
	}{
		{name: "unknown field", md: types, json: `{"nope": 1}`},
		{name: "int32 above range", md: types, json: `{"i32": 2147483648}`},
		{name: "uint32 negative", md: types, json: `{"u32": -1}`},
		{name: "int64 not a number string", md: types, json: `{"i64": "12a"}`},
		{name: "uint64 negative string", md: types, json: `{"u64": "-1"}`},
		{name: "double as text", md: types, json: `{"d": "x"}`},
		{name: "enum unknown name", md: types, json: `{"color": "BLUE"}`},
		{name: "nested unknown field", md: types, json: `{"inner": {"x": 1}}`},
		{name: "recursive unknown field", md: types, json: `{"tree": {"children": [{"nope": true}]}}`},
		{name: "repeated not array", md: types, json: `{"tags": "a"}`},
		{name: "map value type", md: types, json: `{"counts": {"a": "b"}}`},
		{name: "map int key", md: types, json: `{"byId": {"x": {}}}`},
		{name: "two oneof members", md: types, json: `{"url": "u", "targetId": 1}`},
		{name: "timestamp format", md: types, json: `{"at": "yesterday"}`},
		{name: "duration format", md: types, json: `{"wait": "5m"}`},
		{name: "struct not object", md: types, json: `{"meta": [1]}`},
		{name: "empty not empty", md: types, json: `{"nothing": {"a": 1}}`},
		{name: "any without type", md: types, json: `{"extra": {}}`},
		{name: "wrapper type", md: types, json: `{"maybeNumber": "one"}`},
		{name: "bytes not a string", md: types, json: `{"data": 5}`},
		{name: "required missing", md: cons, key: "name"},
		{name: "required message missing", md: cons, key: "inner"},
		{name: "zero value fails its rule", md: cons, key: "code"},
		{name: "min_len", md: cons, key: "name", value: `"x"`},
		{name: "max_len", md: cons, key: "name", value: `"abcdefghijk"`},
		{name: "pattern", md: cons, key: "code", value: `"abc"`},
		{name: "in", md: cons, key: "op", value: `"mul"`},
		{name: "email", md: cons, key: "email", value: `"nope"`},
		{name: "uri", md: cons, key: "link", value: `"not a uri"`},
		{name: "uuid", md: cons, key: "id", value: `"123"`},
		{name: "gte", md: cons, key: "count", value: `0`},
		{name: "lte", md: cons, key: "count", value: `11`},
		{name: "gt", md: cons, key: "ratio", value: `0`},
		{name: "lt", md: cons, key: "ratio", value: `1`},
		{name: "uint64 lte", md: cons, key: "big", value: `1001`},
		{name: "const", md: cons, key: "fixed", value: `"v2"`},
		{name: "not_in", md: cons, key: "notSeven", value: `7`},
		{name: "min_items", md: cons, key: "tags", value: `[]`},
		{name: "max_items", md: cons, key: "tags", value: `["a", "b", "c", "d"]`},
		{name: "unique", md: cons, key: "tags", value: `["a", "a"]`},
		{name: "item rule", md: cons, key: "tags", value: `["toolong"]`},
		{name: "nested item rule", md: cons, key: "items", value: `[{"name": ""}]`},
		{name: "max_pairs", md: cons, key: "labels", value: `{"aa": "1", "bb": "2", "cc": "3"}`},
		{name: "map key rule", md: cons, key: "labels", value: `{"a": "1"}`},
		{name: "map value rule", md: cons, key: "labels", value: `{"aa": "1234"}`},
		{name: "optional lt", md: cons, key: "limit", value: `100`},
		{name: "int64 gte", md: cons, key: "epoch", value: `-1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := schema.For(tt.md)
			if err != nil {
				t.Fatal(err)
			}
			sch := compile(t, s)
			js := tt.json
			if tt.md == cons {
				if err := sch.Validate(instance(t, validConstraints)); err != nil {
					t.Fatalf("control instance rejected: %v", err)
				}
				js = patch(t, tt.key, tt.value)
			}
			if err := sch.Validate(instance(t, js)); err == nil {
				t.Fatalf("schema accepted %s", js)
			}
		})
	}
}
