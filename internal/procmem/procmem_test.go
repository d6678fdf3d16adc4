package procmem

import "testing"

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
