// Package schema derives JSON Schema (draft 2020-12) from protobuf message
// descriptors, describing messages exactly as protojson encodes them.
//
// The schema of a tool's input is what a model sees, so it carries everything the
// contract knows: JSON (lowerCamelCase) field names, scalar bounds, enum names,
// nested and recursive messages ($defs/$ref), repeated fields, maps, oneofs,
// well-known types, protovalidate rules (required, numeric bounds, lengths,
// patterns, in/not_in, const, formats, item counts) and the descriptions and
// examples of the toolfleet.v1.field option.
//
// Provider-specific variants (OpenAI strict, Anthropic, Gemini) are transforms of
// this schema and live in sdk/llm.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Draft is the $schema of every schema this package emits.
const Draft = "https://json-schema.org/draft/2020-12/schema"

// DurationNote ends the description of every google.protobuf.Duration field:
// its JSON form names the unit.
const DurationNote = `duration in seconds with an "s" suffix, e.g. "1.5s"`

// ErrContract is wrapped by errors caused by a contract this package cannot
// describe, e.g. an example that is not JSON or rules that do not parse.
var ErrContract = errors.New("schema: unusable contract")

// For returns the JSON Schema of md's protojson form: an object schema with
// "$schema", and "$defs" when recursive messages occur. The result only holds
// JSON-compatible values (map[string]any, []any, string, bool, int64, uint64,
// float64), so it can be marshalled or turned into a structpb.Struct.
func For(md protoreflect.MessageDescriptor) (map[string]any, error) {
	g := &generator{defs: map[string]any{}, recursive: map[protoreflect.FullName]bool{}}
	var s map[string]any
	if isWellKnown(md.FullName()) {
		s = g.wellKnown(md)
	} else {
		s = g.object(md)
	}
	if g.err != nil {
		return nil, g.err
	}
	s["$schema"] = Draft
	if len(g.defs) > 0 {
		s["$defs"] = g.defs
	}
	return s, nil
}

// MarshalIndent renders a schema as indented JSON with sorted keys (golden files).
func MarshalIndent(s map[string]any) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("schema: marshal: %w", err)
	}
	return append(b, '\n'), nil
}

type generator struct {
	defs      map[string]any
	recursive map[protoreflect.FullName]bool
	err       error
}

