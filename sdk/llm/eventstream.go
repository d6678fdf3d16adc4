package llm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// maxEventFrame bounds one AWS event-stream frame (the format allows 16 MiB).
const maxEventFrame = 16 << 20

// ReadEventStream calls fn for every event of an AWS event stream (the
// binary framing of Bedrock ConverseStream): eventType is the :event-type
// header, payload the frame's payload. A frame whose :message-type is
// "exception" or "error" ends the stream with an error carrying its
// payload; a bad length or CRC fails with ErrMalformed.
func ReadEventStream(ctx context.Context, r io.Reader, fn func(eventType string, payload []byte) error) error {
	prelude := make([]byte, 12)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, prelude); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%w: event stream prelude: %v", ErrMalformed, err)
		}
		total := binary.BigEndian.Uint32(prelude[0:4])
		headersLen := binary.BigEndian.Uint32(prelude[4:8])
		if crc32.ChecksumIEEE(prelude[:8]) != binary.BigEndian.Uint32(prelude[8:12]) {
			return fmt.Errorf("%w: event stream prelude checksum", ErrMalformed)
		}
		if total < 16 || total > maxEventFrame || uint64(headersLen)+16 > uint64(total) {
			return fmt.Errorf("%w: event stream frame length %d (headers %d)", ErrMalformed, total, headersLen)
		}
		frame := make([]byte, total)
		copy(frame, prelude)
		if _, err := io.ReadFull(r, frame[12:]); err != nil {
			return fmt.Errorf("%w: event stream frame: %v", ErrMalformed, err)
		}
		if crc32.ChecksumIEEE(frame[:total-4]) != binary.BigEndian.Uint32(frame[total-4:]) {
			return fmt.Errorf("%w: event stream message checksum", ErrMalformed)
		}
		headers, err := eventHeaders(frame[12 : 12+headersLen])
		if err != nil {
			return err
		}
		payload := frame[12+headersLen : total-4]
		switch headers[":message-type"] {
		case "exception", "error":
			kind := headers[":exception-type"]
			if kind == "" {
				kind = headers[":error-code"]
			}
			return fmt.Errorf("%w: event stream %s: %s", ErrMalformed, kind, payload)
		}
		if err := fn(headers[":event-type"], payload); err != nil {
			return err
		}
	}
}

// eventHeaders reads the string headers of a frame; other header types are
// skipped by their encoded size.
func eventHeaders(b []byte) (map[string]string, error) {
	out := map[string]string{}
	bad := fmt.Errorf("%w: event stream headers", ErrMalformed)
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+1 {
			return nil, bad
		}
		name := string(b[1 : 1+n])
		typ := b[1+n]
		b = b[2+n:]
		size := map[byte]int{0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
		switch typ {
		case 6, 7:
			if len(b) < 2 {
				return nil, bad
			}
			l := int(binary.BigEndian.Uint16(b))
			if len(b) < 2+l {
				return nil, bad
			}
			if typ == 7 {
				out[name] = string(b[2 : 2+l])
			}
			b = b[2+l:]
		default:
			s, ok := size[typ]
			if !ok || len(b) < s {
				return nil, bad
			}
			b = b[s:]
		}
	}
	return out, nil
}

// DecodeEventStream reads a Bedrock ConverseStream response body, calls
// onDelta (may be nil) for each delta and returns the assembled message.
// Returning StopStream from onDelta ends reading early.
func DecodeEventStream(ctx context.Context, r io.Reader, onDelta func(Delta) error) (*toolfleetv1.Message, error) {
	read := func(fn func(eventType string, payload []byte) error) error { return ReadEventStream(ctx, r, fn) }
	return decodeFrames(Bedrock{}.NewStreamDecoder(), read, onDelta)
}
