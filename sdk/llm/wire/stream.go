package wire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/llm"
)

// StreamDecoder turns one provider's stream events into deltas and, at the
// end, the assembled message.
type StreamDecoder interface {
	// Decode handles one server-sent event; event is the SSE event name
	// (empty when the provider sends none) and data its payload.
	Decode(event string, data []byte) ([]llm.Delta, error)
	// Message assembles the turn; it fails when a tool call's arguments
	// do not decode (the error names the call).
	Message() (*toolfleetv1.Message, error)
}

// maxSSELine bounds one SSE line; tool arguments can be large.
const maxSSELine = 8 << 20

// ReadSSE calls fn for every server-sent event in r until EOF, an error from
// fn, or ctx is done. Multi-line data is joined with "\n"; comments are skipped.
func ReadSSE(ctx context.Context, r io.Reader, fn func(event string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxSSELine)
	var event string
	var data bytes.Buffer
	hasData := false
	dispatch := func() error {
		if !hasData {
			event = ""
			return nil
		}
		err := fn(event, bytes.Clone(data.Bytes()))
		event, hasData = "", false
		data.Reset()
		return err
	}
	for sc.Scan() {
		if err := ctx.Err(); err != nil {
			return err
		}
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			if err := dispatch(); err != nil {
				return err
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("llm: read stream: %w", err)
	}
	return dispatch()
}

// DecodeStream reads a whole SSE stream in format f, calls onDelta (may be
// nil) for each delta as it arrives and returns the assembled message.
func DecodeStream(ctx context.Context, f Format, r io.Reader, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	read := func(fn func(event string, data []byte) error) error { return ReadSSE(ctx, r, fn) }
	return decodeFrames(f.NewStreamDecoder(), read, onDelta)
}

// decodeFrames feeds every frame that read produces to dec, forwards the deltas to
// onDelta (may be nil) and returns the assembled message. A read that ends with
// StopStream ended the stream early on purpose, not in error.
func decodeFrames(dec StreamDecoder, read func(func(event string, data []byte) error) error, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	err := read(func(event string, data []byte) error {
		deltas, err := dec.Decode(event, data)
		if err != nil {
			return err
		}
		for _, d := range deltas {
			if onDelta != nil {
				if err := onDelta(d); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, llm.StopStream) {
		return nil, err
	}
	return dec.Message()
}
