package tool

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// policy is what a tool's contract asks the worker to enforce itself, so a tool is
// bounded even when a caller sets no deadline or bypasses the gateway.
type policy struct {
	timeout        time.Duration
	maxResultBytes int
}

type policies struct {
	mu       sync.RWMutex
	byMethod map[string]policy // full gRPC method -> policy
}

func (p *policies) add(sd protoreflect.ServiceDescriptor) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ms := sd.Methods()
	for i := range ms.Len() {
		m := ms.Get(i)
		opts := contract.ToolOptionsOf(m)
		pol := policy{timeout: opts.GetTimeout().AsDuration(), maxResultBytes: int(opts.GetMaxResultBytes())}
		if pol != (policy{}) {
			p.byMethod[contract.GRPCMethod(m)] = pol
		}
	}
}

func (p *policies) get(method string) (policy, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	pol, ok := p.byMethod[method]
	return pol, ok
}

// interceptor applies the contract's timeout (the caller's deadline may be shorter)
// and turns a result over max_result_bytes (or over what the caller accepts,
// AcceptResultBytesKey, when that is more) into an execution error.
func (p *policies) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		pol, ok := p.get(info.FullMethod)
		if !ok {
			return handler(ctx, req)
		}
		if pol.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, pol.timeout)
			defer cancel()
		}
		resp, err := handler(ctx, req)
		if err == nil && pol.maxResultBytes > 0 {
			// A caller that keeps large results elsewhere (the gateway, for a
			// result handle) may accept more than the contract's limit.
			limit := max(pol.maxResultBytes, acceptResultBytes(ctx))
			if m, ok := resp.(proto.Message); ok {
				if n := proto.Size(m); n > limit {
					msg := fmt.Sprintf("the result is too large (%d bytes; this tool's limit is %d)", n, limit)
					if limit > pol.maxResultBytes {
						msg = fmt.Sprintf("the result is too large (%d bytes; this tool's limit is %d, and the caller accepts at most %d)", n, pol.maxResultBytes, limit)
					}
					return nil, NewError(msg,
						WithDeveloperMessage("max_result_bytes of the tool contract exceeded"),
						WithPromptHint("Ask for less data at once, e.g. a narrower query or a smaller page."))
				}
			}
		}
		return resp, err
	}
}
