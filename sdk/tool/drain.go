package tool

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// drainGate counts the tool calls in flight and, once closed, refuses new ones
// with UNAVAILABLE and [DrainingTrailer]: the call did not run, and the gateway
// moves it to another replica.
type drainGate struct {
	mu       sync.Mutex
	closed   bool
	inflight int
	idle     chan struct{} // made by close; closed when no call is left
}

// enter admits a call unless the gate is closed.
func (d *drainGate) enter() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.inflight++
	return true
}

func (d *drainGate) exit() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inflight--
	if d.closed && d.inflight == 0 {
		close(d.idle)
	}
}

// close refuses new calls from now on; the channel is closed once the calls in
// flight have finished.
func (d *drainGate) close() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		d.idle = make(chan struct{})
		if d.inflight == 0 {
			close(d.idle)
		}
	}
	return d.idle
}

// interceptor applies the gate to tool calls; health checks always pass.
func (d *drainGate) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if strings.HasPrefix(info.FullMethod, "/grpc.health.v1.Health/") {
			return handler(ctx, req)
		}
		if !d.enter() {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(DrainingTrailer, "1"))
			return nil, status.Error(codes.Unavailable, "worker is draining; call another replica")
		}
		defer d.exit()
		return handler(ctx, req)
	}
}
