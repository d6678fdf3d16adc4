package tool

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/schema"
)

// RootPath is the parameter_errors key of an error about the input as a whole.
const RootPath = "$"

// ErrValidatorSetup is wrapped by errors that come from the contract rather than the
// input, e.g. a protovalidate rule that does not compile.
var ErrValidatorSetup = errors.New("tool: validation rules unusable")

var sharedValidator = sync.OnceValues(func() (protovalidate.Validator, error) { return protovalidate.New() })

// DecodeInput decodes a tool's JSON input strictly into a new message of type md
// (unknown fields rejected, types checked) and then validates it with protovalidate.
//
// It returns exactly one of: the message; a ValidationError whose parameter_errors
// map JSON field paths (e.g. "items[2].name") to messages a model can act on; or an
// error wrapping [ErrValidatorSetup] when the contract itself is at fault. The
// message is a concrete Go type when md's type is linked into the binary and a
// dynamicpb message otherwise.
func DecodeInput(md protoreflect.MessageDescriptor, input []byte) (proto.Message, *toolfleetv1.ValidationError, error) {
	if len(strings.TrimSpace(string(input))) == 0 {
		input = []byte("{}")
	}
	renamed, errs := checkJSON(md, input)
	if len(errs) > 0 {
		return nil, newValidationError(errs), nil
	}
	if renamed != nil {
		input = renamed
	}
	msg := newMessage(md)
	if err := (protojson.UnmarshalOptions{}).Unmarshal(input, msg); err != nil {
		// checkJSON covers what protojson checks; this is a safety net.
		return nil, newValidationError(map[string]string{RootPath: cleanProtojsonError(err)}), nil
	}
	v, err := sharedValidator()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrValidatorSetup, err)
	}
	ve, err := validateMessage(v, msg)
	if err != nil {
		return nil, nil, err
	}
	if ve != nil {
		return nil, ve, nil
	}
	return msg, nil, nil
}

// DecodeInputStruct is [DecodeInput] for input already held as a Struct (as in
// toolfleetv1.CallToolRequest). A nil input is the empty object.
func DecodeInputStruct(md protoreflect.MessageDescriptor, input *structpb.Struct) (proto.Message, *toolfleetv1.ValidationError, error) {
	if input == nil {
		return DecodeInput(md, nil)
	}
	b, err := protojson.Marshal(input)
	if err != nil {
		return nil, nil, fmt.Errorf("tool: encode input: %w", err)
	}
	return DecodeInput(md, b)
}

// ValidateMessage runs protovalidate on msg and converts violations into a
// ValidationError (nil when msg is valid).
func ValidateMessage(msg proto.Message) (*toolfleetv1.ValidationError, error) {
	v, err := sharedValidator()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrValidatorSetup, err)
	}
	return validateMessage(v, msg)
}

func newMessage(md protoreflect.MessageDescriptor) proto.Message {
	// Use the linked Go type only when it is the very same descriptor: a contract
	// fetched by reflection may differ from what this binary was built with.
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil && mt.Descriptor() == md {
		return mt.New().Interface()
	}
	return dynamicpb.NewMessage(md)
}

func validateMessage(v protovalidate.Validator, msg proto.Message) (*toolfleetv1.ValidationError, error) {
	err := v.Validate(msg)
	if err == nil {
		return nil, nil
	}
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) {
		return nil, fmt.Errorf("%w: %w", ErrValidatorSetup, err)
	}
	errs := make(map[string]string, len(verr.Violations))
	for _, viol := range verr.Violations {
		path := jsonPath(msg.ProtoReflect().Descriptor(), viol.Proto.GetField())
		m := violationMessage(viol)
		if prev, ok := errs[path]; ok && prev != m {
			m = prev + "; " + m
		}
		errs[path] = m
	}
	return newValidationError(errs), nil
}

func newValidationError(errs map[string]string) *toolfleetv1.ValidationError {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+": "+errs[k])
	}
	return &toolfleetv1.ValidationError{
		Message:         "invalid input: " + strings.Join(parts, "; "),
		ParameterErrors: errs,
	}
}

