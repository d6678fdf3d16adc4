package reliability

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
)

// TestNATSOutage stops NATS for 3 s (10 s in the full form) under a steady
// load of read-only calls and starts it again on the same port and data.
// Every call must succeed; afterwards every call's terminal event must be in
// the stream (once) or counted as dropped by the gateway — no silent loss.
func TestNATSOutage(t *testing.T) {
	t.Parallel()
	outage := 3 * time.Second
	if full() {
		outage = 10 * time.Second
	}
	dir := t.TempDir()
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stopNATS := func() { once.Do(srv.Shutdown) }
	_, portText, _ := net.SplitHostPort(srv.Addr())
	port, _ := strconv.Atoi(portText)
	fleet := e2e.Start(t, e2e.Options{NATSURL: srv.URL()})
	c := toolfleetv1.NewToolGatewayServiceClient(tooltest.Dial(t, fleet.Addr))
	in := mustStruct(map[string]any{"a": 2, "b": 3})

	// The load: 100 read-only calls a second, no call ids (events only).
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	ctx, stopLoad := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				resp, err := c.CallTool(cctx, &toolfleetv1.CallToolRequest{ToolId: "Calculator.Add", Input: in})
				calls.Add(1)
				if err != nil || !resp.GetSuccess() {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, errText(err, resp))
				}
			})
		}
	})
	time.Sleep(time.Second)
	stopNATS()
	downAt := calls.Load()
	time.Sleep(outage)
	srv, err = natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: dir, Port: port})
	if err != nil {
		stopLoad()
		wg.Wait()
		t.Fatalf("restart NATS: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	upAt := calls.Load()
	time.Sleep(2 * time.Second)
	stopLoad()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d read-only calls failed (first: %v)", n, calls.Load(), firstErr.Load())
	}

	// Every call's terminal event is in the stream, or counted as dropped.
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subject := gateway.EventSubjectPrefix + "Calculator.Add." + gateway.EventSucceeded
	total := calls.Load()
	var stored, published, dropped int64
	deadline := time.Now().Add(60 * time.Second)
	for {
		stored = countSubject(t, js, subject)
		published, dropped = gatewayEventCounters(t, fleet.Addr)
		if stored+dropped >= total || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if stored > total {
		t.Errorf("%d terminal events in the stream for %d calls: duplicates", stored, total)
	}
	if stored+dropped < total {
		t.Fatalf("silent loss: %d calls, %d terminal events stored, %d events counted as dropped", total, stored, dropped)
	}
	t.Logf("%d calls (%d while NATS was down for %s): 0 failed; %d terminal events stored, %d events published, %d counted as dropped, 0 lost silently",
		total, upAt-downAt, outage, stored, published, dropped)
}

// countSubject counts the stream's messages on subject.
func countSubject(t *testing.T, js jetstream.JetStream, subject string) int64 {
	t.Helper()
	s, err := js.Stream(t.Context(), gateway.DefaultEventStream)
	if err != nil {
		return 0 // not recreated yet
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0
	}
	return int64(info.State.Subjects[subject])
}

// gatewayEventCounters scrapes the gateway's event counters from /metrics.
func gatewayEventCounters(t *testing.T, addr string) (published, dropped int64) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		var v float64
		_, _ = fmt.Sscan(value, &v)
		switch name {
		case "toolfleet_gateway_events_published_total":
			published = int64(v)
		case "toolfleet_gateway_events_dropped_total":
			dropped = int64(v)
		}
	}
	return published, dropped
}
