package schema

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// modelNameRe bounds an explicit (toolfleet.v1.model_name).
var modelNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// EnumValues is the model-facing view of an enum: the values offered to models,
// under their model names, and the way back. Build it with [Enum].
type EnumValues struct {
	// Offered lists the values a model may send, in declaration order. A zero
	// value named *_UNSPECIFIED without an explicit model name is not offered.
	Offered []protoreflect.EnumValueDescriptor
	names   map[protoreflect.EnumNumber]string // number -> model name (first value of an alias)
	byModel map[string]protoreflect.EnumValueDescriptor
	enum    protoreflect.EnumDescriptor
}

// ModelName returns the name models see for the value numbered n, or "" for
// a number the enum does not define.
func (e *EnumValues) ModelName(n protoreflect.EnumNumber) string { return e.names[n] }

// Names returns the model names of the offered values.
func (e *EnumValues) Names() []string {
	out := make([]string, 0, len(e.Offered))
	for _, v := range e.Offered {
		out = append(out, e.names[v.Number()])
	}
	return out
}

// Lookup finds the value an input names: its model name or, for compatibility,
// its proto name (PRIORITY_LOW). Both are case-sensitive; nil when neither.
func (e *EnumValues) Lookup(name string) protoreflect.EnumValueDescriptor {
	if v, ok := e.byModel[name]; ok {
		return v
	}
	return e.enum.Values().ByName(protoreflect.Name(name))
}

// enumCacheSize bounds the memo of Enum: contracts loaded by reflection make
// new descriptors on every reload.
const enumCacheSize = 4096

var (
	enumMu    sync.Mutex
	enumCache = map[protoreflect.EnumDescriptor]enumEntry{}
)

type enumEntry struct {
	vals *EnumValues
	err  error
}

// Enum returns the model-facing view of ed. It fails (wrapping [ErrContract])
// when two values share a model name, a model name is another value's proto
// name, or an explicit model name is not 1–64 characters of [A-Za-z0-9_.-].
//
// A value's model name is its (toolfleet.v1.model_name) option, or else its
// name without the enum's prefix (the enum's name in UPPER_SNAKE_CASE and "_",
// as the protobuf style guide asks), lower-cased: PRIORITY_LOW of enum Priority
// is "low", HTTP_METHOD_GET of HttpMethod is "get".
func Enum(ed protoreflect.EnumDescriptor) (*EnumValues, error) {
	enumMu.Lock()
	defer enumMu.Unlock()
	if e, ok := enumCache[ed]; ok {
		return e.vals, e.err
	}
	vals, err := buildEnum(ed)
	if len(enumCache) >= enumCacheSize {
		clear(enumCache)
	}
	enumCache[ed] = enumEntry{vals, err}
	return vals, err
}

func buildEnum(ed protoreflect.EnumDescriptor) (*EnumValues, error) {
	e := &EnumValues{
		names:   map[protoreflect.EnumNumber]string{},
		byModel: map[string]protoreflect.EnumValueDescriptor{},
		enum:    ed,
	}
	prefix := upperSnake(string(ed.Name())) + "_"
	vs := ed.Values()
	for i := range vs.Len() {
		v := vs.Get(i)
		name, explicit := explicitModelName(v)
		if explicit && !modelNameRe.MatchString(name) {
			return nil, fmt.Errorf("%w: (toolfleet.v1.model_name) %q of %s must be 1-64 characters of [A-Za-z0-9_.-]", ErrContract, name, v.FullName())
		}
		if !explicit {
			name = strings.ToLower(strings.TrimPrefix(string(v.Name()), prefix))
			if name == "" {
				name = strings.ToLower(string(v.Name()))
			}
		}
		if prev, ok := e.byModel[name]; ok {
			return nil, fmt.Errorf("%w: %s and %s are both shown to models as %q; set (toolfleet.v1.model_name) on one", ErrContract, prev.FullName(), v.FullName(), name)
		}
		if other := vs.ByName(protoreflect.Name(name)); other != nil && other.Number() != v.Number() {
			return nil, fmt.Errorf("%w: the model name %q of %s is the name of %s", ErrContract, name, v.FullName(), other.FullName())
		}
		e.byModel[name] = v
		if _, ok := e.names[v.Number()]; !ok {
			e.names[v.Number()] = name
		}
		if !explicit && v.Number() == 0 && strings.HasSuffix(strings.ToUpper(string(v.Name())), "UNSPECIFIED") {
			delete(e.byModel, name) // not offered, so not taken by its model name either
			continue
		}
		e.Offered = append(e.Offered, v)
	}
	return e, nil
}

