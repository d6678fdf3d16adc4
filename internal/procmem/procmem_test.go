package procmem

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestPeak(t *testing.T) {
	t.Parallel()
	got, err := Peak(0)
	if err != nil {
		t.Fatal(err)
	}
	if got < 1<<20 {
		t.Fatalf("Peak = %d bytes, want at least the 1 MiB any Go test process holds", got)
	}
}

// TestCeiling is not parallel: it sets the process's memory limit.
func TestCeiling(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	debug.SetMemoryLimit(math.MaxInt64)
	if got := Ceiling(123); got != 123 {
		t.Errorf("without GOMEMLIMIT: Ceiling(123) = %d, want the fallback", got)
	}
	debug.SetMemoryLimit(400 << 20)
	if got := Ceiling(123); got != 300<<20 {
		t.Errorf("GOMEMLIMIT 400 MiB: Ceiling = %d, want three quarters of it (%d)", got, 300<<20)
	}
}
