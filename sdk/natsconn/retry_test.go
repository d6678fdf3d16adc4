package natsconn_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// A component started before NATS waits for it: the server comes up a second
// later on the address the component was given, and the component connects and
// creates its KV bucket then, instead of failing at once as Connect does.
func TestConnectRetryWaitsForALateServer(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	var o natsconn.Options

	// Today's behaviour, the reason for ConnectRetry: no server, immediate failure.
	if _, err := o.Connect(url, "early"); !errors.Is(err, nats.ErrNoServers) || !natsconn.Temporary(err) {
		t.Fatalf("Connect with no server: %v, want a temporary ErrNoServers", err)
	}

	var started atomic.Int64
	go func() {
		time.Sleep(time.Second)
		srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{Port: port, StoreDir: t.TempDir()})
		if err != nil {
			t.Errorf("late server: %v", err)
			return
		}
		started.Store(time.Now().UnixNano())
		t.Cleanup(srv.Shutdown)
	}()

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	nc, err := o.ConnectRetry(ctx, nil, url, "late")
	if err != nil {
		t.Fatalf("ConnectRetry: %v", err)
	}
	defer nc.Close()
	if s := started.Load(); s == 0 || time.Since(begin) < 900*time.Millisecond {
		t.Fatalf("connected after %s, before the server started (started=%d)", time.Since(begin), s)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := natsconn.Retry(ctx, natsconn.RetryPolicy{What: "create bucket"}, func(ctx context.Context) (jetstream.KeyValue, error) {
		return js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "late"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}

// Waiting ends with the caller's deadline, and the error says both why it
// stopped and what the last attempt met.
func TestConnectRetryStopsAtTheDeadline(t *testing.T) {
	t.Parallel()
	var o natsconn.Options
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := o.ConnectRetry(ctx, nil, "nats://127.0.0.1:"+strconv.Itoa(freePort(t)), "never")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nats.ErrNoServers) {
		t.Fatalf("err = %v, want the deadline and the last attempt's ErrNoServers", err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Fatalf("gave up after %s, long past the 700ms deadline", d)
	}
}

// Refused credentials will not pass by waiting: fail at once.
func TestConnectRetryFailsFastOnBadCredentials(t *testing.T) {
	t.Parallel()
	url := startNATS(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "gateway", Password: "right"}}
	})
	o := natsconn.Options{User: "gateway", Password: "wrong"}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	begin := time.Now()
	_, err := o.ConnectRetry(ctx, nil, url, "bad")
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("err = %v, want an authorization violation", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("took %s: bad credentials were retried", d)
	}
	// Invalid options are not retried either.
	_, err = natsconn.Options{Token: "t", User: "u"}.ConnectRetry(ctx, nil, url, "invalid")
	if !errors.Is(err, natsconn.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestRetryCountsAttemptsAndStopsOnPermanentErrors(t *testing.T) {
	t.Parallel()
	permanent := errors.New("permanent")
	calls := 0
	_, err := natsconn.Retry(t.Context(), natsconn.RetryPolicy{What: "step", Initial: time.Millisecond},
		func(context.Context) (int, error) {
			calls++
			if calls < 3 {
				return 0, nats.ErrTimeout
			}
			return 0, permanent
		})
	if !errors.Is(err, permanent) || calls != 3 {
		t.Fatalf("err = %v after %d calls, want permanent after 3", err, calls)
	}
	v, err := natsconn.Retry(t.Context(), natsconn.RetryPolicy{Initial: time.Millisecond, Temporary: func(error) bool { return true }},
		func(context.Context) (string, error) {
			if calls++; calls < 6 {
				return "", permanent
			}
			return "ok", nil
		})
	if err != nil || v != "ok" {
		t.Fatalf("custom Temporary: %q, %v", v, err)
	}
}

func TestTemporary(t *testing.T) {
	t.Parallel()
	api := func(code int, ec jetstream.ErrorCode) error {
		return fmt.Errorf("agent: bucket: %w", &jetstream.APIError{Code: code, ErrorCode: ec, Description: "x"})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no servers", fmt.Errorf("natsconn: connect: %w", nats.ErrNoServers), true},
		{"dns", &net.DNSError{Err: "no such host", Name: "nats", IsNotFound: true}, true},
		{"refused", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"request timeout", nats.ErrTimeout, true},
		{"no responders", nats.ErrNoResponders, true},
		{"sub-deadline", fmt.Errorf("open: %w", context.DeadlineExceeded), true},
		{"no meta leader", api(503, 10008), true},
		{"no peers yet", api(400, 10005), true},
		{"not leader", api(500, 10009), true},
		{"insufficient storage", api(500, 10047), false},
		{"stream name in use", api(400, 10058), false},
		{"jetstream off", jetstream.ErrJetStreamNotEnabled, false},
		{"authorization", fmt.Errorf("x: %w", nats.ErrAuthorization), false},
		{"invalid options", fmt.Errorf("%w: both", natsconn.ErrInvalid), false},
		{"other", errors.New("bucket name invalid"), false},
	}
	for _, tt := range tests {
		if got := natsconn.Temporary(tt.err); got != tt.want {
			t.Errorf("%s: Temporary(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// A component started while a 3-node JetStream cluster forms (in Kubernetes the
// three NATS pods start together with the fleet): creating an R3 bucket fails
// while the cluster has no leader or too few peers, and Retry waits it out.
func TestRetryCreatesR3AssetsWhileTheClusterForms(t *testing.T) {
	t.Parallel()
	var clusterPorts [3]int
	for i := range clusterPorts {
		clusterPorts[i] = freePort(t)
	}
	start := func(i int) *natsx.Embedded {
		srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), ServerName: fmt.Sprintf("nats-%d", i),
			Configure: func(o *server.Options) {
				o.Cluster.Name = "toolfleet"
				o.Cluster.Host = "127.0.0.1"
				o.Cluster.Port = clusterPorts[i]
				for _, p := range clusterPorts {
					o.Routes = append(o.Routes, &neturl.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)})
				}
			}})
		if err != nil {
			t.Fatalf("nats-%d: %v", i, err)
		}
		t.Cleanup(srv.Shutdown)
		return srv
	}
	first := start(0)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	nc, err := natsconn.Options{}.ConnectRetry(ctx, nil, first.URL(), "r3")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		start(1)
		start(2)
	}()
	var temporaries atomic.Int32
	var lastTemporary atomic.Value
	kv, err := natsconn.Retry(ctx, natsconn.RetryPolicy{What: "create R3 bucket", Temporary: func(err error) bool {
		ok := natsconn.Temporary(err)
		if ok {
			temporaries.Add(1)
			lastTemporary.Store(err.Error())
		}
		return ok
	}}, func(ctx context.Context) (jetstream.KeyValue, error) {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		defer acancel()
		return js.CreateOrUpdateKeyValue(actx, jetstream.KeyValueConfig{Bucket: "forming", Replicas: 3, Storage: jetstream.FileStorage})
	})
	if err != nil {
		t.Fatalf("R3 bucket: %v", err)
	}
	if temporaries.Load() == 0 {
		t.Fatal("the bucket was created at the first attempt, with one of three nodes up: the test proves nothing")
	}
	t.Logf("%d temporary failures before the cluster formed; last: %v", temporaries.Load(), lastTemporary.Load())
	info, err := js.Stream(ctx, "KV_forming")
	if err != nil {
		t.Fatal(err)
	}
	si, err := info.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if si.Config.Replicas != 3 || si.Cluster == nil || len(si.Cluster.Replicas) != 2 {
		t.Fatalf("bucket stream: replicas %d, cluster %+v; want R3 with 2 followers", si.Config.Replicas, si.Cluster)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}