// explicitModelName returns a value's (toolfleet.v1.model_name), also when the
// options of a descriptor built at run time hold it as unknown bytes.
func explicitModelName(v protoreflect.EnumValueDescriptor) (string, bool) {
	opts, ok := v.Options().(*descriptorpb.EnumValueOptions)
	if !ok || opts == nil {
		return "", false
	}
	if proto.HasExtension(opts, toolfleetv1.E_ModelName) {
		s, _ := proto.GetExtension(opts, toolfleetv1.E_ModelName).(string)
		return s, true
	}
	if len(opts.ProtoReflect().GetUnknown()) == 0 {
		return "", false
	}
	b, err := proto.Marshal(opts)
	if err != nil {
		return "", false
	}
	var fresh descriptorpb.EnumValueOptions
	if proto.Unmarshal(b, &fresh) != nil || !proto.HasExtension(&fresh, toolfleetv1.E_ModelName) {
		return "", false
	}
	s, _ := proto.GetExtension(&fresh, toolfleetv1.E_ModelName).(string)
	return s, true
}

// upperSnake turns an enum name into the prefix its values carry by convention:
// Priority → PRIORITY, HttpMethod → HTTP_METHOD, HTTPMethod → HTTP_METHOD.
func upperSnake(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if i > 0 && unicode.IsUpper(r) {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || unicode.IsUpper(prev) && nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// ResultToModel rewrites the enum values of a result, as protojson renders md
// into v, from their proto names to their model names, in place, so that a
// result reads as the output schema says. A singular field holding a zero
// value that is not offered (PRIORITY_UNSPECIFIED) is dropped, as protojson
// drops it without EmitUnpopulated; in a list or map it takes its model name
// ("unspecified").
// Well-known types are left alone.
func ResultToModel(md protoreflect.MessageDescriptor, v *structpb.Value) {
	if md == nil || v == nil || isWellKnown(md.FullName()) {
		return
	}
	st := v.GetStructValue()
	if st == nil {
		return
	}
	fs := md.Fields()
	for key, fv := range st.GetFields() {
		fd := fs.ByJSONName(key)
		if fd == nil {
			continue
		}
		switch {
		case fd.IsMap():
			vd := fd.MapValue()
			for _, e := range fv.GetStructValue().GetFields() {
				valueToModel(vd, e, false)
			}
		case fd.IsList():
			for _, e := range fv.GetListValue().GetValues() {
				valueToModel(fd, e, false)
			}
		default:
			if !valueToModel(fd, fv, true) {
				delete(st.Fields, key)
			}
		}
	}
}

// valueToModel rewrites one value of fd; false when a singular zero value that
// is not offered should be dropped.
func valueToModel(fd protoreflect.FieldDescriptor, v *structpb.Value, singular bool) bool {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		ResultToModel(fd.Message(), v)
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return true
		}
		s, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return true
		}
		e, err := Enum(fd.Enum())
		if err != nil {
			return true
		}
		ev := fd.Enum().Values().ByName(protoreflect.Name(s.StringValue))
		if ev == nil {
			return true
		}
		if singular && ev.Number() == 0 && !offered(e, 0) {
			return false
		}
		if name := e.ModelName(ev.Number()); name != "" {
			s.StringValue = name
		}
	}
	return true
}

func offered(e *EnumValues, n protoreflect.EnumNumber) bool {
	for _, v := range e.Offered {
		if v.Number() == n {
			return true
		}
	}
	return false
}

var (
	reachMu    sync.Mutex
	reachCache = map[protoreflect.MessageDescriptor]bool{}
)

// ReachesEnum reports whether a message of type md can hold an enum value
// other than google.protobuf.NullValue, i.e. whether [ResultToModel] may
// change its JSON.
func ReachesEnum(md protoreflect.MessageDescriptor) bool {
	reachMu.Lock()
	defer reachMu.Unlock()
	if r, ok := reachCache[md]; ok {
		return r
	}
	seen := map[protoreflect.FullName]bool{}
	var reaches func(m protoreflect.MessageDescriptor) bool
	reaches = func(m protoreflect.MessageDescriptor) bool {
		if seen[m.FullName()] || isWellKnown(m.FullName()) {
			return false
		}
		seen[m.FullName()] = true
		fs := m.Fields()
		for i := range fs.Len() {
			fd := fs.Get(i)
			if fd.IsMap() {
				fd = fd.MapValue()
			}
			if e := fd.Enum(); e != nil && e.FullName() != "google.protobuf.NullValue" {
				return true
			}
			if sub := fd.Message(); sub != nil && reaches(sub) {
				return true
			}
		}
		return false
	}
	r := reaches(md)
	if len(reachCache) >= enumCacheSize {
		clear(reachCache)
	}
	reachCache[md] = r
	return r
}
