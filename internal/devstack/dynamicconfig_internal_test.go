package devstack

import (
	"testing"
	"time"

	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
)

// TestLongPollIsShort: the dev server re-polls a waiting history long poll
// every 200 ms, so a wake-up Temporal drops (TestHistoryNotifierDropsBurst)
// costs 200 ms, not the stock 20 s; a stock server keeps Temporal's value,
// and an override wins. Read through Temporal's own dynamic-config reader,
// as the history service reads it. (The latency itself is measured, stock
// against tuned, by BenchmarkDevTemporalOneActivityWorkflow in bench/.)
func TestLongPollIsShort(t *testing.T) {
	t.Parallel()
	interval := func(cfg TemporalConfig) time.Duration {
		col := dynamicconfig.NewCollection(dynamicConfig(cfg), log.NewNoopLogger())
		return dynamicconfig.HistoryLongPollExpirationInterval.Get(col)("default")
	}
	if got := interval(TemporalConfig{}); got != 200*time.Millisecond {
		t.Errorf("tuned long-poll interval %s, want 200ms", got)
	}
	if got := interval(TemporalConfig{Stock: true}); got != 20*time.Second {
		t.Errorf("stock long-poll interval %s, want Temporal's 20s", got)
	}
	key := dynamicconfig.HistoryLongPollExpirationInterval.Key().String()
	if got := interval(TemporalConfig{DynamicConfig: map[string]any{key: time.Second}}); got != time.Second {
		t.Errorf("overridden long-poll interval %s, want 1s", got)
	}
}
