package tool_test

import (
	"encoding/json"
	"maps"
	"testing"

	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	calculatorv1 "github.com/toolfleet/toolfleet/gen/tools/calculator/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// validInput is a ConstraintsRequest in JSON that passes every rule.
const validInput = `{
	"name": "ok", "code": "ABC", "op": "add", "email": "a@example.com", "link": "https://x.y/z",
	"id": "123e4567-e89b-12d3-a456-426614174000", "count": 10, "ratio": 0.5, "big": "1000",
	"fixed": "v1", "notSeven": 8, "tags": ["a", "b"], "color": "COLOR_RED",
	"items": [{"name": "x", "quantity": 1}], "labels": {"ab": "xyz"}, "blob": "AAE=",
	"inner": {}, "wait": "60s", "limit": 99, "epoch": "0"}`

// with returns validInput with key set to the JSON value, or removed for "".
func with(t *testing.T, kv ...string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(validInput), &m); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(m, kv[i])
		} else {
			m[kv[i]] = json.RawMessage(kv[i+1])
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var constraintsMD = (&schematestv1.ConstraintsRequest{}).ProtoReflect().Descriptor()

func TestDecodeInputValid(t *testing.T) {
	t.Parallel()
	msg, ve, err := tool.DecodeInput(constraintsMD, []byte(validInput))
	if err != nil || ve != nil {
		t.Fatalf("DecodeInput: %v, %v", err, ve)
	}
	got, ok := msg.(*schematestv1.ConstraintsRequest)
	if !ok {
		t.Fatalf("linked type expected, got %T", msg)
	}
	if got.GetName() != "ok" || got.GetBig() != 1000 || got.GetItems()[0].GetQuantity() != 1 || got.GetLimit() != 99 {
		t.Fatalf("decoded %v", got)
	}
}

// TestDecodeInputParameterErrors shows the exact parameter_errors for each kind of
// type error and each kind of protovalidate rule.
func TestDecodeInputParameterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		input []byte
		want  map[string]string
	}{
		// Strict decoding.
		{"not JSON", []byte(`{"name": `), map[string]string{"$": "is not valid JSON: unexpected EOF"}},
		{"not an object", []byte(`[1]`), map[string]string{"$": "must be an object"}},
		{"unknown field", with(t, "nmae", `"x"`), map[string]string{"nmae": "is not a known field; known fields: name, code, op, email, link, id, count, ratio, big, fixed, notSeven, tags, color, items, labels, blob, inner, wait, limit, epoch"}},
		{"string expected", with(t, "name", `5`), map[string]string{"name": "must be a string"}},
		{"number expected", with(t, "ratio", `"half"`), map[string]string{"ratio": "must be a number"}},
		{"integer expected", with(t, "count", `1.5`), map[string]string{"count": "must be an integer between -2147483648 and 2147483647"}},
		{"int32 range", with(t, "limit", `3000000000`), map[string]string{"limit": "must be an integer between -2147483648 and 2147483647"}},
		{"uint64 negative", with(t, "big", `"-1"`), map[string]string{"big": "must be an integer between 0 and 18446744073709551615"}},
		{"enum name", with(t, "color", `"BLUE"`), map[string]string{"color": "must be one of: red, green"}},
		{"array expected", with(t, "tags", `"a"`), map[string]string{"tags": "must be an array"}},
		{"array element", with(t, "tags", `["a", 2]`), map[string]string{"tags[1]": "must be a string"}},
		{"nested element", with(t, "items", `[{"name": "x", "quantity": 1}, {"name": 3}]`), map[string]string{"items[1].name": "must be a string"}},
		{"map value", with(t, "labels", `{"ab": 1}`), map[string]string{`labels["ab"]`: "must be a string"}},
		{"bytes", with(t, "blob", `"%%%"`), map[string]string{"blob": "must be a base64-encoded string"}},
		{"duration", with(t, "wait", `"5m"`), map[string]string{"wait": `must be a duration in seconds such as "1.5s"`}},
		{"several at once", with(t, "name", `1`, "count", `"x"`), map[string]string{"name": "must be a string", "count": "must be an integer between -2147483648 and 2147483647"}},
		// protovalidate rules.
		{"required", with(t, "name", ""), map[string]string{"name": "is required"}},
		{"required message", with(t, "inner", ""), map[string]string{"inner": "is required"}},
		{"min_len", with(t, "name", `"x"`), map[string]string{"name": "must be at least 2 characters"}},
		{"max_len", with(t, "name", `"abcdefghijk"`), map[string]string{"name": "must be at most 10 characters"}},
		{"pattern", with(t, "code", `"abc"`), map[string]string{"code": "must match the pattern ^[A-Z]{3}$"}},
		{"in", with(t, "op", `"mul"`), map[string]string{"op": "must be one of: add, sub"}},
		{"not_in", with(t, "notSeven", `7`), map[string]string{"notSeven": "must not be one of: 7"}},
		{"const", with(t, "fixed", `"v2"`), map[string]string{"fixed": "must be exactly v1"}},
		{"email", with(t, "email", `"nope"`), map[string]string{"email": "must be a valid email address"}},
		{"uri", with(t, "link", `"nope"`), map[string]string{"link": "must be a valid absolute URI"}},
		{"uuid", with(t, "id", `"123"`), map[string]string{"id": "must be a valid UUID"}},
		{"gte lte", with(t, "count", `0`), map[string]string{"count": "must be greater than or equal to 1 and less than or equal to 10"}},
		{"gt lt", with(t, "ratio", `1`), map[string]string{"ratio": "must be greater than 0 and less than 1"}},
		{"lte", with(t, "big", `1001`), map[string]string{"big": "must be less than or equal to 1000"}},
		{"lt on optional", with(t, "limit", `100`), map[string]string{"limit": "must be less than 100"}},
		{"gte int64", with(t, "epoch", `-1`), map[string]string{"epoch": "must be greater than or equal to 0"}},
		{"min_items", with(t, "tags", `[]`), map[string]string{"tags": "must have at least 1 item"}},
		{"max_items", with(t, "tags", `["a","b","c","d"]`), map[string]string{"tags": "must have at most 3 items"}},
		{"unique", with(t, "tags", `["a","a"]`), map[string]string{"tags": "must not contain duplicate items"}},
		{"item rule", with(t, "tags", `["a","toolong"]`), map[string]string{"tags[1]": "must be at most 5 characters"}},
		{"nested rule", with(t, "items", `[{"name": "x", "quantity": 1}, {"name": "", "quantity": 0}]`), map[string]string{
			"items[1].name": "must be at least 1 character", "items[1].quantity": "must be greater than 0"}},
		{"enum defined_only", with(t, "color", `9`), map[string]string{"color": "must be one of: red, green"}},
		{"map max_pairs", with(t, "labels", `{"aa":"1","bb":"2","cc":"3"}`), map[string]string{"labels": "must have at most 2 entries"}},
		{"map key rule", with(t, "labels", `{"a":"1"}`), map[string]string{`labels["a"]`: "must be at least 2 characters"}},
		{"map value rule", with(t, "labels", `{"aa":"1234"}`), map[string]string{`labels["aa"]`: "must be at most 3 characters"}},
		{"bytes max_len", with(t, "blob", `"AAECAwQ="`), map[string]string{"blob": "must be at most 4 bytes"}},
		{"duration lte", with(t, "wait", `"61s"`), map[string]string{"wait": "must be less than or equal to 60s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, ve, err := tool.DecodeInput(constraintsMD, tt.input)
			if err != nil {
				t.Fatalf("DecodeInput: %v", err)
			}
			if ve == nil {
				t.Fatalf("accepted %s as %v", tt.input, msg)
			}
			if msg != nil {
				t.Fatal("a message came back with a validation error")
			}
			if !maps.Equal(ve.GetParameterErrors(), tt.want) {
				t.Fatalf("parameter_errors:\n got %q\nwant %q", ve.GetParameterErrors(), tt.want)
			}
			if ve.GetMessage() == "" {
				t.Fatal("empty message")
			}
		})
	}
}

