package gateway

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
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
		{Id: "a", Kind: EventStarted, CallId: "c", ToolId: "Calculator.Add@1.0.0", Time: timestamppb.New(at)},
		{Id: "b", Kind: EventSucceeded, Time: timestamppb.New(at.Add(123 * time.Millisecond)), Duration: durationpb.New(0)},
		{Id: "c", Time: timestamppb.New(at.Add(123456 * time.Nanosecond)), Duration: durationpb.New(1500 * time.Microsecond)},
		{Id: "d", Time: timestamppb.New(at.Add(123456789 * time.Nanosecond)), Duration: durationpb.New(-2*time.Second - 5*time.Nanosecond)},
		{Duration: durationpb.New(-300 * time.Millisecond), TraceId: "0af7651916cd43dd8448eb211c80319c"},
		{Duration: durationpb.New(90 * time.Second)},
		{Time: timestamppb.New(time.Unix(0, 0))},
		{Time: timestamppb.New(time.Date(1, 1, 1, 0, 0, 0, 1000, time.UTC))},
		{Kind: EventFailed, FailureKind: KindExecution, UserId: "ü\u2028ser",
			Approver: "ana", ApprovedAt: timestamppb.New(at.Add(time.Millisecond)), Via: "orchestrator",
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

func BenchmarkMarshalCallEvent(b *testing.B) {
	ev := &toolfleetv1.CallEvent{Id: newID(), Kind: EventSucceeded, CallId: newID(), ToolId: "Calculator.Add@1.0.0",
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
