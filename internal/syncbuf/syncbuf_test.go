package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/toolfleet/toolfleet/internal/syncbuf"
)

// TestConcurrentWritesAndReads: under -race, writers and a reader share a
// Buffer, and every write is kept.
func TestConcurrentWritesAndReads(t *testing.T) {
	t.Parallel()
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 400) {
		t.Fatalf("%d bytes kept, want 400", len(got))
	}
}
