package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/sdk/llm/internal/convtest"
)

// eventFrame encodes one AWS event-stream frame with string headers.
func eventFrame(headers [][2]string, payload []byte) []byte {
	var h bytes.Buffer
	for _, kv := range headers {
		h.WriteByte(byte(len(kv[0])))
		h.WriteString(kv[0])
		h.WriteByte(7)
		_ = binary.Write(&h, binary.BigEndian, uint16(len(kv[1])))
		h.WriteString(kv[1])
	}
	total := uint32(12 + h.Len() + len(payload) + 4)
	var f bytes.Buffer
	_ = binary.Write(&f, binary.BigEndian, total)
	_ = binary.Write(&f, binary.BigEndian, uint32(h.Len()))
	_ = binary.Write(&f, binary.BigEndian, crc32.ChecksumIEEE(f.Bytes()))
	f.Write(h.Bytes())
	f.Write(payload)
	_ = binary.Write(&f, binary.BigEndian, crc32.ChecksumIEEE(f.Bytes()))
	return f.Bytes()
}

// bedrockEventStream frames the JSONL transcript the way ConverseStream
// sends it.
func bedrockEventStream(t testing.TB) []byte {
	t.Helper()
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(convtest.ReadTestdata(t, "bedrock/stream_parallel.jsonl")))
	for sc.Scan() {
		var ev map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		for name, payload := range ev {
			out.Write(eventFrame([][2]string{{":message-type", "event"}, {":event-type", name}, {":content-type", "application/json"}}, payload))
		}
	}
	return out.Bytes()
}

func TestDecodeEventStream(t *testing.T) {
	t.Parallel()
	stream := bedrockEventStream(t)
	corrupt := bytes.Clone(stream)
	corrupt[len(corrupt)-1] ^= 0xff
	exception := append(bytes.Clone(stream[:0]), eventFrame([][2]string{{":message-type", "exception"}, {":exception-type", "throttlingException"}}, []byte(`{"message":"slow down"}`))...)
	tests := []struct {
		name    string
		body    []byte
		wantErr error
	}{
		{"transcript", stream, nil},
		{"bad checksum", corrupt, llm.ErrMalformed},
		{"truncated", stream[:len(stream)-3], llm.ErrMalformed},
		{"exception frame", exception, llm.ErrRetryable},
		{"error frame", eventFrame([][2]string{{":message-type", "error"}, {":error-code", "validationException"}, {":error-message", "bad input"}}, nil), llm.ErrPermanent},
		{"cut inside a payload", stream[:len(stream)-20], llm.ErrMalformed},
		{"cut inside a prelude", append(bytes.Clone(stream), stream[:6]...), llm.ErrMalformed},
		{"oversized frame", append([]byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0}, make([]byte, 8)...), llm.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var deltas []string
			msg, err := DecodeEventStream(t.Context(), bytes.NewReader(tt.body), func(d llm.Delta) error {
				if d.Text != "" {
					deltas = append(deltas, d.Text)
				}
				return nil
			})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkStreamed(t, msg, deltas, []string{"Computing ", "both."}, "Computing both.",
				[]string{`Calculator_Add(tooluse_a)={"a":2,"b":3}`, `Calculator_Mul(tooluse_b)={"a":4,"b":5}`}, nil, "")
		})
	}
}

// TestReadEventStreamTransportError: a connection that drops mid-stream is
// reported as the transport's error (retryable), not as a malformed frame.
func TestReadEventStreamTransportError(t *testing.T) {
	t.Parallel()
	stream := bedrockEventStream(t)
	dropped := io.MultiReader(bytes.NewReader(stream[:len(stream)/2]), iotest.ErrReader(syscall.ECONNRESET))
	_, err := DecodeEventStream(t.Context(), dropped, nil)
	if !errors.Is(err, syscall.ECONNRESET) || errors.Is(err, llm.ErrMalformed) {
		t.Fatalf("err = %v, want the connection reset", err)
	}
	if retry, _ := llm.Retryable(t.Context(), err); !retry {
		t.Errorf("a dropped stream is not retryable: %v", err)
	}
}
