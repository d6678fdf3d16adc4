package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/dynamicconfig"
	"golang.org/x/sync/errgroup"

	"github.com/toolfleet/toolfleet/e2e"
	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/gen/toolfleet/v1/toolfleetv1connect"
	"github.com/toolfleet/toolfleet/internal/devstack"
	"github.com/toolfleet/toolfleet/internal/devstack/devstacktest"
	"github.com/toolfleet/toolfleet/orchestrator/agent"
	"github.com/toolfleet/toolfleet/orchestrator/agentapi"
	"github.com/toolfleet/toolfleet/orchestrator/runner"
	"github.com/toolfleet/toolfleet/orchestrator/visibility"
	"github.com/toolfleet/toolfleet/sdk/llm"
	"github.com/toolfleet/toolfleet/services/console"
)

// consoleRuns is how many runs the runs-list benchmark stores.
const consoleRuns = 10_000

// tickerModel streams deltas whose text is the time it sent them (Unix
// nanoseconds), so a reader measures how long one took to reach it.
type tickerModel struct {
	deltas int
	every  time.Duration
	wait   time.Duration
}

func (m tickerModel) Complete(ctx context.Context, req *llm.Request) (*toolfleetv1.Message, error) {
	return m.Stream(ctx, req, nil)
}

func (m tickerModel) Stream(ctx context.Context, _ *llm.Request, onDelta func(llm.Delta) error) (*toolfleetv1.Message, error) {
	select {
	case <-time.After(m.wait): // the watcher connects meanwhile: deltas are live only
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for range m.deltas {
		if onDelta != nil {
			if err := onDelta(llm.Delta{Text: strconv.FormatInt(time.Now().UnixNano(), 10) + "|"}); err != nil {
				return nil, err
			}
		}
		select {
		case <-time.After(m.every):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &toolfleetv1.Message{Role: toolfleetv1.Role_ROLE_ASSISTANT, Parts: []*toolfleetv1.Part{llm.Text("done")}}, nil
}

// benchAuth accepts "Bearer <subject>" with the runs and programs scopes. No
// header (the console with auth off) is read as "bench", the principal whose
// 10,000 runs are stored, so the console's page lists those runs as the API
// call does.
func benchAuth(_ context.Context, h http.Header) (agentapi.Caller, error) {
	sub, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok {
		sub = "bench"
	}
	return agentapi.Caller{Subject: sub, Scopes: []string{"runs:start", "runs:read", "programs:read"}}, nil
}

// BenchmarkConsole measures, on an embedded Temporal with 10,000 runs
// stored: one page (25 runs) of the runs list as a principal through the
// AgentService (its starter in the visibility query) and as the console
// page, against the baseline of the raw visibility list call with the same
// query; then the time a model's delta takes to reach an open run page's
// event stream (p50/p95). It prints the numbers; it asserts none.
//
// Temporal stores on in-memory SQLite, as in `toolfleet dev`; with
// TOOLFLEET_BENCH_POSTGRES set (host:port or postgres://user:password@host:port)
// both its stores go to that PostgreSQL server, as in production, in a fresh
// pair of databases dropped at the end. TOOLFLEET_BENCH_VISIBILITY_RPS=n
// raises Temporal's per-namespace limit on visibility calls (10 a second by
// default), to tell its waits from the store's.
//
//	go test ./bench -run '^$' -bench Console -benchtime 1x -timeout 40m
func BenchmarkConsole(b *testing.B) {
	stack := devstacktest.Start(b, benchStore(b))
	tc := devstacktest.Client(b, stack)
	fleet := e2e.Start(b, e2e.Options{NATSURL: stack.NATS.URL()})
	models := agent.NewResolver()
	models.Register("ticker", tickerModel{deltas: 200, every: 10 * time.Millisecond, wait: time.Second})
	o, err := runner.Start(b.Context(), runner.Config{TemporalAddress: stack.Temporal.Address(), Namespace: stack.Namespace(),
		TaskQueue: "bench-console", NATSURL: stack.NATS.URL(), GatewayAddress: fleet.Addr, Models: models, MemoryStorage: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(o.Stop)
	cons, err := console.New(console.Config{AuthOff: true})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	path, h := o.AgentService(benchAuth).Handler()
	mux.Handle(path, h)
	path, h = o.ProgramService(benchAuth).Handler() // the header's count of waiting calls reads programs too
	mux.Handle(path, h)
	mux.Handle(console.Prefix, cons)
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	cons.Connect(srv.URL)
	ctx, cancel := context.WithTimeout(b.Context(), 20*time.Minute)
	defer cancel()

	// 10,000 runs of one principal, as starts with their search attributes
	// (on a queue no worker polls: only their visibility rows matter here).
	began := time.Now()
	var started atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range consoleRuns {
		g.Go(func() error {
			_, err := tc.ExecuteWorkflow(gctx, client.StartWorkflowOptions{ID: fmt.Sprintf("bench-run-%05d", i), TaskQueue: "bench-console-stored",
				TypedSearchAttributes: visibility.StartAttributes("bench", visibility.KindRun, "scripted:ticker")}, agent.WorkflowName)
			started.Add(1)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus != 'ContinuedAsNew' AND ToolfleetPrincipal = 'bench'", agent.WorkflowName)
	for {
		n, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: stack.Namespace(), Query: query})
		if err == nil && n.GetCount() >= consoleRuns {
			break
		}
		if ctx.Err() != nil {
			b.Fatalf("the runs never became visible: %v %v", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Logf("stored %d runs in %s", started.Load(), time.Since(began).Round(time.Millisecond))

	runs := toolfleetv1connect.NewAgentServiceClient(srv.Client(), srv.URL)
	// The page is read as a person reads it: one session (a cookie), whose
	// header count of waiting calls the console reuses for a few seconds.
	jar, err := cookiejar.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	browser := &http.Client{Jar: jar}
	const samples = 30
	var raw, api, page, page3 []time.Duration
	b.ResetTimer()
	for range b.N {
		for range samples {
			t0 := time.Now()
			if _, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: stack.Namespace(), PageSize: 25, Query: query}); err != nil {
				b.Fatal(err)
			}
			raw = append(raw, time.Since(t0))

			t0 = time.Now()
			req := connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 25})
			req.Header().Set("Authorization", "Bearer bench")
			res, err := runs.ListRuns(ctx, req)
			if err != nil || len(res.Msg.GetRuns()) != 25 {
				b.Fatalf("ListRuns: %v %v", res, err)
			}
			api = append(api, time.Since(t0))

			// The third page, through two page tokens.
			t0 = time.Now()
			tok := res.Msg.GetNextPageToken()
			for range 2 {
				req := connect.NewRequest(&toolfleetv1.ListRunsRequest{PageSize: 25, PageToken: tok})
				req.Header().Set("Authorization", "Bearer bench")
				r2, err := runs.ListRuns(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				tok = r2.Msg.GetNextPageToken()
			}
			page3 = append(page3, time.Since(t0)/2)

			t0 = time.Now()
			resp, err := browser.Get(srv.URL + console.Prefix + "runs")
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("the console's runs page: %v %v", resp, err)
			}
			_ = resp.Body.Close()
			page = append(page, time.Since(t0))
		}
	}
	b.StopTimer()
	report := func(name string, d []time.Duration) (p50, p95 time.Duration) {
		slices.Sort(d)
		p50, p95 = d[len(d)/2], d[len(d)*95/100]
		b.Logf("%-44s p50 %8s  p95 %8s", name, p50.Round(10*time.Microsecond), p95.Round(10*time.Microsecond))
		return p50, p95
	}
	rawP50, _ := report("raw visibility list (25, same query)", raw)
	apiP50, apiP95 := report("AgentService ListRuns page 1 (25)", api)
	report("AgentService ListRuns next pages (each)", page3)
	pageP50, pageP95 := report("console GET /console/runs (25 rows)", page)
	b.ReportMetric(float64(apiP95.Microseconds())/1000, "listruns-p95-ms")
	b.ReportMetric(float64(pageP95.Microseconds())/1000, "page-p95-ms")
	b.ReportMetric(float64(apiP50)/float64(rawP50), "listruns/raw")
	b.ReportMetric(float64(pageP50)/float64(rawP50), "page/raw")

	// A model's delta to the open run page: the console's SSE stream of a run
	// whose model streams timestamps.
	sreq := connect.NewRequest(&toolfleetv1.StartRunRequest{Model: "scripted:ticker", Messages: []*toolfleetv1.Message{llm.User("tick")}})
	sreq.Header().Set("Authorization", "Bearer bench")
	st, err := runs.StartRun(ctx, sreq)
	if err != nil {
		b.Fatal(err)
	}
	lat := watchDeltas(ctx, b, srv.URL+console.Prefix+"runs/"+st.Msg.GetRunId()+"/events")
	if len(lat) < 50 {
		b.Fatalf("only %d deltas reached the page", len(lat))
	}
	_, dP95 := report(fmt.Sprintf("model delta -> open page (%d deltas)", len(lat)), lat)
	b.ReportMetric(float64(dP95.Microseconds())/1000, "delta-p95-ms")
}

// benchStore is the dev stack configuration of TOOLFLEET_BENCH_POSTGRES:
// SQLite when it is unset.
func benchStore(b *testing.B) devstack.Config {
	var cfg devstack.Config
	if v := os.Getenv("TOOLFLEET_BENCH_VISIBILITY_RPS"); v != "" {
		rps, err := strconv.Atoi(v)
		if err != nil || rps < 1 {
			b.Fatalf("TOOLFLEET_BENCH_VISIBILITY_RPS=%q: want a positive number", v)
		}
		cfg.TemporalDynamicConfig = map[string]any{dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key().String(): rps}
		b.Logf("temporal visibility limit: %d calls a second per namespace", rps)
	}
	addr := os.Getenv("TOOLFLEET_BENCH_POSTGRES")
	if addr == "" {
		b.Log("temporal stores: in-memory SQLite")
		return cfg
	}
	pg, err := devstack.ParsePostgres(addr)
	if err != nil {
		b.Fatal(err)
	}
	// Fresh databases: runs a previous measurement stored must not be listed.
	suffix := "_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pg.Database += suffix
	pg.VisibilityDatabase += suffix
	b.Cleanup(func() { // after the stack's own cleanup stopped Temporal
		if err := pg.DropDatabases(); err != nil {
			b.Logf("drop the benchmark's databases: %v", err)
		}
	})
	b.Logf("temporal stores: PostgreSQL at %s, databases %s and %s", pg.Address, pg.Database, pg.VisibilityDatabase)
	cfg.TemporalPostgres = pg
	return cfg
}

// watchDeltas reads a run page's event stream until the run ends and
// returns each delta's time from the model to here.
func watchDeltas(ctx context.Context, b *testing.B, url string) []time.Duration {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("watch: %v %v", res, err)
	}
	defer res.Body.Close()
	var out []time.Duration
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
			if event == "end" {
				return out
			}
		case strings.HasPrefix(line, "data: ") && event == "delta":
			var d struct{ Text string }
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d) != nil {
				continue
			}
			now := time.Now()
			for _, ts := range strings.Split(strings.TrimSuffix(d.Text, "|"), "|") {
				if n, err := strconv.ParseInt(ts, 10, 64); err == nil {
					out = append(out, now.Sub(time.Unix(0, n)))
				}
			}
		}
	}
	return out
}
