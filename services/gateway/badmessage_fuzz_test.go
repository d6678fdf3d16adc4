package gateway

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// FuzzLenientCodec decodes any bytes as a CallToolRequest through the gateway's
// gRPC codec. Properties: bytes proto.Unmarshal accepts decode to the same
// message; anything else is InvalidArgument (the caller's mistake), never
// Internal; and no marked message is left behind.
func FuzzLenientCodec(f *testing.F) {
	good, _ := proto.Marshal(&toolfleetv1.CallToolRequest{ToolId: "Calculator.Add@1.0.0",
		Input: &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewNumberValue(1)}}})
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe})       // tool_id with invalid UTF-8
	f.Add([]byte{0x0a, 0x80, 0x80, 0x80, 0x80}) // truncated length
	f.Add([]byte{})
	codec := newLenientCodec()
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &toolfleetv1.CallToolRequest{}
		wantErr := proto.Unmarshal(b, want)
		got := &toolfleetv1.CallToolRequest{}
		err := decode(func(v any) error { return codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, v) }, got)
		if _, left := undecodable.Load(got); left {
			t.Fatal("the message is still marked after decode")
		}
		if wantErr == nil {
			if err != nil || !proto.Equal(got, want) {
				t.Fatalf("%x: got %v (%v), want %v", b, got, err, want)
			}
			return
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%x: got %v, want InvalidArgument", b, err)
		}
		// An unmarked message (another service's) fails as grpc-go would.
		if codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &toolfleetv1.CallToolRequest{}) == nil {
			t.Fatalf("%x: an unmarked message decoded", b)
		}
	})
}
