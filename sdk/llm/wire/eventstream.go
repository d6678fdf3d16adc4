package wire

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// ReadEventStream calls fn for every event of an AWS event stream (the
// binary framing of Bedrock ConverseStream), decoded by AWS's own decoder
// (aws/protocol/eventstream, which bounds a frame at 16 MiB of payload and
// 128 KiB of headers): eventType is the :event-type header, payload the
// frame's payload. A frame whose :message-type is "exception" or "error"
// ends the stream with an *APIError classified by its type; a bad length,
// a CRC mismatch or a frame cut short fails with ErrMalformed.
func ReadEventStream(ctx context.Context, r io.Reader, fn func(eventType string, payload []byte) error) error {
	dec := eventstream.NewDecoder()
	cr := &countingReader{r: r}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		before := cr.n
		// A fresh payload buffer per frame: fn may keep the payload.
		msg, err := dec.Decode(cr, nil)
		if err != nil {
			if errors.Is(err, io.EOF) && cr.n == before {
				return nil // the stream ended between frames
			}
			if cr.err != nil && !errors.Is(cr.err, io.EOF) {
				return fmt.Errorf("llm: read event stream: %w", cr.err)
			}
			return fmt.Errorf("%w: event stream frame: %v", llm.ErrMalformed, err)
		}
		header := func(name string) string {
			if v := msg.Headers.Get(name); v != nil {
				if s, ok := v.(eventstream.StringValue); ok {
					return string(s)
				}
			}
			return ""
		}
		switch header(":message-type") {
		case "exception":
			return bedrockStreamError(header(":exception-type"), msg.Payload)
		case "error":
			return llm.NewStreamError("bedrock", header(":error-code"), header(":error-message"))
		}
		if err := fn(header(":event-type"), msg.Payload); err != nil {
			return err
		}
	}
}

// countingReader counts the bytes read, so an EOF can be told apart: at a
// frame boundary it ends the stream, inside a frame it truncates it. It
// keeps the underlying reader's error, so a dropped connection is reported
// as such rather than as a malformed frame.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil {
		c.err = err
	}
	return n, err
}

// DecodeEventStream reads a Bedrock ConverseStream response body, calls
// onDelta (may be nil) for each delta and returns the assembled message.
// Returning StopStream from onDelta ends reading early.
func DecodeEventStream(ctx context.Context, r io.Reader, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	read := func(fn func(eventType string, payload []byte) error) error { return ReadEventStream(ctx, r, fn) }
	return decodeFrames(Bedrock{}.NewStreamDecoder(), read, onDelta)
}
