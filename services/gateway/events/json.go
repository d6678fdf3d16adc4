package events

import (
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// marshalCallEvent renders ev as protojson would (same field names, order and
// Timestamp/Duration formats; whitespace aside), without protojson's reflection
// machinery: two events per call made protojson.Marshal a visible share of the
// gateway's CPU (BenchmarkMarshalCallEvent on 2 busy cores: ~1.1 µs and 1
// allocation against ~3.6 µs and 16).
//
// The fields come from CallEvent's descriptor, so a field added to events.proto
// is written without touching this code; a field of a kind this encoder does not
// know (see eventFieldKind) makes every event go through protojson instead, so no
// field is ever dropped. Strings that are not valid UTF-8 and out-of-range
// Timestamps or Durations also go through protojson, which rejects them.
// TestMarshalCallEventCoversDescriptor keeps the two in step.
func marshalCallEvent(ev *toolfleetv1.CallEvent) ([]byte, error) {
	if !callEventFast {
		return protojson.Marshal(ev)
	}
	m := ev.ProtoReflect()
	b := make([]byte, 0, 256)
	b = append(b, '{')
	first := true
	for _, f := range callEventFields {
		if !m.Has(f.fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, f.key...)
		v := m.Get(f.fd)
		switch f.kind {
		case kindString:
			s := v.String()
			if !utf8.ValidString(s) {
				return protojson.Marshal(ev) // protojson reports the error
			}
			b = appendJSONString(b, s)
		case kindBool:
			b = strconv.AppendBool(b, v.Bool())
		case kindInt32:
			b = strconv.AppendInt(b, v.Int(), 10)
		case kindUint32:
			b = strconv.AppendUint(b, v.Uint(), 10)
		case kindInt64:
			b = append(strconv.AppendInt(append(b, '"'), v.Int(), 10), '"')
		case kindUint64:
			b = append(strconv.AppendUint(append(b, '"'), v.Uint(), 10), '"')
		case kindTimestamp:
			ts, ok := v.Message().Interface().(*timestamppb.Timestamp)
			if !ok || ts.CheckValid() != nil {
				return protojson.Marshal(ev)
			}
			b = append(b, '"')
			b = appendTrimmedFraction(ts.AsTime().UTC().AppendFormat(b, "2006-01-02T15:04:05.000000000"))
			b = append(b, 'Z', '"')
		case kindDuration:
			d, ok := v.Message().Interface().(*durationpb.Duration)
			if !ok || d.CheckValid() != nil {
				return protojson.Marshal(ev)
			}
			b = appendDuration(b, d)
		case kindMessage:
			// A nested message (the credential): rare, so protojson writes it.
			sub, err := protojson.Marshal(v.Message().Interface())
			if err != nil {
				return nil, err
			}
			b = append(b, sub...)
		}
	}
	return append(b, '}'), nil
}

// Kinds of CallEvent fields the fast encoder writes.
const (
	kindString = iota + 1
	kindBool
	kindInt32
	kindUint32
	kindInt64
	kindUint64
	kindTimestamp
	kindDuration
	// kindMessage is any other singular message field.
	kindMessage
)

// eventField is one CallEvent field with its JSON key ("\"name\":") ready.
type eventField struct {
	fd   protoreflect.FieldDescriptor
	key  string
	kind int
}

// callEventFields lists CallEvent's fields in declaration order (protojson's);
// callEventFast is false when one of them has a kind the fast encoder lacks.
var callEventFields, callEventFast = eventFields((&toolfleetv1.CallEvent{}).ProtoReflect().Descriptor())

func eventFields(md protoreflect.MessageDescriptor) ([]eventField, bool) {
	fields := md.Fields()
	out := make([]eventField, 0, fields.Len())
	for i := range fields.Len() {
		fd := fields.Get(i)
		k := eventFieldKind(fd)
		if k == 0 {
			return nil, false
		}
		out = append(out, eventField{fd: fd, key: strconv.Quote(fd.JSONName()) + ":", kind: k})
	}
	return out, true
}

// eventFieldKind classifies a field the fast encoder can write, or returns 0.
func eventFieldKind(fd protoreflect.FieldDescriptor) int {
	if fd.IsList() || fd.IsMap() || fd.IsExtension() {
		return 0
	}
	switch fd.Kind() {
	case protoreflect.StringKind:
		return kindString
	case protoreflect.BoolKind:
		return kindBool
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return kindInt32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return kindUint32
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return kindInt64
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return kindUint64
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			return kindTimestamp
		case "google.protobuf.Duration":
			return kindDuration
		}
		return kindMessage
	}
	return 0
}

// appendDuration writes a valid Duration as protojson does: "-1.5s", "90s".
func appendDuration(b []byte, d *durationpb.Duration) []byte {
	secs, nanos := d.GetSeconds(), int64(d.GetNanos())
	b = append(b, '"')
	if secs < 0 || nanos < 0 {
		b = append(b, '-')
		secs, nanos = -secs, -nanos
	}
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, '.')
	frac := strconv.AppendInt(make([]byte, 0, 9), nanos, 10)
	for range 9 - len(frac) {
		b = append(b, '0')
	}
	b = appendTrimmedFraction(append(b, frac...))
	return append(b, 's', '"')
}

// appendTrimmedFraction drops trailing zero groups of a 9-digit fraction at the
// end of b, as protojson does: 9, 6, 3 or no fractional digits.
func appendTrimmedFraction(b []byte) []byte {
	for range 2 {
		if n := len(b); n >= 3 && string(b[n-3:]) == "000" {
			b = b[:n-3]
		}
	}
	if n := len(b); n >= 4 && string(b[n-4:]) == ".000" {
		b = b[:n-4]
	}
	return b
}

// appendJSONString appends s (valid UTF-8) as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
