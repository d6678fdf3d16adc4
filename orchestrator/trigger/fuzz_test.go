package trigger

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/orchestrator/agent"
)

// fakeMsg is a stream message with just what runID reads.
type fakeMsg struct {
	jetstream.Msg
	header nats.Header
	seq    uint64
}

func (m fakeMsg) Headers() nats.Header { return m.header }
func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}}, nil
}

func msgWith(msgID string, seq uint64) fakeMsg {
	h := nats.Header{}
	if msgID != "" {
		h.Set(nats.MsgIdHdr, msgID)
	}
	return fakeMsg{header: h, seq: seq}
}

// FuzzRunID: whatever Nats-Msg-Id a publisher (or a forger) sends, the
// workflow id is valid, the same for the same message, and never the id of
// another message of any trigger: not the stream-sequence form of another
// message, not another Nats-Msg-Id's, not another trigger's.
func FuzzRunID(f *testing.F) {
	for _, s := range []string{"order-1", "s5", "h0123456789abcdef0123456789abcdef", "m1", "eu-1", "with space", "", strings.Repeat("x", 41), "é"} {
		f.Add("orders", s, uint64(5), "orders-eu", "1", uint64(5))
	}
	f.Fuzz(func(t *testing.T, name1, id1 string, seq1 uint64, name2, id2 string, seq2 uint64) {
		if !namePattern.MatchString(name1) || !namePattern.MatchString(name2) {
			return // refused when the configuration loads
		}
		a, err := runID(name1, msgWith(id1, seq1))
		if err != nil {
			t.Fatal(err)
		}
		if err := agent.ValidRunID(a); err != nil {
			t.Fatalf("runID(%q, %q) = %q: %v", name1, id1, a, err)
		}
		if again, _ := runID(name1, msgWith(id1, seq1)); again != a {
			t.Fatalf("runID is not deterministic: %q then %q", a, again)
		}
		b, _ := runID(name2, msgWith(id2, seq2))
		same := name1 == name2 && (id1 != "" && id1 == id2 || id1 == "" && id2 == "" && seq1 == seq2)
		if a == b && !same {
			t.Fatalf("two messages share the workflow id %q: (%q, %q, %d) and (%q, %q, %d)", a, name1, id1, seq1, name2, id2, seq2)
		}
	})
}