func (g *generator) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// message returns the schema of a message-typed value: a well-known type's JSON
// form, a $ref for recursive messages, otherwise the object inline.
func (g *generator) message(md protoreflect.MessageDescriptor) map[string]any {
	if isWellKnown(md.FullName()) {
		return g.wellKnown(md)
	}
	if !g.isRecursive(md) {
		return g.object(md)
	}
	name := string(md.FullName())
	if _, done := g.defs[name]; !done {
		g.defs[name] = map[string]any{} // placeholder that stops the recursion
		g.defs[name] = g.object(md)
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// isRecursive reports whether md can contain itself.
func (g *generator) isRecursive(md protoreflect.MessageDescriptor) bool {
	if r, ok := g.recursive[md.FullName()]; ok {
		return r
	}
	seen := map[protoreflect.FullName]bool{}
	var reaches func(m protoreflect.MessageDescriptor) bool
	reaches = func(m protoreflect.MessageDescriptor) bool {
		fs := m.Fields()
		for i := range fs.Len() {
			fd := fs.Get(i)
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			sub := fd.Message()
			if sub == nil || isWellKnown(sub.FullName()) {
				continue
			}
			if sub.FullName() == md.FullName() {
				return true
			}
			if !seen[sub.FullName()] {
				seen[sub.FullName()] = true
				if reaches(sub) {
					return true
				}
			}
		}
		return false
	}
	r := reaches(md)
	g.recursive[md.FullName()] = r
	return r
}

func (g *generator) object(md protoreflect.MessageDescriptor) map[string]any {
	props := map[string]any{}
	var required []any
	zeroFails := zeroValueFailures(md)
	fs := md.Fields()
	for i := range fs.Len() {
		fd := fs.Get(i)
		rules, err := protovalidate.ResolveFieldRules(fd)
		if err != nil {
			g.fail(fmt.Errorf("%w: rules of %s: %w", ErrContract, fd.FullName(), err))
			continue
		}
		props[fd.JSONName()] = g.field(fd, rules)
		if rules.GetRequired() || zeroFails[fd.Number()] || fieldOptions(fd).GetRequired() {
			required = append(required, fd.JSONName())
		}
	}
	s := map[string]any{
		"type":                 "object",
		"properties":           props,
		"additionalProperties": false,
	}
	if d := comment(md.ParentFile().SourceLocations().ByDescriptor(md)); d != "" {
		s["description"] = d
	}
	if len(required) > 0 {
		s["required"] = required
	}
	var oneofs []any
	ods := md.Oneofs()
	for i := range ods.Len() {
		od := ods.Get(i)
		if od.IsSynthetic() {
			continue
		}
		rules, err := protovalidate.ResolveOneofRules(od)
		if err != nil {
			g.fail(fmt.Errorf("%w: rules of %s: %w", ErrContract, od.FullName(), err))
			continue
		}
		oneofs = append(oneofs, oneofSchema(od, rules.GetRequired()))
	}
	switch len(oneofs) {
	case 0:
	case 1:
		s["oneOf"] = oneofs[0].(map[string]any)["oneOf"]
	default:
		s["allOf"] = oneofs
	}
	return s
}

// oneofSchema allows at most one member (exactly one when required): exactly one
// branch of the oneOf must hold, and "none set" is a branch of its own.
func oneofSchema(od protoreflect.OneofDescriptor, required bool) map[string]any {
	var branches, anyOf []any
	fs := od.Fields()
	for i := range fs.Len() {
		r := map[string]any{"required": []any{fs.Get(i).JSONName()}}
		branches = append(branches, r)
		anyOf = append(anyOf, map[string]any{"required": []any{fs.Get(i).JSONName()}})
	}
	if !required {
		branches = append(branches, map[string]any{"not": map[string]any{"anyOf": anyOf}})
	}
	return map[string]any{"oneOf": branches}
}

// field returns the schema of one field, with its documentation and rules.
func (g *generator) field(fd protoreflect.FieldDescriptor, rules *validate.FieldRules) map[string]any {
	var s map[string]any
	switch {
	case fd.IsMap():
		s = g.mapField(fd, rules.GetMap())
	case fd.IsList():
		items := g.single(fd)
		applyRules(items, fd, rules.GetRepeated().GetItems())
		s = map[string]any{"type": "array", "items": items}
		if r := rules.GetRepeated(); r != nil {
			if r.HasMinItems() {
				s["minItems"] = r.GetMinItems()
			}
			if r.HasMaxItems() {
				s["maxItems"] = r.GetMaxItems()
			}
			if r.GetUnique() {
				s["uniqueItems"] = true
			}
		}
	default:
		s = g.single(fd)
		applyRules(s, fd, rules)
	}
	opts := fieldOptions(fd)
	desc := opts.GetDescription()
	if desc == "" {
		desc = comment(fd.ParentFile().SourceLocations().ByDescriptor(fd))
	}
	if fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Duration" && !fd.IsMap() {
		// The unit, which the pattern alone leaves for a model to guess.
		if desc == "" {
			desc = "A " + DurationNote + "."
		} else {
			desc += " (" + DurationNote + ")"
		}
	}
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		var others []string
		for i := range od.Fields().Len() {
			others = append(others, od.Fields().Get(i).JSONName())
		}
		desc = strings.TrimSpace(desc + " (Set at most one of: " + strings.Join(others, ", ") + ".)")
	}
	if desc != "" {
		s = withDescription(s, desc)
	}
	if ex := opts.GetExamples(); len(ex) > 0 {
		var examples []any
		for _, e := range ex {
			var v any
			if err := json.Unmarshal([]byte(e), &v); err != nil {
				g.fail(fmt.Errorf("%w: example %q of %s is not JSON: %w", ErrContract, e, fd.FullName(), err))
				continue
			}
			examples = append(examples, v)
		}
		s["examples"] = examples
	}
	if o, ok := fd.Options().(*descriptorpb.FieldOptions); ok && o.GetDeprecated() {
		s["deprecated"] = true
	}
	return s
}

