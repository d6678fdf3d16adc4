package events

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// marshalCallEvent must say exactly what protojson.Marshal says (protojson
// randomises whitespace, so the two are compared as parsed JSON and after a
// protojson round trip).
func TestMarshalCallEventMatchesProtojson(t *testing.T) {
	at := time.Date(2026, 11, 21, 13, 5, 7, 0, time.UTC)
	events := []*toolfleetv1.CallEvent{
		{},
		{Id: "a", Kind: Started, CallId: "c", ToolId: "Calculator.Add@1.0.0", Time: timestamppb.New(at)},
		{Id: "b", Kind: Succeeded, Time: timestamppb.New(at.Add(123 * time.Millisecond)), Duration: durationpb.New(0)},
		{Id: "c", Time: timestamppb.New(at.Add(123456 * time.Nanosecond)), Duration: durationpb.New(1500 * time.Microsecond)},
		{Id: "d", Time: timestamppb.New(at.Add(123456789 * time.Nanosecond)), Duration: durationpb.New(-2*time.Second - 5*time.Nanosecond)},
		{Duration: durationpb.New(-300 * time.Millisecond), TraceId: "0af7651916cd43dd8448eb211c80319c"},
		{Duration: durationpb.New(90 * time.Second)},
		{Time: timestamppb.New(time.Unix(0, 0))},
		{Time: timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC))},
		{Kind: Failed, FailureKind: "execution", UserId: "ü\u2028ser",
			FailureMessage: "quote \" backslash \\ nl \n cr \r tab \t bs \b ff \f nul \x00 us \x1f del \x7f <&> é 日本 😀"},
	}
	for _, ev := range events {
		got, err := marshalCallEvent(ev)
		if err != nil {
			t.Fatalf("%v: %v", ev, err)
		}
		want, err := protojson.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("marshalCallEvent = %s\nprotojson        = %s", got, want)
		}
		back := &toolfleetv1.CallEvent{}
		if err := protojson.Unmarshal(got, back); err != nil || !proto.Equal(back, ev) {
			t.Errorf("round trip of %s: %v, %v", got, back, err)
		}
	}
	// Invalid UTF-8 is refused, as protojson refuses it.
	if _, err := marshalCallEvent(&toolfleetv1.CallEvent{FailureMessage: "bad \xff"}); err == nil {
		t.Error("invalid UTF-8 accepted")
	}
	// Out-of-range well-known values are refused too.
	if _, err := marshalCallEvent(&toolfleetv1.CallEvent{Duration: &durationpb.Duration{Seconds: 1, Nanos: -1}}); err == nil {
		t.Error("invalid duration accepted")
	}
}

// TestMarshalCallEventCoversDescriptor sets every field of CallEvent, whatever
// events.proto declares today, and checks that the event JSON carries each one
// as protojson does: a new field can never be dropped silently.
func TestMarshalCallEventCoversDescriptor(t *testing.T) {
	t.Parallel()
	ev := &toolfleetv1.CallEvent{}
	fill(t, ev.ProtoReflect())
	got, err := marshalCallEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	want, err := protojson.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	fields := ev.ProtoReflect().Descriptor().Fields()
	if len(w) != fields.Len() {
		t.Fatalf("protojson wrote %d of %d fields: the test did not set them all: %s", len(w), fields.Len(), want)
	}
	for i := range fields.Len() {
		key := fields.Get(i).JSONName()
		if !reflect.DeepEqual(g[key], w[key]) {
			t.Errorf("field %s: event JSON has %v, protojson %v", fields.Get(i).FullName(), g[key], w[key])
		}
	}
	if !callEventFast {
		t.Logf("CallEvent has a field kind the fast encoder lacks; events go through protojson (slower, nothing lost): extend eventFieldKind")
	}
}

// fill sets every field of m to a value that is not the default.
func fill(t *testing.T, m protoreflect.Message) {
	t.Helper()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsList() && fd.Kind() == protoreflect.StringKind {
			l := m.Mutable(fd).List()
			l.Append(protoreflect.ValueOfString("a \"é\""))
			l.Append(protoreflect.ValueOfString("b"))
			continue
		}
		if fd.IsList() || fd.IsMap() {
			t.Fatalf("fill: %s is a %s; teach fill to set it", fd.FullName(), fd.Cardinality())
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString("v-"+string(fd.Name())+" \"é\""))
		case protoreflect.BytesKind:
			m.Set(fd, protoreflect.ValueOfBytes([]byte(fd.Name())))
		case protoreflect.BoolKind:
			m.Set(fd, protoreflect.ValueOfBool(true))
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(-7))
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			m.Set(fd, protoreflect.ValueOfUint32(7))
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			m.Set(fd, protoreflect.ValueOfInt64(-1<<40))
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			m.Set(fd, protoreflect.ValueOfUint64(1<<40))
		case protoreflect.FloatKind:
			m.Set(fd, protoreflect.ValueOfFloat32(1.5))
		case protoreflect.DoubleKind:
			m.Set(fd, protoreflect.ValueOfFloat64(2.5))
		case protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len()-1).Number()))
		case protoreflect.MessageKind:
			switch fd.Message().FullName() {
			case "google.protobuf.Timestamp":
				m.Set(fd, protoreflect.ValueOfMessage(timestamppb.New(time.Date(2026, 11, 23, 12, 0, 0, 120000000, time.UTC)).ProtoReflect()))
			case "google.protobuf.Duration":
				m.Set(fd, protoreflect.ValueOfMessage(durationpb.New(1500*time.Millisecond).ProtoReflect()))
			default:
				sub := m.NewField(fd)
				fill(t, sub.Message())
				m.Set(fd, sub)
			}
		default:
			t.Fatalf("fill: %s has kind %s; teach fill to set it", fd.FullName(), fd.Kind())
		}
	}
}

func BenchmarkMarshalCallEvent(b *testing.B) {
	ev := &toolfleetv1.CallEvent{Id: newID(), Kind: Succeeded, CallId: newID(), ToolId: "Calculator.Add@1.0.0",
		Time: timestamppb.Now(), Duration: durationpb.New(123456 * time.Nanosecond), UserId: "user"}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = marshalCallEvent(ev)
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = protojson.Marshal(ev)
		}
	})
}
