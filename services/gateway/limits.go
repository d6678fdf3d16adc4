package gateway

import (
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/internal/jsonerr"
	"github.com/toolfleet/toolfleet/internal/jsonsize"
)

// Limits that hold on every surface (docs/operations.md "Limits"):
//
//   - one request body or message: Config.MaxRequestBytes, checked before
//     decoding — the gRPC length prefix (grpc.MaxRecvMsgSize), Connect and
//     gRPC-Web (connect.WithReadMaxBytes, also after decompression), OXP HTTP
//     and MCP (http.MaxBytesReader): an oversized request costs at most its
//     limit in reads and is refused with ResourceExhausted / HTTP 413;
//   - one JSON request (Connect JSON, OXP HTTP, MCP): Config.MaxInputValues
//     values, counted before decoding (a Struct value costs ~100 bytes decoded,
//     so this keeps memory a small multiple of the body);
//   - request headers: maxHeaderBytes;
//   - one CallTools batch: Config.MaxBatchCalls calls, Config.BatchParallelism
//     at once;
//   - one HTTP/2 connection: Config.MaxConcurrentStreams streams; keepalive
//     pings no more often than keepaliveEnforcement allows.
const maxHeaderBytes = 1 << 20

// maxWorkerHeaderBytes bounds the headers and trailers the gateway accepts
// from a worker (grpc-go's default is 16 MiB): its status details (an
// execution error, a tool's questions of up to 16 requests and 64 KiB of
// state) and its caller log (at most 64 KiB of lines) fit with room to
// spare; a worker sending more fails the call instead of making the gateway
// decode megabytes.
const maxWorkerHeaderBytes = 4 << 20

// keepaliveEnforcement refuses clients that ping more often than every 10 s
// (grpc-go closes their connection with ENHANCE_YOUR_CALM); pings without an
// active call are allowed so idle clients can check their connection.
var keepaliveEnforcement = keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}

// keepaliveParams pings idle connections to find dead peers, and closes
// connections idle for long so that abandoned ones do not pile up.
var keepaliveParams = keepalive.ServerParameters{
	MaxConnectionIdle: 15 * time.Minute,
	Time:              2 * time.Minute,
	Timeout:           20 * time.Second,
}

// limitedJSON is connect-go's JSON codec with a bound on the number of JSON
// values, checked before protojson decodes the body (jsonsize).
type limitedJSON struct {
	name      string
	maxValues int
}

func (c limitedJSON) Name() string { return c.name }

func (c limitedJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("gateway: %T is not a protobuf message", m)
	}
	return protojson.Marshal(pm)
}

func (c limitedJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("gateway: %T is not a protobuf message", m)
	}
	if len(b) == 0 {
		return errors.New("an empty body is not a JSON object")
	}
	if jsonsize.Values(b, c.maxValues) > c.maxValues {
		return tooManyValues(c.maxValues)
	}
	// Unknown fields are dropped so that older servers accept newer clients.
	return jsonerr.Describe(b, protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, pm))
}

func tooManyValues(limit int) error {
	return fmt.Errorf("the request holds more than %d JSON values, this gateway's limit; send less data per call", limit)
}

// connectJSONCodecs replaces both names connect-go gives its JSON codec.
func (g *Gateway) connectJSONCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(limitedJSON{name: "json", maxValues: g.cfg.MaxInputValues}),
		connect.WithCodec(limitedJSON{name: "json; charset=utf-8", maxValues: g.cfg.MaxInputValues}),
	}
}
