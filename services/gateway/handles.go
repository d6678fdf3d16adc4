package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway/registry"
	"github.com/toolfleet/toolfleet/services/gateway/results"
)

// Result handles (docs/gateway.md, "Large results: handles"): a caller that
// sets allow_result_handle gets a result over the tool's inline limit (up to
// Config.Results.MaxResultBytes) as a handle to the bytes kept in package results, and
// fetches them with FetchResult (gRPC, Connect) or GET /results/{id} (OXP).

// fetchChunkBytes is the size of one FetchResult message.
const fetchChunkBytes = 64 << 10

// ErrNoResult: no result with this id for this principal (unknown, expired or
// another principal's; one error for all three).
var ErrNoResult = results.ErrNotFound

// handleOffer is a caller's consent to a result handle; the zero value (no
// consent) keeps the old behaviour, a result over the limit fails the call.
type handleOffer struct {
	// owner is the effective principal, the only one who may fetch the result.
	owner string
}

// offerOf is the handle offer of a call, holding one of the gateway's handle
// slots until release is called: a call that allows a handle may receive a
// result of up to Results.MaxResultBytes, and the slots bound how many do at once.
// Without a free slot within Config.ResultHandles.Wait the call is refused
// before it runs (ResourceExhausted, retryable).
func (g *Gateway) offerOf(ctx context.Context, p *Principal, req *toolfleetv1.CallToolRequest) (_ handleOffer, release func(), _ *CallError) {
	if !req.GetAllowResultHandle() {
		return handleOffer{}, func() {}, nil
	}
	// A caller that holds its share of the result store keeps no more
	// results there until its window renews (shares.go): refused before it
	// runs, as over a quota.
	if err := g.shares.admit(ctx, shareResults, p.ID()); err != nil {
		return handleOffer{}, nil, shareRefused(err, req.GetToolId(), "try again then, or call without allow_result_handle")
	}
	t := time.NewTimer(g.cfg.ResultHandles.Wait)
	defer t.Stop()
	select {
	case g.handleSlots <- struct{}{}:
		return handleOffer{owner: p.ID()}, func() { <-g.handleSlots }, nil
	case <-ctx.Done():
		return handleOffer{}, nil, serverError(codes.DeadlineExceeded, ErrDeadline, "", "the deadline passed while the call waited to start")
	case <-t.C:
		return handleOffer{}, nil, serverError(codes.ResourceExhausted, errHandleSlots, "",
			"the gateway is already running as many calls that allow a result handle as it takes at once (%d); the call did not run: try again shortly", g.cfg.ResultHandles.Calls)
	}
}

// errHandleSlots: every slot for calls that allow a handle stayed taken.
var errHandleSlots = errors.New("gateway: no free slot for a call that allows a result handle")

// grpcDefaultRecvBytes is grpc-go's default bound on a message a client receives.
const grpcDefaultRecvBytes = 4 << 20

// withOffer prepares a call to a worker for a caller that offered a handle:
// the worker may answer up to the ceiling of a kept result (sdk/tool honours
// tool.AcceptResultBytesKey over the contract's max_result_bytes), and so may
// the gRPC message (a protobuf answer is rarely larger than its JSON).
// Without an offer the call is unchanged. A gateway without NATS asks for the
// large answer too, only to tell the caller why it gets no handle.
func (g *Gateway) withOffer(ctx context.Context, offer handleOffer) (context.Context, []grpc.CallOption) {
	if offer.owner == "" {
		return ctx, nil
	}
	ctx = metadata.AppendToOutgoingContext(ctx, tool.AcceptResultBytesKey, strconv.FormatInt(g.cfg.Results.MaxResultBytes, 10))
	if g.cfg.Results.MaxResultBytes <= grpcDefaultRecvBytes {
		return ctx, nil
	}
	return ctx, []grpc.CallOption{grpc.MaxCallRecvMsgSize(int(g.cfg.Results.MaxResultBytes))}
}

// results returns the result store; nil until NATS is configured and the bucket exists.
func (g *Gateway) results() *results.Store { return g.resultsPtr.Load() }

