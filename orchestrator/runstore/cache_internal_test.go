package runstore

import (
	"fmt"
	"testing"
)

func TestByteCacheBudget(t *testing.T) {
	c := newByteCache(100, 40)
	for i := range 10 {
		c.add(fmt.Sprint(i), make([]byte, 30))
	}
	if got := c.size.Load(); got > 100 || got != int64(30*c.lru.Len()) {
		t.Fatalf("size %d for %d entries, want ≤ 100 and 30 per entry", got, c.lru.Len())
	}
	if _, ok := c.get("0"); ok {
		t.Error("the oldest entry survived past the budget")
	}
	if _, ok := c.get("9"); !ok {
		t.Error("the newest entry was evicted")
	}
	c.add("9", make([]byte, 30)) // the same key again is not counted twice
	if got := c.size.Load(); got != int64(30*c.lru.Len()) {
		t.Errorf("size %d after re-adding a key, want %d", got, 30*c.lru.Len())
	}
	c.add("big", make([]byte, 41))
	if _, ok := c.get("big"); ok {
		t.Error("a value over the entry limit was kept")
	}
	var none *byteCache
	none.add("x", []byte("y"))
	if _, ok := none.get("x"); ok {
		t.Error("a nil cache returned a value")
	}
}
