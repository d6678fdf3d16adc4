package wire

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// lossy lists what a format cannot carry, so round trips compare only what it can.
type lossy struct{ thinking, isError, model, parallel bool }

var formatLosses = map[string]lossy{
	"openai":           {thinking: true, isError: true},
	"openai-responses": {isError: true},
	"anthropic":        {parallel: false},
	"gemini":           {model: true, parallel: true},
	"bedrock":          {model: true, parallel: true},
}

// withoutLosses returns a copy of msgs without what the format drops.
func withoutLosses(l lossy, msgs []*toolfleetv1.Message) []*toolfleetv1.Message {
	var out []*toolfleetv1.Message
	for _, m := range msgs {
		m = proto.Clone(m).(*toolfleetv1.Message)
		var parts []*toolfleetv1.Part
		for _, p := range m.Parts {
			if l.thinking && p.GetThinking() != nil {
				continue
			}
			if r := p.GetToolResult(); r != nil && l.isError {
				r.IsError = false
			}
			parts = append(parts, p)
		}
		m.Parts = parts
		out = append(out, m)
	}
	return out
}

func assertMessages(t *testing.T, want, got []*toolfleetv1.Message) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("got %d messages, want %d:\n got: %s\nwant: %s", len(got), len(want), dump(got), dump(want))
	}
	for i := range want {
		if !proto.Equal(want[i], got[i]) {
			t.Fatalf("message %d differs:\n got: %s\nwant: %s", i, protojson.Format(got[i]), protojson.Format(want[i]))
		}
	}
}

func dump(msgs []*toolfleetv1.Message) string {
	s := ""
	for _, m := range msgs {
		s += protojson.Format(m) + "\n"
	}
	return s
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if string(want) != string(got) {
		t.Fatalf("%s differs from golden:\n got: %s\nwant: %s", name, got, want)
	}
}
