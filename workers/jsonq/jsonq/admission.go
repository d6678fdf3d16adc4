package jsonq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	jsonqv1 "github.com/toolfleet/toolfleet/gen/tools/jsonq/v1"
)

// Query memory of a process (issue 32): each query is bounded (its
// document, the heap it grows, each value a step builds), but a worker runs
// many queries at once, so N queries could take N bounds: a caller sending
// many heavy queries at once could push the process to gigabytes and hurt
// every other caller's queries. The query memory is a ceiling on the sum of
// the reservations of the queries the worker runs: a query starts only when
// its reservation fits what is left, else it waits for room until shortly
// before the caller's deadline and is then refused as busy (retryable).
//
// A query's reservation is its worst case (reservation below). Waiting
// queries are not served in order: whichever fits when room frees goes
// first, so a caller's small query is not queued behind another caller's
// heavy ones (golang.org/x/sync/semaphore is first in, first out: a waiting
// large reservation blocks every smaller one behind it). A heavy query may
// wait out its deadline under a steady load of small ones; it is refused as
// busy, and a replica with room takes its retry.

// DefaultQueryMemory is the query memory of a process without GOMEMLIMIT and
// without Config.QueryMemory: four of the heaviest queries at the default
// limits, or eight small ones.
const DefaultQueryMemory = 2 << 30

// decodeFactor bounds the Go heap a document takes once decoded, per byte
// of its request: jq values are Go maps, slices and interfaces, much bigger
// than their JSON text. Measured (TestDecodeFactor): objects of one key,
// [{"":0},…], take about 52 bytes per byte of text; empty objects 22,
// numbers and arrays 13–16, strings 6. A structured document (document, not
// documentJson) takes less per byte of its protobuf encoding, which is
// bigger than its JSON.
const decodeFactor = 64

// reservation is the most a query of req may make the process hold:
//
//   - its document and variables decoded into jq values: decodeFactor times
//     the request's size. They are decoded before the query's heap baseline
//     is taken, so the heap check does not count them;
//   - what its steps build, results included: the heap check (budget.go)
//     stops a query that grew the heap a third of MaxQueryBytes, and no
//     single step builds more than MaxValueBytes (at most a quarter of
//     MaxQueryBytes; limits.go), so the query's growth stays under
//     MaxQueryBytes.
//
// The request's own bytes were allocated by gRPC before the handler runs;
// they are bounded by the server's message size and stream limits, not here.
func (s *Service) reservation(req *jsonqv1.QueryRequest) int64 {
	return int64(s.cfg.MaxQueryBytes) + decodeFactor*int64(proto.Size(req))
}

// The admission's refusals.
var (
	// errBusy: the reservation did not fit before the wait's end.
	errBusy = errors.New("the jq worker is busy")
	// errTooBig: the reservation is over the whole ceiling; it never fits.
	errTooBig = errors.New("the query needs more memory than the jq worker has")
)

// admission is a process's query memory: the reservations of admitted
// queries add up to at most its ceiling.
type admission struct {
	ceiling int64

	mu      sync.Mutex
	used    int64
	running int
	changed chan struct{} // closed and replaced when memory is released
}

// newAdmission returns an admission of ceiling bytes; nil (no ceiling) when
// ceiling is 0 or less.
func newAdmission(ceiling int64) *admission {
	if ceiling <= 0 {
		return nil
	}
	return &admission{ceiling: ceiling, changed: make(chan struct{})}
}

// acquire reserves n bytes, waiting for room until the wait's end
// (waitEnd). release gives them back; it may be called more than once and
// from any goroutine. The error is errTooBig at once when n is over the
// ceiling, errBusy when the wait ended without room, and ctx's error when
// ctx is done first.
func (a *admission) acquire(ctx context.Context, n int64) (release func(), err error) {
	if a == nil {
		return func() {}, nil
	}
	if n > a.ceiling {
		return nil, fmt.Errorf("%w: it needs %s, this worker's query memory is %s", errTooBig, human(n), human(a.ceiling))
	}
	var timeout <-chan time.Time
	for {
		a.mu.Lock()
		if a.used+n <= a.ceiling {
			a.used += n
			a.running++
			a.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { a.release(n) }) }, nil
		}
		changed, used, running := a.changed, a.used, a.running
		a.mu.Unlock()
		if timeout == nil {
			wait := waitEnd(ctx)
			if wait <= 0 {
				return nil, a.busy(n, used, running)
			}
			timer := time.NewTimer(wait)
			defer timer.Stop()
			timeout = timer.C
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, a.busy(n, used, running)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (a *admission) busy(n, used int64, running int) error {
	return fmt.Errorf("%w: %d queries hold %s of its %s of query memory, this one needs %s", errBusy,
		running, human(used), human(a.ceiling), human(n))
}

func (a *admission) release(n int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.used -= n
	a.running--
	close(a.changed)
	a.changed = make(chan struct{})
}

// inUse returns the reservations held and the queries holding them.
func (a *admission) inUse() (int64, int) {
	if a == nil {
		return 0, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used, a.running
}

// Bounds of a query's wait for room.
const (
	// maxAdmissionWait bounds the wait of a call without a deadline (the
	// worker SDK gives every call its contract's timeout, 5 s for Query).
	maxAdmissionWait = 5 * time.Second
	// refusalMargin is the most of the caller's remaining time kept to send
	// the refusal: a refusal after the caller's deadline reaches nobody.
	refusalMargin = 250 * time.Millisecond
)

// waitEnd is how long a query may wait for room: until shortly before the
// caller's deadline (a tenth of the time left, at most refusalMargin), never
// past it; maxAdmissionWait without a deadline.
func waitEnd(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return maxAdmissionWait
	}
	left := time.Until(deadline)
	return left - min(left/10, refusalMargin)
}

// human writes n bytes in MiB (or GiB from 10 GiB on).
func human(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