func TestDecodeInputTypes(t *testing.T) {
	t.Parallel()
	md := (&schematestv1.TypesRequest{}).ProtoReflect().Descriptor()
	tests := []struct {
		name  string
		input string
		want  map[string]string // nil = accepted
	}{
		{"every kind", `{"d": "NaN", "f": 1, "i64": "-5", "u64": 5, "fx64": "5", "b": true, "data": "aGk",
			"nick_name": "proto names work too", "color": 1, "tree": {"children": [{"name": "x"}]},
			"counts": {"a": 1}, "byId": {"-3": {}}, "url": "u", "at": "2024-05-01T12:00:00.5+02:00",
			"meta": {"a": [1]}, "anyValue": null, "list": [1, "a"], "maybeNumber": 1, "maybeBig": "3",
			"nothing": {}, "mask": "a,b", "extra": {"@type": "type.googleapis.com/google.protobuf.Empty", "value": {}}}`, nil},
		{"null is unset", `{"inner": null, "s": null, "tags": null}`, nil},
		{"empty input", ``, nil},
		{"bool", `{"b": "true"}`, map[string]string{"b": "must be a boolean (true or false)"}},
		{"two oneof members", `{"url": "u", "targetId": 1}`, map[string]string{"targetId": "cannot be set together with url (only one of: url, targetId)"}},
		{"map int key", `{"byId": {"x": {}}}`, map[string]string{`byId["x"]`: "key must be an integer between -9223372036854775808 and 9223372036854775807"}},
		{"timestamp", `{"at": "yesterday"}`, map[string]string{"at": `must be an RFC 3339 timestamp such as "2024-05-01T12:00:00Z"`}},
		{"struct", `{"meta": 1}`, map[string]string{"meta": "must be an object"}},
		{"list value", `{"list": {}}`, map[string]string{"list": "must be an array"}},
		{"empty", `{"nothing": {"a": 1}}`, map[string]string{"nothing": "must be an empty object"}},
		{"any", `{"extra": {}}`, map[string]string{"extra.@type": `is required (a type URL such as "type.googleapis.com/pkg.Message")`}},
		{"wrapper", `{"maybeFlag": 1}`, map[string]string{"maybeFlag": "must be a boolean (true or false)"}},
		{"recursive", `{"tree": {"children": [{"children": [{"oops": 1}]}]}}`, map[string]string{"tree.children[0].children[0].oops": "is not a known field; known fields: name, children"}},
		{"null in list", `{"tags": [null]}`, map[string]string{"tags[0]": "must not be null"}},
		{"float32 range", `{"f": 1e39}`, map[string]string{"f": "must be a number between -3.4028234663852886e+38 and 3.4028234663852886e+38"}},
		{"trailing data", `{} {}`, map[string]string{"$": "must be a single JSON object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, ve, err := tool.DecodeInput(md, []byte(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if ve != nil || msg == nil {
					t.Fatalf("rejected: %v", ve)
				}
				return
			}
			if ve == nil || !maps.Equal(ve.GetParameterErrors(), tt.want) {
				t.Fatalf("parameter_errors:\n got %q\nwant %q", ve.GetParameterErrors(), tt.want)
			}
		})
	}
}