// keepResult stores b, the JSON of a result over the tool's inline limit, and
// answers with its handle; a result it cannot keep is an execution error, as
// a result over the limit is without a handle.
func (g *Gateway) keepResult(ctx context.Context, rt *registry.Route, offer handleOffer, b []byte, limit int64, resp *toolfleetv1.CallToolResponse) {
	id := rt.Def().GetId()
	over := fmt.Sprintf("the result of %s is %d bytes, over its limit of %d bytes", id, len(b), limit)
	fail := func(why string, retry bool) {
		setToolError(resp, &toolfleetv1.ToolError{Message: over + "; " + why, CanRetry: retry})
	}
	store := g.results()
	switch {
	case g.cfg.NATSURL == "":
		fail("result handles need a gateway with NATS, and this one has none; ask for less (narrow the input or page through the results)", false)
		return
	case int64(len(b)) > g.cfg.Results.MaxResultBytes:
		fail(fmt.Sprintf("it is also over the ceiling of %d bytes for results kept behind a handle; ask for less (narrow the input or page through the results)", g.cfg.Results.MaxResultBytes), false)
		return
	case store == nil:
		fail("the gateway's result store is not ready; try again shortly", true)
		return
	}
	h, err := store.Put(ctx, offer.owner, rt.Def().GetToolkit()+"."+rt.Def().GetName(), results.ContentTypeJSON, b)
	switch {
	case errors.Is(err, results.ErrFull):
		fail("the gateway's result store is full; try again later, or ask for less", true)
		return
	case err != nil:
		g.log.WarnContext(ctx, "could not keep a result behind a handle", "tool_id", id, "bytes", len(b), "error", err)
		fail("the gateway could not keep it behind a handle; try again shortly", true)
		return
	}
	g.shares.charge(shareResults, offer.owner, int64(len(b)))
	resp.Success = true
	resp.Outcome = nil
	resp.ResultHandle = h
}

// openResult authenticates the caller and opens its result id; close the
// result. A malformed id is InvalidArgument before the store is asked; an
// unknown, expired or another principal's id is NotFound.
func (g *Gateway) openResult(ctx context.Context, creds Credentials, id string) (*results.Object, *CallError) {
	p, aerr := g.auth.Principal(ctx, creds)
	if aerr != nil {
		return nil, authError(aerr)
	}
	if !results.ValidID(id) {
		return nil, serverError(codes.InvalidArgument, results.ErrInvalidID, "",
			"a result id is 32 lowercase hex characters, as in the call's result_handle.id")
	}
	if g.cfg.NATSURL == "" {
		return nil, serverError(codes.FailedPrecondition, nil, "",
			"this gateway keeps no results: result handles need a gateway with NATS")
	}
	store := g.results()
	if store == nil {
		return nil, serverError(codes.Unavailable, results.ErrUnavailable, "", "the gateway's result store is not ready; try again shortly")
	}
	obj, err := store.Open(ctx, p.ID(), id)
	switch {
	case errors.Is(err, results.ErrNotFound):
		return nil, serverError(codes.NotFound, ErrNoResult, "",
			"no result %s for this caller: it expired, or it was never kept for this principal", id)
	case err != nil:
		return nil, serverError(codes.Unavailable, results.ErrUnavailable, err.Error(), "the gateway's result store is unreachable; try again shortly")
	}
	return obj, nil
}

// sendResult streams obj in chunks to send.
func sendResult(obj *results.Object, send func(chunk []byte) error) error {
	buf := make([]byte, fetchChunkBytes)
	for {
		n, err := io.ReadFull(obj, buf)
		if n > 0 {
			if serr := send(buf[:n]); serr != nil {
				return serr
			}
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return nil
		case err != nil:
			return serverError(codes.Unavailable, results.ErrUnavailable, err.Error(),
				"the result could not be read to its end; fetch it again")
		}
	}
}

// fetch serves FetchResult for every RPC surface.
func (g *Gateway) fetch(ctx context.Context, creds Credentials, id string, send func(chunk []byte) error) error {
	obj, ce := g.openResult(ctx, creds, id)
	if ce != nil {
		return ce
	}
	defer obj.Close()
	return sendResult(obj, send)
}

func (s grpcService) FetchResult(req *toolfleetv1.FetchResultRequest, stream grpc.ServerStreamingServer[toolfleetv1.FetchResultResponse]) error {
	ctx := stream.Context()
	err := s.g.fetch(ctx, credentialsFromMD(ctx), req.GetId(), func(chunk []byte) error {
		return stream.Send(&toolfleetv1.FetchResultResponse{Chunk: chunk})
	})
	var ce *CallError
	if errors.As(err, &ce) {
		return grpcErr(ce)
	}
	return err // the stream's own error (the client went away)
}

func (s connectService) FetchResult(ctx context.Context, req *connect.Request[toolfleetv1.FetchResultRequest], stream *connect.ServerStream[toolfleetv1.FetchResultResponse]) error {
	err := s.g.fetch(ctx, credentialsOf(req.Header()), req.Msg.GetId(), func(chunk []byte) error {
		return stream.Send(&toolfleetv1.FetchResultResponse{Chunk: chunk})
	})
	var ce *CallError
	if errors.As(err, &ce) {
		return connectErr(ce)
	}
	return err
}
