package gateway

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	// The proto codec is registered by this import; lenientCodec wraps it.
	_ "google.golang.org/grpc/encoding/proto"
)

// grpc-go answers a request message it cannot decode (truncated protobuf,
// invalid UTF-8 in a string, nesting past the decoder's limit) with Internal,
// written before any handler or interceptor can change it: the caller's
// mistake would read as the gateway's fault. So the gateway's gRPC server
// decodes with lenientCodec, and the services registered through
// badMessageRegistrar mark the message they decode: for a marked message a
// decode failure is kept aside instead of failing the stream, and the
// handler answers InvalidArgument with it. Messages of other services
// (health, reflection) decode as usual.

// undecodable holds the messages being decoded for registered services, and
// the decode error of each that failed.
var undecodable sync.Map // message pointer → error (nil while decoding)

// lenientCodec is the proto codec that defers a marked message's decode error.
type lenientCodec struct{ encoding.CodecV2 }

func newLenientCodec() lenientCodec { return lenientCodec{encoding.GetCodecV2("proto")} }

func (c lenientCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(rawMessage); ok { // a mounted service's message (mountgrpc.go)
		return mem.BufferSlice{mem.SliceBuffer(m)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*rawMessage); ok {
		*m = data.Materialize()
		return nil
	}
	err := c.CodecV2.Unmarshal(data, v)
	if err != nil {
		if _, marked := undecodable.Load(v); marked {
			undecodable.Store(v, err)
			return nil
		}
	}
	return err
}

// decode decodes v with dec, answering InvalidArgument for a message that is
// not valid protobuf.
func decode(dec func(any) error, v any) error {
	undecodable.Store(v, nil)
	err := dec(v)
	if bad, _ := undecodable.LoadAndDelete(v); bad != nil && err == nil {
		return status.Error(codes.InvalidArgument, "the request is not a valid protobuf message: "+bad.(error).Error())
	}
	return err
}

// badMessageRegistrar registers services whose handlers decode with decode.
type badMessageRegistrar struct{ s *grpc.Server }

func (r badMessageRegistrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		handler := m.Handler
		d.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				return handler(srv, ctx, func(v any) error { return decode(dec, v) }, ic)
			}}
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		handler := sd.Handler
		sd.Handler = func(srv any, stream grpc.ServerStream) error { return handler(srv, badMessageStream{stream}) }
		d.Streams[i] = sd
	}
	r.s.RegisterService(&d, impl)
}

// badMessageStream decodes a stream's messages with decode.
type badMessageStream struct{ grpc.ServerStream }

func (s badMessageStream) RecvMsg(m any) error {
	return decode(s.ServerStream.RecvMsg, m)
}