// withDescription adds a description; a bare $ref gets it beside the $ref, which
// 2020-12 allows.
func withDescription(s map[string]any, desc string) map[string]any {
	s["description"] = desc
	return s
}

func (g *generator) mapField(fd protoreflect.FieldDescriptor, rules *validate.MapRules) map[string]any {
	val := g.single(fd.MapValue())
	applyRules(val, fd.MapValue(), rules.GetValues())
	s := map[string]any{"type": "object", "additionalProperties": val}
	keys := map[string]any{}
	switch fd.MapKey().Kind() {
	case protoreflect.StringKind:
		keys = map[string]any{"type": "string"}
		applyRules(keys, fd.MapKey(), rules.GetKeys())
		delete(keys, "type")
	case protoreflect.BoolKind:
		keys["enum"] = []any{"true", "false"}
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		keys["pattern"] = `^[0-9]+$`
	default:
		keys["pattern"] = `^-?[0-9]+$`
	}
	if len(keys) > 0 {
		s["propertyNames"] = keys
	}
	if rules != nil {
		if rules.HasMinPairs() {
			s["minProperties"] = rules.GetMinPairs()
		}
		if rules.HasMaxPairs() {
			s["maxProperties"] = rules.GetMaxPairs()
		}
	}
	return s
}

// single returns the schema of one value of fd's type (an element for lists).
func (g *generator) single(fd protoreflect.FieldDescriptor) map[string]any {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return map[string]any{"type": "boolean"}
	case protoreflect.StringKind:
		return map[string]any{"type": "string"}
	case protoreflect.BytesKind:
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return map[string]any{"type": "number"}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return map[string]any{"type": "integer", "minimum": int64(math.MinInt32), "maximum": int64(math.MaxInt32)}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return map[string]any{"type": "integer", "minimum": int64(0), "maximum": int64(math.MaxUint32)}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		// protojson writes 64-bit integers as strings and reads numbers or
		// strings. No "format": "uint64" is no format JSON Schema or OpenAPI
		// knows (MCP clients' Ajv warns "unknown format" on every listing) and
		// "int64" only OpenAPI's; the pattern and the range say it all.
		return map[string]any{"type": []any{"integer", "string"}, "pattern": `^-?[0-9]+$`}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return map[string]any{"type": []any{"integer", "string"}, "pattern": `^[0-9]+$`, "minimum": int64(0)}
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return map[string]any{"type": "null"}
		}
		e, err := Enum(fd.Enum())
		if err != nil {
			g.fail(err)
			return map[string]any{"type": "string"}
		}
		return map[string]any{"type": "string", "enum": strs(e.Names())}
	default:
		return g.message(fd.Message())
	}
}

var wrappers = map[protoreflect.FullName]bool{
	"google.protobuf.DoubleValue": true, "google.protobuf.FloatValue": true,
	"google.protobuf.Int64Value": true, "google.protobuf.UInt64Value": true,
	"google.protobuf.Int32Value": true, "google.protobuf.UInt32Value": true,
	"google.protobuf.BoolValue": true, "google.protobuf.StringValue": true,
	"google.protobuf.BytesValue": true,
}

func isWellKnown(n protoreflect.FullName) bool {
	switch n {
	case "google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.Struct",
		"google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Empty",
		"google.protobuf.FieldMask", "google.protobuf.Any":
		return true
	}
	return wrappers[n]
}

