package bench

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// frame is one gRPC message, passed through unparsed.
type frame []byte

// frameCodec moves frames as they are: the bare hop neither decodes nor encodes.
// It is named "proto" so that both ends see an ordinary protobuf call.
type frameCodec struct{}

func (frameCodec) Marshal(v any) ([]byte, error) { return *v.(*frame), nil }
func (frameCodec) Unmarshal(b []byte, v any) error {
	*v.(*frame) = append((*v.(*frame))[:0], b...)
	return nil
}
func (frameCodec) Name() string { return "proto" }

// startBareHop starts the cheapest extra gRPC hop there can be in front of a
// worker: a grpc-go server that forwards each unary call's bytes and metadata to
// addr over one grpc-go connection, with no parsing, auth or anything else. It
// is the floor under any gateway built on grpc-go, measured on the same machine.
func startBareHop(b *testing.B, addr string) string {
	b.Helper()
	conn := tooltest.Dial(b, addr)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	// The same server settings as the gateway's gRPC server.
	srv := grpc.NewServer(grpc.ForceServerCodec(frameCodec{}), grpc.NumStreamWorkers(64),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			method, _ := grpc.MethodFromServerStream(ss)
			var in, out frame
			if err := ss.RecvMsg(&in); err != nil {
				return err
			}
			md, _ := metadata.FromIncomingContext(ss.Context())
			ctx := metadata.NewOutgoingContext(ss.Context(), md)
			if err := conn.Invoke(ctx, method, &in, &out, grpc.ForceCodec(frameCodec{})); err != nil {
				return err
			}
			return ss.SendMsg(&out)
		}))
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(lis) }()
	b.Cleanup(func() { srv.Stop(); <-served })
	return lis.Addr().String()
}
