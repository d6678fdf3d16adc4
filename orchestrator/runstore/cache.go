package runstore

import (
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
)

// byteCache is an LRU of immutable values bounded by their total size. It is
// safe for concurrent use; a nil *byteCache caches nothing.
type byteCache struct {
	lru      *lru.Cache[string, []byte]
	size     atomic.Int64
	max      int64 // total bytes
	maxEntry int   // larger values are not kept
}

// maxCacheEntries only keeps the LRU's own bookkeeping bounded; the byte
// budget is what limits the cache.
const maxCacheEntries = 1 << 20

func newByteCache(maxBytes int64, maxEntry int) *byteCache {
	c := &byteCache{max: maxBytes, maxEntry: maxEntry}
	// A key's value never changes, so an entry is counted once when added
	// and uncounted once when evicted.
	c.lru, _ = lru.NewWithEvict(maxCacheEntries, func(_ string, v []byte) { c.size.Add(-int64(len(v))) })
	return c
}

// add keeps value under key (the caller must not change value afterwards).
func (c *byteCache) add(key string, value []byte) {
	if c == nil || len(value) > c.maxEntry {
		return
	}
	if found, _ := c.lru.ContainsOrAdd(key, value); found {
		return
	}
	c.size.Add(int64(len(value)))
	for c.size.Load() > c.max {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			return
		}
	}
}

// get returns the value under key (not to be changed by the caller).
func (c *byteCache) get(key string) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	return c.lru.Get(key)
}
