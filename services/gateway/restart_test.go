package gateway_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	kvv1 "github.com/toolfleet/toolfleet/gen/tools/kv/v1"
	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/services/gateway"
	"github.com/toolfleet/toolfleet/workers/kv/kv"
)

// TestIdempotentRepeatAfterNATSRestart: the repeat of a non-idempotent call
// (KV.Increment, same call_id and input) after the NATS server was stopped and
// started again on the same store folder is answered from the idempotency
// store, and the counter is incremented once. With the store explicitly in
// memory the repeat runs the tool again (the counter shows 2): that is what
// the default file storage prevents.
func TestIdempotentRepeatAfterNATSRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		assets jsassets.Config
		want   int64 // the counter after the repeat
	}{
		{"file storage (default)", jsassets.Config{}, 1},
		{"memory storage (asked for)", jsassets.Config{Overrides: "toolfleet_calls.storage=memory"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			start := func(port int) *natsx.Embedded {
				srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: dir, Port: port})
				if err != nil {
					t.Fatal(err)
				}
				return srv
			}
			srv := start(0)
			_, portText, _ := net.SplitHostPort(srv.Addr())
			port, _ := strconv.Atoi(portText)
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					srv.Shutdown()
				}
			})

			nc, err := nats.Connect(srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			bucket, err := kv.OpenBucket(ctx, js, kv.BucketConfig{Assets: tc.assets})
			if err != nil {
				t.Fatal(err)
			}
			w, _ := startWorker(t, "", func(w *tool.Worker) { kvv1.RegisterKVServiceServer(w, kv.New(bucket)) })
			g := startGateway(t, gateway.Config{NATSURL: srv.URL(), Workers: []string{w.Addr()}, Assets: tc.assets})
			waitTool(t, g, "KV.Increment")
			waitFor(t, "the gateway ready", g.Serving)

			p := &gateway.Principal{Anonymous: true}
			req := &toolfleetv1.CallToolRequest{CallId: "restart-1", ToolId: "KV.Increment",
				Input: mustStruct(t, map[string]any{"key": "restart.counter", "by": 1})}
			first, err := g.Call(ctx, p, req)
			if err != nil || !first.GetSuccess() {
				t.Fatalf("first call: %v %v", first, err)
			}

			// Restart NATS on the same folder and port.
			srv.Shutdown()
			stopped = true
			srv = start(port)
			stopped = false

			// Until the gateway has reconnected, the repeat is refused (never
			// run unprotected); then it is answered.
			var again *toolfleetv1.CallToolResponse
			waitFor(t, "the repeat to be answered", func() bool {
				again, err = g.Call(ctx, p, req)
				if err != nil && status.Code(err) != codes.Unavailable {
					t.Fatalf("repeat: %v, want Unavailable until NATS is back, then an answer", err)
				}
				return err == nil
			})
			var counter int64
			waitFor(t, "the counter readable", func() bool {
				e, err := bucket.Get(ctx, "restart.counter")
				if err != nil {
					return false
				}
				counter, err = strconv.ParseInt(string(e.Value()), 10, 64)
				return err == nil
			})
			if counter != tc.want {
				t.Fatalf("counter = %d after the repeat, want %d", counter, tc.want)
			}
			if tc.want == 1 && !proto.Equal(first, again) {
				t.Fatalf("repeat answered %v, want the stored %v", again, first)
			}
		})
	}
}