// TestDecodeInputDynamic decodes against a descriptor that is not linked, as the
// gateway does with contracts loaded by reflection.
func TestDecodeInputDynamic(t *testing.T) {
	t.Parallel()
	// A fresh descriptor of the same file: equal in content, but not the linked one.
	fdp := protodesc.ToFileDescriptorProto(schematestv1.File_tools_schematest_v1_schematest_proto)
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("ConstraintsRequest")
	msg, ve, err := tool.DecodeInput(md, with(t, "name", `"x"`, "tags", `["a", "a"]`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"name": "must be at least 2 characters", "tags": "must not contain duplicate items"}
	if ve == nil || !maps.Equal(ve.GetParameterErrors(), want) {
		t.Fatalf("parameter_errors = %v (message %v), want %v", ve.GetParameterErrors(), msg, want)
	}
	msg, ve, err = tool.DecodeInputStruct(md, mustStruct(t, validInput))
	if err != nil || ve != nil {
		t.Fatalf("valid input: %v %v", err, ve)
	}
	if _, ok := msg.(*dynamicpb.Message); !ok {
		t.Fatalf("got %T, want a dynamic message", msg)
	}
	if got := msg.ProtoReflect().Get(md.Fields().ByName("name")).String(); got != "ok" {
		t.Fatalf("name = %q", got)
	}
}

func mustStruct(t *testing.T, js string) *structpb.Struct {
	t.Helper()
	var s structpb.Struct
	if err := s.UnmarshalJSON([]byte(js)); err != nil {
		t.Fatal(err)
	}
	return &s
}

// TestDecodeInputRequired: a field marked (toolfleet.v1.field).required must be
// named, and its zero value is fine (Calculator.Add's operands).
func TestDecodeInputRequired(t *testing.T) {
	t.Parallel()
	md := (&calculatorv1.AddRequest{}).ProtoReflect().Descriptor()
	tests := []struct {
		name  string
		input string
		want  map[string]string // nil = accepted
	}{
		{"both", `{"a": 2, "b": 3}`, nil},
		{"zero values", `{"a": 0, "b": 0}`, nil},
		{"proto names", `{"a": 1, "b": -1}`, nil},
		{"b missing", `{"a": 2}`, map[string]string{"b": "is required"}},
		{"b null", `{"a": 2, "b": null}`, map[string]string{"b": "is required"}},
		{"both missing", `{}`, map[string]string{"a": "is required", "b": "is required"}},
		{"empty input", ``, map[string]string{"a": "is required", "b": "is required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, ve, err := tool.DecodeInput(md, []byte(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if ve != nil || msg == nil {
					t.Fatalf("rejected: %v", ve)
				}
				return
			}
			if ve == nil || !maps.Equal(ve.GetParameterErrors(), tt.want) {
				t.Fatalf("parameter_errors:\n got %q\nwant %q", ve.GetParameterErrors(), tt.want)
			}
		})
	}
}
