package gateway_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/journal"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/services/gateway/idempotency"
)

// sideEffects serves SchemaTest.Sleep (neither read-only nor idempotent),
// counting the calls that reached the tool; while hold is set, each call
// waits for it to close.
type sideEffects struct {
	schematestv1.UnimplementedSchemaTestServiceServer
	ran  atomic.Int64
	hold atomic.Pointer[chan struct{}]
}

func (s *sideEffects) Sleep(ctx context.Context, _ *schematestv1.SleepRequest) (*schematestv1.SleepResponse, error) {
	s.ran.Add(1)
	if h := s.hold.Load(); h != nil {
		select {
		case <-*h:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &schematestv1.SleepResponse{Slept: true}, nil
}

// cutProxy forwards TCP connections to a worker until cut closes every one of
// them, as a worker's death or a broken network would.
type cutProxy struct {
	lis    net.Listener
	target atomic.Value // string
	mu     sync.Mutex
	conns  []net.Conn
}

func startCutProxy(t *testing.T) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis}
	t.Cleanup(func() { _ = lis.Close(); p.cut() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			target, _ := p.target.Load().(string)
			w, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, w)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(w, c); _ = w.Close() }()
			go func() { _, _ = io.Copy(c, w); _ = c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) addr() string { return p.lis.Addr().String() }

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, like a killed process's
		}
		_ = c.Close()
	}
	p.conns = nil
}

// journaledWorker starts a worker that keeps the call journal, reached by the
// gateway through a proxy the test can cut.
func journaledWorker(t *testing.T, natsURL string, opts ...grpc.ServerOption) (*sideEffects, *cutProxy, *tool.Worker) {
	t.Helper()
	svc := &sideEffects{}
	p := startCutProxy(t)
	w, _ := tooltest.Start(t, tool.Config{Name: "journaled", NATSURL: natsURL, AdvertiseAddr: p.addr(),
		AnnounceInterval: 100 * time.Millisecond, ServerOptions: opts},
		func(w *tool.Worker) { schematestv1.RegisterSchemaTestServiceServer(w, svc) })
	p.target.Store(w.Addr())
	return svc, p, w
}

func sleepReq(callID string) *toolfleetv1.CallToolRequest {
	return &toolfleetv1.CallToolRequest{CallId: callID, ToolId: "SchemaTest.Sleep", Input: &structpb.Struct{}}
}

// TestJournalCutAfterStart: the connection to a worker breaks after the tool
// started (a network cut, a gateway-side reset). The gateway does not answer
// "may have run": the worker ran the tool to its end and recorded its answer,
// which the gateway returns. The tool ran once.
func TestJournalCutAfterStart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	svc, p, _ := journaledWorker(t, srv.URL())
	_, calcAddr, _ := calculatorWorker(t, "") // for waitStore
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calcAddr}})
	waitTool(t, g, "SchemaTest.Sleep")
	waitStore(t, g)

	hold := make(chan struct{})
	svc.hold.Store(&hold)
	answer := make(chan error, 1)
	var resp *toolfleetv1.CallToolResponse
	go func() {
		var err error
		resp, err = g.Call(t.Context(), anon(), sleepReq("cut-after"))
		answer <- err
	}()
	waitFor(t, "the tool to start", func() bool { return svc.ran.Load() == 1 })
	p.cut()
	time.Sleep(200 * time.Millisecond) // the gateway sees the cut and fences
	close(hold)
	if err := <-answer; err != nil || !resp.GetSuccess() {
		t.Fatalf("call cut after the start: %v %v, want the tool's answer from the journal", resp, err)
	}
	svc.hold.Store(nil)
	if r, err := g.Call(t.Context(), anon(), sleepReq("cut-after")); err != nil || !r.GetSuccess() {
		t.Fatalf("repeat: %v %v", r, err)
	}
	if n := svc.ran.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}

