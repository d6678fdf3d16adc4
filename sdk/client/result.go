package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// ErrResultTooLarge is returned by [Client.FetchResultBytes] for a result over
// its bound.
var ErrResultTooLarge = errors.New("client: the result is larger than the bound")

// FetchResult opens the result the gateway kept behind a handle
// ([Result.Handle].Id) and returns its bytes as a stream; Close it. Only the
// principal that made the call can read it. Errors, before any byte: a
// *[ServerError] with NotFound (unknown or expired id, or another principal's:
// one answer for all three), InvalidArgument (not a handle id) or
// FailedPrecondition (a gateway without NATS keeps no results). A read that
// fails midway returns a *[ServerError].
//
// When ctx has no deadline the client's timeout ([WithTimeout]) bounds the
// whole read.
func (c *Client) FetchResult(ctx context.Context, id string) (io.ReadCloser, error) {
	ctx, cancel := c.bound(ctx)
	auth, err := c.auth(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	recv, err := c.rpc.FetchResult(ctx, auth, &toolfleetv1.FetchResultRequest{Id: id})
	if err != nil {
		cancel()
		return nil, fromRPC(ctx, err, "")
	}
	// The first chunk carries a refusal (not found, malformed id): return it
	// here rather than from the first Read.
	first, err := recv()
	if err != nil && !errors.Is(err, io.EOF) {
		cancel()
		return nil, fromRPC(ctx, err, "")
	}
	return &resultReader{ctx: ctx, cancel: cancel, recv: recv, buf: first, err: err}, nil
}

// FetchResultBytes reads the whole result behind a handle (see
// [Client.FetchResult]), refusing one over limit bytes with [ErrResultTooLarge].
func (c *Client) FetchResultBytes(ctx context.Context, id string, limit int64) ([]byte, error) {
	r, err := c.FetchResult(ctx, id)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: result %s is over %d bytes", ErrResultTooLarge, id, limit)
	}
	return b, nil
}

// resultReader reads a FetchResult stream chunk by chunk.
type resultReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	recv   func() ([]byte, error)
	buf    []byte
	// err is the stream's end (io.EOF) or failure, returned once buf is drained.
	err error
}

func (r *resultReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		chunk, err := r.recv()
		switch {
		case errors.Is(err, io.EOF):
			r.err = io.EOF
		case err != nil:
			r.err = fromRPC(r.ctx, err, "")
		}
		r.buf = chunk
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close ends the stream (its context) and releases it.
func (r *resultReader) Close() error {
	r.cancel()
	return nil
}
