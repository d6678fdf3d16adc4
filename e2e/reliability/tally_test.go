package reliability

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/services/gateway/auth"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
)

// workerStarted reports whether the gateway's call journal shows that a
// worker recorded the start of a direct call (anonymous, KV.Increment): a
// call answered "may have run" has an unknown (U) record whose reason says a
// worker had recorded the start (S) or the call was cut while the tool ran
// (C); any other record means it was refused as "may have run" though no
// worker had started it. known is false for calls of programs and runs
// (other principals and call ids) and when the bucket cannot be read.
func workerStarted(ctx context.Context, js jetstream.JetStream, c *logicalCall) (started, known bool) {
	if c.source != "direct" {
		return false, false
	}
	kv, err := js.KeyValue(ctx, idempotency.DefaultBucket)
	if err != nil {
		return false, false
	}
	e, err := kv.Get(ctx, idempotency.Key{Principal: auth.AnonymousSubject, Tool: "KV.Increment", CallID: c.callID}.Entry())
	if err != nil {
		return false, errors.Is(err, jetstream.ErrKeyNotFound) // no record: nobody said "may have run" from it
	}
	r, err := journal.Decode(e.Value())
	if err != nil || r.Kind != journal.KindUnknown || len(r.Payload) == 0 {
		return false, true
	}
	reason := journal.Reason(r.Payload[0])
	return reason == journal.ReasonStarted || reason == journal.ReasonCut, true
}

// counters reads every call's counter from the KV worker's bucket (a
// missing key is 0).
func counters(ctx context.Context, t *testing.T, js jetstream.JetStream, calls []*logicalCall) map[string]int64 {
	t.Helper()
	kv, err := js.KeyValue(ctx, "agent_memory")
	if err != nil {
		t.Fatalf("the KV worker's bucket: %v", err)
	}
	out := make(map[string]int64, len(calls))
	for _, c := range calls {
		e, err := kv.Get(ctx, c.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			out[c.key] = 0
		case err != nil:
			t.Fatalf("read counter %s: %v", c.key, err)
		default:
			n, err := strconv.ParseInt(string(e.Value()), 10, 64)
			if err != nil {
				t.Fatalf("counter %s holds %q", c.key, e.Value())
			}
			out[c.key] = n
		}
	}
	return out
}

// tally is one row of the table: calls of a class by their counter.
type tally struct{ calls, zero, one, more int }

// tallyCalls counts the calls by source, class and counter, and logs the
// table (docs/reliability.md quotes it).
func tallyCalls(t *testing.T, title string, calls []*logicalCall, count map[string]int64) map[string]*tally {
	t.Helper()
	rows := map[string]*tally{}
	for _, c := range calls {
		k := c.source + " / " + c.class
		r := rows[k]
		if r == nil {
			r = &tally{}
			rows[k] = r
		}
		r.calls++
		switch n := count[c.key]; {
		case n == 0:
			r.zero++
		case n == 1:
			r.one++
		default:
			r.more++
		}
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d logical KV.Increment calls\n", title, len(calls))
	fmt.Fprintf(&b, "  %-34s %7s %10s %10s %11s\n", "source / answer", "calls", "counter 0", "counter 1", "counter ≥2")
	for _, k := range keys {
		r := rows[k]
		fmt.Fprintf(&b, "  %-34s %7d %10d %10d %11d\n", k, r.calls, r.zero, r.one, r.more)
	}
	t.Log(b.String())
	return rows
}

// checkCalls asserts the hard invariants over the classified calls:
//   - no counter at 2 or more: no call ran twice;
//   - every success has counter 1: no answered call was lost;
//   - no NOT_FOUND: the tool is known (and such a call must not have run);
//   - a call answered with another definite failure did not run (the caller
//     was told it failed: it must not have taken effect);
//   - a "may have run" whose journal says it never started (once there is a
//     journal, workerStarted).
//
// "did not run" (the caller gave up) and "may have run" are counted by their
// counter in the table, not asserted.
func checkCalls(ctx context.Context, t *testing.T, js jetstream.JetStream, calls []*logicalCall, count map[string]int64) {
	t.Helper()
	var twice, lost, notFound, failedButRan, refusedForNothing int
	report := func(n *int, format string, args ...any) {
		*n++
		if *n <= 5 {
			t.Errorf(format, args...)
		}
	}
	for _, c := range calls {
		n := count[c.key]
		if n >= 2 {
			report(&twice, "%s call %s (%s) ran %d times", c.source, c.callID, c.class, n)
		}
		switch c.class {
		case classSuccess:
			if n == 0 {
				report(&lost, "%s call %s answered success but its counter is 0", c.source, c.callID)
			}
		case classNotFound:
			report(&notFound, "%s call %s: NOT_FOUND for a known tool (counter %d): %s", c.source, c.callID, n, c.detail)
		case classOther:
			if n != 0 {
				report(&failedButRan, "%s call %s was told it failed, but it ran (counter %d): %s", c.source, c.callID, n, c.detail)
			}
		case classMayHaveRun:
			if started, known := workerStarted(ctx, js, c); known && !started && n == 0 {
				report(&refusedForNothing, "%s call %s answered \"may have run\", but no worker recorded its start", c.source, c.callID)
			}
		}
	}
	if twice+lost+notFound+failedButRan+refusedForNothing > 0 {
		t.Errorf("hard invariants: %d ran twice, %d successes lost, %d NOT_FOUND, %d told failed but ran, %d refused as \"may have run\" though never started",
			twice, lost, notFound, failedButRan, refusedForNothing)
	}
}