// wellKnown returns the JSON form of a well-known type as protojson writes it.
func (g *generator) wellKnown(md protoreflect.MessageDescriptor) map[string]any {
	switch n := md.FullName(); {
	case n == "google.protobuf.Timestamp":
		return map[string]any{"type": "string", "format": "date-time"}
	case n == "google.protobuf.Duration":
		return map[string]any{"type": "string", "pattern": `^-?[0-9]+(\.[0-9]{1,9})?s$`}
	case n == "google.protobuf.Struct":
		return map[string]any{"type": "object"}
	case n == "google.protobuf.ListValue":
		return map[string]any{"type": "array"}
	case n == "google.protobuf.Empty":
		return map[string]any{"type": "object", "additionalProperties": false}
	case n == "google.protobuf.FieldMask":
		return map[string]any{"type": "string"}
	case n == "google.protobuf.Any":
		return map[string]any{
			"type":       "object",
			"properties": map[string]any{"@type": map[string]any{"type": "string"}},
			"required":   []any{"@type"},
		}
	case wrappers[n]:
		return g.single(md.Fields().ByName("value"))
	default: // google.protobuf.Value: any JSON value
		return map[string]any{}
	}
}

// FieldOptions returns a field's (toolfleet.v1.field) options; empty ones when
// it has none.
func FieldOptions(fd protoreflect.FieldDescriptor) *toolfleetv1.FieldOptions { return fieldOptions(fd) }

// requiredCache bounds the memo of RequiredFields: contracts loaded by
// reflection make new descriptors on every reload.
const requiredCache = 4096

var (
	requiredMu     sync.Mutex
	requiredFields = map[protoreflect.MessageDescriptor][]protoreflect.FieldDescriptor{}
)

// RequiredFields returns md's fields marked (toolfleet.v1.field).required: an
// input object must name them, even with their zero value.
func RequiredFields(md protoreflect.MessageDescriptor) []protoreflect.FieldDescriptor {
	requiredMu.Lock()
	defer requiredMu.Unlock()
	if fds, ok := requiredFields[md]; ok {
		return fds
	}
	var fds []protoreflect.FieldDescriptor
	fs := md.Fields()
	for i := range fs.Len() {
		if fieldOptions(fs.Get(i)).GetRequired() {
			fds = append(fds, fs.Get(i))
		}
	}
	if len(requiredFields) >= requiredCache {
		clear(requiredFields)
	}
	requiredFields[md] = fds
	return fds
}

func fieldOptions(fd protoreflect.FieldDescriptor) *toolfleetv1.FieldOptions {
	var out toolfleetv1.FieldOptions
	opts := fd.Options()
	if opts == nil || !opts.ProtoReflect().IsValid() {
		return &out
	}
	if proto.HasExtension(opts, toolfleetv1.E_Field) {
		if v, ok := proto.GetExtension(opts, toolfleetv1.E_Field).(proto.Message); ok {
			if b, err := proto.Marshal(v); err == nil {
				_ = proto.Unmarshal(b, &out)
			}
		}
		return &out
	}
	// Options of descriptors built at run time may hold the extension as unknown bytes.
	if b, err := proto.Marshal(opts); err == nil && len(b) > 0 {
		var fresh descriptorpb.FieldOptions
		if proto.Unmarshal(b, &fresh) == nil && proto.HasExtension(&fresh, toolfleetv1.E_Field) {
			if v, ok := proto.GetExtension(&fresh, toolfleetv1.E_Field).(*toolfleetv1.FieldOptions); ok {
				return v
			}
		}
	}
	return &out
}

var validator = sync.OnceValues(func() (protovalidate.Validator, error) { return protovalidate.New() })

// zeroValueFailures returns the fields whose rules reject their zero value, e.g. a
// proto3 string with a pattern. protovalidate checks fields without presence even
// when they are not sent, so for a model such fields are required.
func zeroValueFailures(md protoreflect.MessageDescriptor) map[protoreflect.FieldNumber]bool {
	v, err := validator()
	if err != nil {
		return nil
	}
	var verr *protovalidate.ValidationError
	if !errors.As(v.Validate(dynamicpb.NewMessage(md)), &verr) {
		return nil
	}
	out := map[protoreflect.FieldNumber]bool{}
	for _, viol := range verr.Violations {
		if els := viol.Proto.GetField().GetElements(); len(els) == 1 {
			out[protoreflect.FieldNumber(els[0].GetFieldNumber())] = true
		}
	}
	return out
}

func comment(loc protoreflect.SourceLocation) string {
	return strings.TrimSpace(loc.LeadingComments)
}
