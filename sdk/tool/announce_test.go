package tool_test

import (
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	schematestv1 "github.com/toolfleet/toolfleet/gen/tools/schematest/v1"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
)

// announcements subscribes to the registry subject and decodes what arrives.
func announcements(t *testing.T, url string) <-chan *toolfleetv1.WorkerAnnouncement {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	ch := make(chan *toolfleetv1.WorkerAnnouncement, 1024)
	if _, err := nc.Subscribe(tool.AnnounceSubject, func(m *nats.Msg) {
		var a toolfleetv1.WorkerAnnouncement
		if err := protojson.Unmarshal(m.Data, &a); err != nil {
			t.Errorf("bad announcement %q: %v", m.Data, err)
			return
		}
		select {
		case ch <- &a:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

func next(t *testing.T, ch <-chan *toolfleetv1.WorkerAnnouncement, health string) *toolfleetv1.WorkerAnnouncement {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case a := <-ch:
			if a.GetHealth() == health {
				return a
			}
		case <-timeout:
			t.Fatalf("no %s announcement", health)
			return nil
		}
	}
}

// runWorker runs the schema-test toolkit in a worker until the test ends; stop
// stops it early and returns Run's result.
func runWorker(t *testing.T, cfg tool.Config) (w *tool.Worker, stop func() error) {
	t.Helper()
	return tooltest.Start(t, cfg, func(w *tool.Worker) { schematestv1.RegisterSchemaTestServiceServer(w, testService{}) })
}

func TestWorkerAnnounces(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ch := announcements(t, srv.URL())
	w, stop := runWorker(t, tool.Config{
		NATSURL: srv.URL(), WorkerID: "w-1", AdvertiseAddr: "worker.example:9000",
		AnnounceInterval: 50 * time.Millisecond,
	})

	a := next(t, ch, tool.HealthServing)
	if a.GetWorkerId() != "w-1" || a.GetAddress() != "worker.example:9000" || a.GetTtl().AsDuration() != 150*time.Millisecond ||
		a.GetTime() == nil || !a.GetCallJournal() {
		t.Fatalf("announcement = %v", a)
	}
	if len(a.GetToolkits()) != 1 || a.GetToolkits()[0].GetName() != "SchemaTest" ||
		a.GetToolkits()[0].GetVersion() != "0.3.1" || a.GetToolkits()[0].GetService() != "tools.schematest.v1.SchemaTestService" {
		t.Fatalf("toolkits = %v", a.GetToolkits())
	}
	if w.Addr() == "" {
		t.Fatal("no address")
	}
	// Heartbeats keep coming.
	next(t, ch, tool.HealthServing)

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if a := next(t, ch, tool.HealthNotServing); a.GetWorkerId() != "w-1" {
		t.Fatalf("goodbye = %v", a)
	}
}

func TestWorkerServesWhileNATSIsAway(t *testing.T) {
	t.Parallel()
	// A port where nothing listens yet.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close()

	w, _ := runWorker(t, tool.Config{
		NATSURL:          "nats://" + lis.Addr().String(),
		AnnounceInterval: 50 * time.Millisecond,
		WorkerID:         "w-away",
	})
	// The worker serves without NATS.
	conn := tooltest.Dial(t, w.Addr())
	if _, err := schematestv1.NewSchemaTestServiceClient(conn).Panic(callCtx(t), &schematestv1.PanicRequest{}); err != nil {
		t.Fatalf("call without NATS: %v", err)
	}
	// NATS arrives later: announcements start.
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{Port: port, StoreDir: t.TempDir()})
	if err != nil {
		t.Skipf("port %d was taken meanwhile: %v", port, err)
	}
	t.Cleanup(srv.Shutdown)
	ch := announcements(t, srv.URL())
	if a := next(t, ch, tool.HealthServing); a.GetWorkerId() != "w-away" {
		t.Fatalf("announcement = %v", a)
	}
}

// A registry that starts after its workers probes them instead of waiting a whole
// heartbeat interval (here an hour) to learn about them.
func TestWorkerAnswersDiscoveryProbe(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ch := announcements(t, srv.URL())
	runWorker(t, tool.Config{NATSURL: srv.URL(), WorkerID: "w-probe", AnnounceInterval: time.Hour})
	next(t, ch, tool.HealthServing) // the announcement at start

	nc, err := nats.Connect(srv.URL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	if err := nc.Publish(tool.DiscoverSubject, nil); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if a := next(t, ch, tool.HealthServing); a.GetWorkerId() != "w-probe" {
		t.Fatalf("answer to the probe = %v", a)
	}
}
