package program

import (
	"errors"
	"testing"
	"time"
)

// TestAdmission: budgets add up to the ceiling; a script waits for room up
// to the wait, and a budget over the ceiling is refused at once.
func TestAdmission(t *testing.T) {
	t.Parallel()
	a := NewAdmission(300, 200*time.Millisecond)
	r1, err := a.acquire(200)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.acquire(100)
	if err != nil {
		t.Fatal(err)
	}
	if used, n := a.Used(); used != 300 || n != 2 {
		t.Fatalf("used %d by %d", used, n)
	}
	start := time.Now()
	var ae *admissionError
	if _, err := a.acquire(50); !errors.As(err, &ae) || ae.tooBig {
		t.Fatalf("a full admission: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("refused after %s, want the wait", d)
	}
	go func() { time.Sleep(50 * time.Millisecond); r1(); r1() }() // a second release is a no-op
	r3, err := a.acquire(200)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	r3()
	if used, n := a.Used(); used != 0 || n != 0 {
		t.Fatalf("used %d by %d after every release", used, n)
	}
	if _, err := a.acquire(301); !errors.As(err, &ae) || !ae.tooBig {
		t.Fatalf("a budget over the ceiling: %v", err)
	}
	if rel, err := NewAdmission(0, 0).acquire(1 << 40); err != nil {
		t.Fatalf("no ceiling: %v", err)
	} else {
		rel()
	}
}
