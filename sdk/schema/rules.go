package schema

import (
	"math"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// applyRules adds the protovalidate rules of one value to its schema. Rules JSON
// Schema cannot say (CEL, timestamps relative to now, byte lengths of base64 text)
// are left to validation.
func applyRules(s map[string]any, fd protoreflect.FieldDescriptor, r *validate.FieldRules) {
	if r == nil {
		return
	}
	switch {
	case r.HasString():
		stringRules(s, r.GetString())
	case r.HasEnum():
		enumRules(s, fd, r.GetEnum())
	case r.HasBool():
		if b := r.GetBool(); b.HasConst() {
			s["const"] = b.GetConst()
		}
	case r.HasBytes(), r.HasAny(), r.HasDuration(), r.HasTimestamp(), r.HasFieldMask(),
		r.HasRepeated(), r.HasMap():
		// Not expressible on the JSON form; validation enforces them.
	default:
		if od := r.ProtoReflect().Descriptor().Oneofs().ByName("type"); od != nil {
			if typed := r.ProtoReflect().WhichOneof(od); typed != nil {
				numericRules(s, r.ProtoReflect().Get(typed).Message())
			}
		}
	}
}

func stringRules(s map[string]any, r *validate.StringRules) {
	if r.HasConst() {
		s["const"] = r.GetConst()
	}
	if r.HasLen() {
		s["minLength"], s["maxLength"] = r.GetLen(), r.GetLen()
	}
	if r.HasMinLen() {
		s["minLength"] = r.GetMinLen()
	}
	if r.HasMaxLen() {
		s["maxLength"] = r.GetMaxLen()
	}
	if r.HasPattern() {
		s["pattern"] = r.GetPattern()
	}
	if in := r.GetIn(); len(in) > 0 {
		s["enum"] = strs(in)
	}
	if notIn := r.GetNotIn(); len(notIn) > 0 {
		s["not"] = map[string]any{"enum": strs(notIn)}
	}
	format := ""
	switch {
	case r.GetEmail():
		format = "email"
	case r.GetHostname():
		format = "hostname"
	case r.GetIpv4():
		format = "ipv4"
	case r.GetIpv6():
		format = "ipv6"
	case r.GetUri():
		format = "uri"
	case r.GetUriRef():
		format = "uri-reference"
	case r.GetUuid():
		format = "uuid"
	}
	if format != "" {
		s["format"] = format
	}
	if ex := r.GetExample(); len(ex) > 0 {
		s["examples"] = strs(ex)
	}
}

func enumRules(s map[string]any, fd protoreflect.FieldDescriptor, r *validate.EnumRules) {
	ed := fd.Enum()
	if ed == nil {
		return
	}
	e, err := Enum(ed)
	if err != nil {
		return // single reported it
	}
	name := func(n int32) any {
		if m := e.ModelName(protoreflect.EnumNumber(n)); m != "" {
			return m
		}
		return int64(n)
	}
	if r.HasConst() {
		s["const"] = name(r.GetConst())
	}
	if in := r.GetIn(); len(in) > 0 {
		names := make([]any, 0, len(in))
		for _, n := range in {
			if !offered(e, protoreflect.EnumNumber(n)) && ed.Values().ByNumber(protoreflect.EnumNumber(n)) != nil {
				continue // a zero value models are not offered
			}
			names = append(names, name(n))
		}
		s["enum"] = names
	}
	if notIn := r.GetNotIn(); len(notIn) > 0 {
		excluded := map[any]bool{}
		for _, n := range notIn {
			excluded[name(n)] = true
		}
		var kept []any
		for _, v := range e.Names() {
			if !excluded[v] {
				kept = append(kept, v)
			}
		}
		s["enum"] = kept
	}
}

// numericRules handles every numeric rule message (Int32Rules ... DoubleRules)
// through reflection: they share field names.
func numericRules(s map[string]any, m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	get := func(name protoreflect.Name) (any, float64, bool) {
		fd := fields.ByName(name)
		if fd == nil || !m.Has(fd) {
			return nil, 0, false
		}
		return number(m.Get(fd), fd.Kind())
	}
	list := func(name protoreflect.Name) []any {
		fd := fields.ByName(name)
		if fd == nil || !fd.IsList() {
			return nil
		}
		l := m.Get(fd).List()
		out := make([]any, 0, l.Len())
		for i := range l.Len() {
			if v, _, ok := number(l.Get(i), fd.Kind()); ok {
				out = append(out, v)
			}
		}
		return out
	}
	if v, _, ok := get("const"); ok {
		s["const"] = v
	}
	lower, lowerKey, lowerF := any(nil), "", 0.0
	if v, f, ok := get("gt"); ok {
		lower, lowerKey, lowerF = v, "exclusiveMinimum", f
	} else if v, f, ok := get("gte"); ok {
		lower, lowerKey, lowerF = v, "minimum", f
	}
	upper, upperKey, upperF := any(nil), "", 0.0
	if v, f, ok := get("lt"); ok {
		upper, upperKey, upperF = v, "exclusiveMaximum", f
	} else if v, f, ok := get("lte"); ok {
		upper, upperKey, upperF = v, "maximum", f
	}
	switch {
	case lower != nil && upper != nil && lowerF > upperF:
		// protovalidate reads gt > lt as "outside the range": either side is fine.
		s["anyOf"] = []any{map[string]any{upperKey: upper}, map[string]any{lowerKey: lower}}
		delete(s, "minimum")
		delete(s, "maximum")
	default:
		if lower != nil {
			if lowerKey == "exclusiveMinimum" {
				delete(s, "minimum") // the type's own bound is weaker
			}
			s[lowerKey] = lower
		}
		if upper != nil {
			if upperKey == "exclusiveMaximum" {
				delete(s, "maximum")
			}
			s[upperKey] = upper
		}
	}
	if in := list("in"); len(in) > 0 {
		s["enum"] = in
	}
	if notIn := list("not_in"); len(notIn) > 0 {
		s["not"] = map[string]any{"enum": notIn}
	}
	if ex := list("example"); len(ex) > 0 {
		s["examples"] = ex
	}
}

// number converts a rule value into a JSON number (and a float64 for comparisons).
func number(v protoreflect.Value, k protoreflect.Kind) (any, float64, bool) {
	switch k {
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, 0, false
		}
		return f, f, true
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return v.Uint(), float64(v.Uint()), true
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		return v.Int(), float64(v.Int()), true
	}
	return nil, 0, false
}

func strs(in []string) []any {
	out := make([]any, 0, len(in))
	for _, s := range in {
		out = append(out, s)
	}
	return out
}
