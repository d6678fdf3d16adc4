package gateway

import (
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// marshalCallEvent renders ev as protojson would (same field names, order and
// Timestamp/Duration formats; whitespace aside), without protojson's reflection:
// two events per call made protojson.Marshal a visible share of the gateway's
// CPU. Strings that are not valid UTF-8 go through protojson, which rejects them
// as before. TestMarshalCallEventMatchesProtojson keeps the two in step.
func marshalCallEvent(ev *toolfleetv1.CallEvent) ([]byte, error) {
	strs := [...]string{ev.GetId(), ev.GetKind(), ev.GetCallId(), ev.GetToolId(), ev.GetTraceId(),
		ev.GetFailureKind(), ev.GetFailureMessage(), ev.GetUserId(), ev.GetApprover(), ev.GetVia()}
	for _, s := range strs {
		if !utf8.ValidString(s) {
			return protojson.Marshal(ev)
		}
	}
	b := make([]byte, 0, 256)
	b = append(b, '{')
	first := true
	field := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, '"', ':')
	}
	str := func(name, v string) {
		if v != "" {
			field(name)
			b = appendJSONString(b, v)
		}
	}
	str("id", ev.GetId())
	str("kind", ev.GetKind())
	str("callId", ev.GetCallId())
	str("toolId", ev.GetToolId())
	timestamp := func(name string, ts *timestamppb.Timestamp) bool {
		if ts == nil {
			return true
		}
		if ts.CheckValid() != nil {
			return false
		}
		field(name)
		b = append(b, '"')
		b = appendTrimmedFraction(ts.AsTime().UTC().AppendFormat(b, "2006-01-02T15:04:05.000000000"))
		b = append(b, 'Z', '"')
		return true
	}
	if !timestamp("time", ev.GetTime()) {
		return protojson.Marshal(ev) // protojson reports the error
	}
	str("traceId", ev.GetTraceId())
	if d := ev.GetDuration(); d != nil {
		if err := d.CheckValid(); err != nil {
			return protojson.Marshal(ev)
		}
		field("duration")
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
		b = append(b, 's', '"')
	}
	str("failureKind", ev.GetFailureKind())
	str("failureMessage", ev.GetFailureMessage())
	str("userId", ev.GetUserId())
	str("approver", ev.GetApprover())
	if !timestamp("approvedAt", ev.GetApprovedAt()) {
		return protojson.Marshal(ev)
	}
	str("via", ev.GetVia())
	return append(b, '}'), nil
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