// TestJournalCutBeforeStart: the worker's connection dies with the request
// on its way, before the tool starts (a killed worker). The caller is told the
// call did not run — never "may have run" — and its retry with the same
// call_id runs it, once.
func TestJournalCutBeforeStart(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	var p atomic.Pointer[cutProxy]
	var first atomic.Bool
	// The first request is held at the worker's door until its connection is cut.
	cutFirst := grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if strings.HasSuffix(info.FullMethodName, "/Sleep") && first.CompareAndSwap(false, true) {
			p.Load().cut()
		}
		return ctx, nil
	})
	svc, proxy, _ := journaledWorker(t, srv.URL(), cutFirst)
	p.Store(proxy)
	_, calcAddr, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calcAddr}})
	waitTool(t, g, "SchemaTest.Sleep")
	waitStore(t, g)

	r, err := g.Call(t.Context(), anon(), sleepReq("cut-before"))
	switch {
	case err == nil:
		// grpc-go may retry a stream its server never saw on a new connection
		// (transparent retry): the call then ran there, once.
		if !r.GetSuccess() || svc.ran.Load() != 1 {
			t.Fatalf("call retried by the transport: %v, ran %d times; want it run once", r, svc.ran.Load())
		}
		return
	case gateway.CodeOf(err) != codes.Unavailable || !strings.Contains(err.Error(), "did not run"):
		t.Fatalf("call whose worker died before the tool: %v, want Unavailable saying it did not run", err)
	}
	if n := svc.ran.Load(); n != 0 {
		t.Fatalf("the tool ran %d times before its connection was cut", n)
	}
	waitFor(t, "the retry to run", func() bool {
		r, err = g.Call(t.Context(), anon(), sleepReq("cut-before"))
		return err == nil
	})
	if !r.GetSuccess() || svc.ran.Load() != 1 {
		t.Fatalf("retry: %v, ran %d times; want it run once", r, svc.ran.Load())
	}
}

// TestJournalAnswersForADeadGateway: a gateway took a call, handed it to a
// worker and died before storing the answer (a kill -9). Another replica,
// asked again with the same call_id, answers with the answer the worker
// recorded, and does not run the tool again; a stale attempt of the dead
// gateway that arrives late does not run either.
func TestJournalAnswersForADeadGateway(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	svc, _, w := journaledWorker(t, srv.URL())
	_, calcAddr, _ := calculatorWorker(t, "")
	g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{calcAddr}})
	waitTool(t, g, "SchemaTest.Sleep")
	waitStore(t, g)

	// The dead gateway: it claimed the call in the same bucket, as a replica does.
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{}.IdempotencyConfig()
	store, err := idempotency.New(t.Context(), quiet(), nc, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := sleepReq("dead-gateway")
	digest, _ := idempotency.DigestOf(req.GetInput())
	claim, err := store.Acquire(t.Context(), idempotency.Key{Principal: anon().ID(), Tool: "SchemaTest.Sleep", CallID: req.GetCallId()}, digest, idempotency.Options{})
	if err != nil || !claim.Owned() {
		t.Fatalf("claim: %v %v", claim, err)
	}
	conn, err := grpc.NewClient(w.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stale := claim.Journal()
	ctx := metadata.AppendToOutgoingContext(t.Context(), journal.ClaimKey, stale.String(), tool.CallIDKey, req.GetCallId())
	if _, err := schematestv1.NewSchemaTestServiceClient(conn).Sleep(ctx, &schematestv1.SleepRequest{}); err != nil {
		t.Fatalf("the dead gateway's call: %v", err)
	}
	// ... and it died here, before storing the response.

	r, err := g.Call(t.Context(), anon(), req)
	if err != nil || !r.GetSuccess() {
		t.Fatalf("the retry on another replica: %v %v, want the recorded answer", r, err)
	}
	var trailer metadata.MD
	_, err = schematestv1.NewSchemaTestServiceClient(conn).Sleep(ctx, &schematestv1.SleepRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable || len(trailer.Get(journal.NotStartedTrailer)) == 0 || trailer.Get(journal.NotStartedTrailer)[0] != journal.ClaimLost {
		t.Fatalf("the dead gateway's attempt arriving late: %v %v, want refused as claim-lost", err, trailer)
	}
	if n := svc.ran.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want 1", n)
	}
}
