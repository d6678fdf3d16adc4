package gateway

import (
	"time"

	"google.golang.org/grpc/keepalive"
)

// Limits that hold on every surface (docs/operations.md "Limits"):
//
//   - one request body or message: Config.MaxRequestBytes, checked before
//     decoding — the gRPC length prefix (grpc.MaxRecvMsgSize), Connect and
//     gRPC-Web (connect.WithReadMaxBytes, also after decompression), OXP HTTP
//     and MCP (http.MaxBytesReader): an oversized request costs at most its
//     limit in reads and is refused with ResourceExhausted / HTTP 413;
//   - request headers: maxHeaderBytes;
//   - one CallTools batch: Config.MaxBatchCalls calls, Config.BatchParallelism
//     at once;
//   - one HTTP/2 connection: Config.MaxConcurrentStreams streams; keepalive
//     pings no more often than keepaliveEnforcement allows.
const maxHeaderBytes = 1 << 20

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
