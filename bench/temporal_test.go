package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
)

// BenchmarkDevTemporalOneActivityWorkflow starts a one-activity workflow and waits
// for its result, alternating between a dev server with Temporal's stock dynamic
// config (the baseline) and toolfleet's latency-tuned one, in the same run.
//
//	go test ./bench -run '^$' -bench DevTemporal -benchtime 200x
func BenchmarkDevTemporalOneActivityWorkflow(b *testing.B) {
	type side struct {
		name string
		c    client.Client
		lat  []time.Duration
	}
	var sides []*side
	for _, stock := range []bool{true, false} {
		s := devstacktest.Start(b, devstack.Config{StockTemporal: stock})
		c := devstacktest.Client(b, s)
		devstacktest.StartWorker(b, c, "bench")
		name := "tuned"
		if stock {
			name = "stock"
		}
		sides = append(sides, &side{name: name, c: c})
	}

	b.ResetTimer()
	for i := range b.N {
		for _, sd := range sides {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			began := time.Now()
			run, err := sd.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("b-%d", i), TaskQueue: "bench"}, devstacktest.OneActivity, "x")
			if err == nil {
				var out string
				err = run.Get(ctx, &out)
			}
			cancel()
			if err != nil {
				b.Fatalf("%s run %d: %v", sd.name, i, err)
			}
			sd.lat = append(sd.lat, time.Since(began))
		}
	}
	b.StopTimer()

	pct := func(d []time.Duration, p int) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[(len(s)-1)*p/100]
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	stock, tuned := sides[0], sides[1]
	for _, sd := range sides {
		b.ReportMetric(ms(pct(sd.lat, 50)), sd.name+"-p50-ms")
		b.ReportMetric(ms(pct(sd.lat, 99)), sd.name+"-p99-ms")
	}
	b.ReportMetric(float64(pct(stock.lat, 50))/float64(pct(tuned.lat, 50)), "p50-speedup-x")
}