// jsonPath renders a protovalidate field path with protojson names, e.g.
// "items[2].name" or "labels[\"env\"]".
func jsonPath(md protoreflect.MessageDescriptor, fp *validate.FieldPath) string {
	var b strings.Builder
	for _, el := range fp.GetElements() {
		var fd protoreflect.FieldDescriptor
		if md != nil {
			fd = md.Fields().ByNumber(protoreflect.FieldNumber(el.GetFieldNumber()))
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		switch {
		case fd != nil:
			b.WriteString(fd.JSONName())
		default: // e.g. a oneof name
			b.WriteString(lowerCamel(el.GetFieldName()))
		}
		switch {
		case el.HasIndex():
			fmt.Fprintf(&b, "[%d]", el.GetIndex())
		case el.HasStringKey():
			fmt.Fprintf(&b, "[%s]", strconv.Quote(el.GetStringKey()))
		case el.HasIntKey():
			fmt.Fprintf(&b, "[%d]", el.GetIntKey())
		case el.HasUintKey():
			fmt.Fprintf(&b, "[%d]", el.GetUintKey())
		case el.HasBoolKey():
			fmt.Fprintf(&b, "[%t]", el.GetBoolKey())
		}
		md = nil
		if fd != nil {
			switch {
			case fd.IsMap():
				md = fd.MapValue().Message()
			default:
				md = fd.Message()
			}
		}
	}
	if b.Len() == 0 {
		return RootPath
	}
	return b.String()
}

func lowerCamel(s string) string {
	var b strings.Builder
	up := false
	for i, r := range s {
		switch {
		case r == '_':
			up = i > 0
		case up && 'a' <= r && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
			up = false
		default:
			b.WriteRune(r)
			up = false
		}
	}
	return b.String()
}

// violationMessage phrases a violation for a model: short, with the limit.
func violationMessage(v *protovalidate.Violation) string {
	rule := ""
	if els := v.Proto.GetRule().GetElements(); len(els) > 0 {
		rule = els[len(els)-1].GetFieldName()
	}
	rv := v.RuleValue
	has := rv.IsValid()
	if unsetEnum(v) {
		// A proto3 enum left out reads as its zero value: say what to do, not
		// which hidden value it must not be.
		return "is required"
	}
	switch rule {
	case "required":
		return "is required"
	case "min_len", "min_bytes":
		if has {
			return fmt.Sprintf("must be at least %s", count(rv.Uint(), unit(rule, v.FieldDescriptor)))
		}
	case "max_len", "max_bytes":
		if has {
			return fmt.Sprintf("must be at most %s", count(rv.Uint(), unit(rule, v.FieldDescriptor)))
		}
	case "len", "len_bytes":
		if has {
			return fmt.Sprintf("must be exactly %s", count(rv.Uint(), unit(rule, v.FieldDescriptor)))
		}
	case "min_items":
		if has {
			return "must have at least " + count(rv.Uint(), "items")
		}
	case "max_items":
		if has {
			return "must have at most " + count(rv.Uint(), "items")
		}
	case "min_pairs":
		if has {
			return "must have at least " + count(rv.Uint(), "entries")
		}
	case "max_pairs":
		if has {
			return "must have at most " + count(rv.Uint(), "entries")
		}
	case "unique":
		return "must not contain duplicate items"
	case "pattern":
		if has {
			return "must match the pattern " + rv.String()
		}
	case "email":
		return "must be a valid email address"
	case "uri":
		return "must be a valid absolute URI"
	case "uuid":
		return "must be a valid UUID"
	case "hostname":
		return "must be a valid hostname"
	case "ip", "ipv4", "ipv6":
		return "must be a valid IP address"
	case "defined_only":
		if fd := v.FieldDescriptor; fd != nil && fd.Enum() != nil {
			if e, err := schema.Enum(fd.Enum()); err == nil {
				return "must be one of: " + strings.Join(e.Names(), ", ")
			}
		}
	case "in", "not_in":
		if has {
			vals := listValues(rv, v.FieldDescriptor)
			if rule == "in" {
				return "must be one of: " + strings.Join(vals, ", ")
			}
			return "must not be one of: " + strings.Join(vals, ", ")
		}
	case "const":
		if has {
			return "must be exactly " + scalarString(rv, v.FieldDescriptor)
		}
	}
	msg := v.Proto.GetMessage()
	msg = strings.TrimPrefix(msg, "value ")
	if msg == "" {
		msg = "is invalid (" + v.Proto.GetRuleId() + ")"
	}
	return msg
}

// unsetEnum reports a violation on a singular enum field without presence that
// holds its zero value, i.e. that the input left out (or set to the zero name).
func unsetEnum(v *protovalidate.Violation) bool {
	fd := v.FieldDescriptor
	if fd == nil || fd.Kind() != protoreflect.EnumKind || fd.IsList() || fd.IsMap() || fd.HasPresence() || !v.FieldValue.IsValid() {
		return false
	}
	if len(v.Proto.GetField().GetElements()) == 0 || v.Proto.GetForKey() {
		return false
	}
	n, ok := v.FieldValue.Interface().(protoreflect.EnumNumber)
	return ok && n == 0
}

// count renders n things: "1 character", "2 characters".
func count(n uint64, things string) string {
	if n == 1 {
		switch things {
		case "entries":
			things = "entry"
		default:
			things = strings.TrimSuffix(things, "s")
		}
	}
	return fmt.Sprintf("%d %s", n, things)
}

func unit(rule string, fd protoreflect.FieldDescriptor) string {
	if strings.HasSuffix(rule, "bytes") || fd != nil && fd.Kind() == protoreflect.BytesKind {
		return "bytes"
	}
	return "characters"
}

func listValues(rv protoreflect.Value, fd protoreflect.FieldDescriptor) []string {
	l, ok := rv.Interface().(protoreflect.List)
	if !ok {
		return []string{scalarString(rv, fd)}
	}
	out := make([]string, 0, l.Len())
	for i := range l.Len() {
		out = append(out, scalarString(l.Get(i), fd))
	}
	return out
}

// scalarString prints a rule value as the model would write it: enum values by
// their model names.
func scalarString(v protoreflect.Value, fd protoreflect.FieldDescriptor) string {
	if fd != nil && fd.Enum() != nil {
		if n, ok := v.Interface().(int32); ok {
			if e, err := schema.Enum(fd.Enum()); err == nil {
				if name := e.ModelName(protoreflect.EnumNumber(n)); name != "" {
					return name
				}
			}
		}
	}
	switch x := v.Interface().(type) {
	case []byte:
		return strconv.Quote(string(x))
	default:
		return fmt.Sprint(x)
	}
}

// cleanProtojsonError drops the library prefix from a protojson error.
func cleanProtojsonError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "proto:")
	s = strings.TrimSpace(strings.ReplaceAll(s, "\u00a0", " "))
	return s
}
