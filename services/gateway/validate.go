package gateway

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// validateInput applies the rules of the published JSON Schema (sdk/schema) that
// protojson is laxer about, before the input is decoded:
//
//   - a google.protobuf.Value with no kind set, NaN or ±Infinity has no JSON
//     form at all (protojson cannot even render it: it used to be an Internal
//     error);
//   - a number field (schema "number" or "integer") takes a JSON number, never
//     a string ("1", "NaN" and "Infinity" are protojson extensions); 64-bit
//     integers are published as integer or digit string, so their strings stay;
//   - an enum field takes one of its names, never its number.
//
// It returns nil when none of these rules is broken; everything else
// (unknown fields, ranges, protovalidate rules) is the decoder's.
func validateInput(md protoreflect.MessageDescriptor, input *structpb.Struct) *toolfleetv1.ValidationError {
	c := inputValidator{errs: map[string]string{}}
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		md = nil // a well-known input type: free-form JSON
	}
	c.object(md, input, "")
	if len(c.errs) == 0 {
		return nil
	}
	keys := make([]string, 0, len(c.errs))
	for k := range c.errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+": "+c.errs[k])
	}
	return &toolfleetv1.ValidationError{Message: "invalid input: " + strings.Join(parts, "; "), ParameterErrors: c.errs}
}

// maxInputErrors bounds the errors reported for one input.
const maxInputErrors = 20

type inputValidator struct{ errs map[string]string }

func (c *inputValidator) fail(path, msg string) {
	if path == "" {
		path = "input"
	}
	if len(c.errs) < maxInputErrors {
		c.errs[path] = msg
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// object checks the members of s as fields of md (nil md: free-form JSON).
func (c *inputValidator) object(md protoreflect.MessageDescriptor, s *structpb.Struct, path string) {
	for key, v := range s.GetFields() {
		p := join(path, key)
		var fd protoreflect.FieldDescriptor
		if md != nil {
			if fd = md.Fields().ByJSONName(key); fd == nil {
				fd = md.Fields().ByTextName(key)
			}
		}
		if fd == nil {
			c.value(nil, v, p) // unknown fields are the decoder's; only JSON-ness here
			continue
		}
		c.field(fd, v, p)
	}
}

// field checks v as the JSON of field fd.
func (c *inputValidator) field(fd protoreflect.FieldDescriptor, v *structpb.Value, path string) {
	switch {
	case fd.IsMap():
		if st, ok := v.GetKind().(*structpb.Value_StructValue); ok {
			for k, e := range st.StructValue.GetFields() {
				c.value(fd.MapValue(), e, path+"["+strconv.Quote(k)+"]")
			}
			return
		}
	case fd.IsList():
		if l, ok := v.GetKind().(*structpb.Value_ListValue); ok {
			for i, e := range l.ListValue.GetValues() {
				c.value(fd, e, fmt.Sprintf("%s[%d]", path, i))
			}
			return
		}
	}
	c.value(fd, v, path)
}

// value checks one value of field fd (nil: free-form JSON).
func (c *inputValidator) value(fd protoreflect.FieldDescriptor, v *structpb.Value, path string) {
	switch x := v.GetKind().(type) {
	case nil:
		c.fail(path, "has no value (an empty google.protobuf.Value); send a JSON value")
		return
	case *structpb.Value_NumberValue:
		if math.IsNaN(x.NumberValue) || math.IsInf(x.NumberValue, 0) {
			c.fail(path, "must be a finite number (JSON has no NaN or Infinity)")
			return
		}
		if fd != nil && fd.Kind() == protoreflect.EnumKind && fd.Enum().FullName() != "google.protobuf.NullValue" {
			c.fail(path, "must be one of the enum's names (a string), not a number")
		}
	case *structpb.Value_StringValue:
		if fd == nil {
			return
		}
		switch fd.Kind() {
		case protoreflect.DoubleKind, protoreflect.FloatKind, protoreflect.Int32Kind, protoreflect.Sint32Kind,
			protoreflect.Sfixed32Kind, protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			c.fail(path, "must be a number, not a string")
		}
	case *structpb.Value_StructValue:
		var md protoreflect.MessageDescriptor
		if fd != nil && fd.Kind() == protoreflect.MessageKind && !strings.HasPrefix(string(fd.Message().FullName()), "google.protobuf.") {
			md = fd.Message()
		}
		c.object(md, x.StructValue, path)
	case *structpb.Value_ListValue:
		for i, e := range x.ListValue.GetValues() {
			c.value(nil, e, fmt.Sprintf("%s[%d]", path, i))
		}
	}
}
