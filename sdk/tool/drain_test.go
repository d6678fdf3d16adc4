package tool_test

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// TestWorkerDrains: on stop, a worker announces DRAINING, turns health
// NOT_SERVING, refuses new calls with UNAVAILABLE and the draining trailer,
// lets the call in flight finish, and only then announces NOT_SERVING.
func TestWorkerDrains(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ch := announcements(t, srv.URL())
	w, stop := runWorker(t, tool.Config{NATSURL: srv.URL(), AnnounceInterval: 500 * time.Millisecond, ShutdownTimeout: 10 * time.Second})
	next(t, ch, tool.HealthServing)
	cc, err := grpc.NewClient(w.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := schematestv1.NewSchemaTestServiceClient(cc)

	inflight := make(chan error, 1)
	sleepEnds := time.Now().Add(1500 * time.Millisecond)
	go func() {
		_, err := c.Sleep(t.Context(), &schematestv1.SleepRequest{Duration: durationpb.New(1500 * time.Millisecond)})
		inflight <- err
	}()
	time.Sleep(100 * time.Millisecond) // the Sleep call is running
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()

	next(t, ch, tool.HealthDraining)
	var trailer metadata.MD
	_, err = c.Types(t.Context(), &schematestv1.TypesRequest{S: "x"}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable || len(trailer.Get(tool.DrainingTrailer)) == 0 {
		t.Fatalf("a new call while draining: %v, trailer %v; want Unavailable with %s", err, trailer, tool.DrainingTrailer)
	}
	if h, err := healthpb.NewHealthClient(cc).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health while draining: %v %v; want NOT_SERVING", h, err)
	}
	select {
	case err := <-inflight:
		t.Fatalf("the call in flight ended (%v) before the drain let it finish", err)
	default:
	}
	next(t, ch, tool.HealthNotServing)
	if early := time.Until(sleepEnds); early > 0 {
		t.Fatalf("NOT_SERVING was announced %v before the call in flight could finish", early)
	}
	if err := <-inflight; err != nil {
		t.Fatalf("the call in flight during the drain: %v; want it to finish", err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
