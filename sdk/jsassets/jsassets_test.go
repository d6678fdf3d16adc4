package jsassets_test

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/internal/natsx/natstest"
	"github.com/toolfleet/toolfleet/sdk/jsassets"
)

func TestSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  jsassets.Config
		a    jsassets.Asset
		want jsassets.Settings
	}{
		{"zero value: R1 file prod", jsassets.Config{}, jsassets.RunBlobs,
			jsassets.Settings{Replicas: 1, Storage: jetstream.FileStorage, Limits: jsassets.Limits{MaxBytes: 16 << 30, MaxAge: 30 * 24 * time.Hour}}},
		{"dev profile is small", jsassets.Config{Profile: "dev"}, jsassets.RunBlobs,
			jsassets.Settings{Replicas: 1, Storage: jetstream.FileStorage, Limits: jsassets.Limits{MaxBytes: 128 << 20, MaxAge: 7 * 24 * time.Hour}}},
		{"fleet-wide replicas and storage", jsassets.Config{Replicas: "3", Storage: "memory"}, jsassets.Idempotency,
			jsassets.Settings{Replicas: 3, Storage: jetstream.MemoryStorage, Limits: jsassets.Idempotency.Prod}},
		{"overrides by name win", jsassets.Config{Replicas: "3", Overrides: "toolfleet_calls.storage=memory, toolfleet_calls.replicas=1,toolfleet_calls.max-bytes=8MiB,toolfleet_calls.max-age=2h,other.replicas=5"},
			jsassets.Idempotency, jsassets.Settings{Replicas: 1, Storage: jetstream.MemoryStorage, Limits: jsassets.Limits{MaxBytes: 8 << 20, MaxAge: 2 * time.Hour}}},
		{"an override of another name leaves the asset alone", jsassets.Config{Overrides: "toolfleet_calls.replicas=3"}, jsassets.Results,
			jsassets.Settings{Replicas: 1, Storage: jetstream.FileStorage, Limits: jsassets.Results.Prod}},
		{"a renamed asset takes overrides by its name", jsassets.Config{Overrides: "memory2.max-age=30d"}, jsassets.AgentMemory.Named("memory2"),
			jsassets.Settings{Replicas: 1, Storage: jetstream.FileStorage, Limits: jsassets.Limits{MaxBytes: 1 << 30, MaxAge: 30 * 24 * time.Hour}}},
		{"max-age 0 keeps messages", jsassets.Config{Overrides: "TOOLFLEET_RUN_EVENTS.max-age=0"}, jsassets.RunEvents,
			jsassets.Settings{Replicas: 1, Storage: jetstream.FileStorage, Limits: jsassets.Limits{MaxBytes: 1 << 30}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := tc.cfg.Settings(tc.a); got != tc.want {
				t.Fatalf("Settings(%s) = %+v, want %+v", tc.a.Name, got, tc.want)
			}
		})
	}
}

func TestValidateNamesTheSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  jsassets.Config
		want string
	}{
		{jsassets.Config{Replicas: "0"}, "--js-replicas"},
		{jsassets.Config{Replicas: "7"}, "--js-replicas"},
		{jsassets.Config{Storage: "ssd"}, "--js-storage"},
		{jsassets.Config{Profile: "tiny"}, "--js-profile"},
		{jsassets.Config{Overrides: "toolfleet_calls=memory"}, "toolfleet_calls=memory"},
		{jsassets.Config{Overrides: "toolfleet_calls.size=1GiB"}, "unknown key"},
		{jsassets.Config{Overrides: "toolfleet_calls.max-bytes=0"}, "positive size"},
		{jsassets.Config{Overrides: "toolfleet_calls.max-bytes=-1MiB"}, "positive size"},
		{jsassets.Config{Overrides: "toolfleet_calls.max-age=1ms"}, "at least 1s"},
		{jsassets.Config{Overrides: "a.b.storage=file"}, "unknown key"},
		{jsassets.Config{Overrides: "a b.storage=file"}, "want NAME.KEY=VALUE"},
		{jsassets.Config{Overrides: "toolfleet_calls.storage=disk"}, "want file or memory"},
	} {
		err := tc.cfg.Validate()
		if !errors.Is(err, jsassets.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid mentioning %q", tc.cfg, err, tc.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"512MiB": 512 << 20, "4GiB": 4 << 30, "1024": 1024, "2G": 2 << 30, "64 KiB": 64 << 10, "1TiB": 1 << 40} {
		if got, err := jsassets.ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
		if got := jsassets.FormatBytes(want); in != "1024" && in != "2G" && in != "64 KiB" && got != in {
			t.Errorf("FormatBytes(%d) = %q, want %q", want, got, in)
		}
	}
	for _, in := range []string{"", "x", "1.5GiB", "99999999999TiB"} {
		if _, err := jsassets.ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) succeeded", in)
		}
	}
}

// The flags take their defaults from the TOOLFLEET_JS_* environment and the
// values given before AddFlags.
func TestAddFlags(t *testing.T) {
	t.Setenv(jsassets.EnvReplicas, "3")
	cfg := jsassets.Config{Profile: jsassets.ProfileDev}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--js-overrides", "toolfleet_calls.storage=memory"}); err != nil {
		t.Fatal(err)
	}
	want := jsassets.Config{Replicas: "3", Profile: "dev", Overrides: "toolfleet_calls.storage=memory"}
	if cfg != want {
		t.Fatalf("cfg = %+v, want %+v", cfg, want)
	}
}

// The dev profile fits a small disk: a few hundred MiB in all.
func TestDevProfileIsSmall(t *testing.T) {
	t.Parallel()
	var dev, prod int64
	for _, a := range jsassets.All() {
		dev += a.Dev.MaxBytes
		prod += a.Prod.MaxBytes
		if a.Dev.MaxBytes <= 0 || a.Prod.MaxBytes <= 0 {
			t.Errorf("%s has no byte bound", a.Name)
		}
	}
	if dev > 512<<20 {
		t.Fatalf("the dev profile reserves %s, want at most 512MiB", jsassets.FormatBytes(dev))
	}
	t.Logf("dev profile: %d MiB in all; prod: %d MiB", dev>>20, prod>>20)
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Supported changes (byte bound, max age) are applied to an existing stream,
// KV bucket and object store; a storage change is refused, naming the asset,
// both values and the migration path, and leaves the asset as it was.
func TestEnsureAppliesChangesAndRefusesStorageChange(t *testing.T) {
	t.Parallel()
	js := connect(t, natstest.Start(t).URL())
	ctx := t.Context()
	s := jsassets.Settings{Replicas: 1, Storage: jetstream.FileStorage, Limits: jsassets.Limits{MaxBytes: 8 << 20, MaxAge: time.Hour}}
	sc := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Duplicates: 2 * time.Hour}
	if _, err := jsassets.EnsureStream(ctx, js, s.Stream(sc)); err != nil {
		t.Fatal(err)
	}
	if _, err := jsassets.EnsureKeyValue(ctx, js, s.KeyValue(jetstream.KeyValueConfig{Bucket: "kv"})); err != nil {
		t.Fatal(err)
	}
	if _, err := jsassets.EnsureObjectStore(ctx, js, s.ObjectStore(jetstream.ObjectStoreConfig{Bucket: "obs"})); err != nil {
		t.Fatal(err)
	}
	// Change the limits: applied.
	s2 := s
	s2.MaxBytes, s2.MaxAge = 16<<20, 2*time.Hour
	if _, err := jsassets.EnsureStream(ctx, js, s2.Stream(sc)); err != nil {
		t.Fatal(err)
	}
	if _, err := jsassets.EnsureKeyValue(ctx, js, s2.KeyValue(jetstream.KeyValueConfig{Bucket: "kv"})); err != nil {
		t.Fatal(err)
	}
	if _, err := jsassets.EnsureObjectStore(ctx, js, s2.ObjectStore(jetstream.ObjectStoreConfig{Bucket: "obs"})); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"S", "KV_kv", "OBJ_obs"} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		if c.MaxBytes != 16<<20 || c.MaxAge != 2*time.Hour || c.Storage != jetstream.FileStorage {
			t.Errorf("%s: max bytes %d, max age %s, storage %s; want the changed limits on file", name, c.MaxBytes, c.MaxAge, c.Storage)
		}
	}
	// Change the storage: refused for each kind.
	mem := s2
	mem.Storage = jetstream.MemoryStorage
	_, errS := jsassets.EnsureStream(ctx, js, mem.Stream(sc))
	_, errK := jsassets.EnsureKeyValue(ctx, js, mem.KeyValue(jetstream.KeyValueConfig{Bucket: "kv"}))
	_, errO := jsassets.EnsureObjectStore(ctx, js, mem.ObjectStore(jetstream.ObjectStoreConfig{Bucket: "obs"}))
	for name, err := range map[string]error{"S": errS, "kv": errK, "obs": errO} {
		var ce *jsassets.ChangeError
		if !errors.Is(err, jsassets.ErrUnsupportedChange) || !errors.As(err, &ce) {
			t.Fatalf("%s: err = %v, want a ChangeError", name, err)
		}
		for _, want := range []string{name, "storage is file", "asks for memory", "docs/operations.md", name + ".storage=file"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", name, err, want)
			}
		}
	}
	st, err := js.Stream(ctx, "KV_kv")
	if err != nil || st.CachedInfo().Config.Storage != jetstream.FileStorage {
		t.Fatalf("KV_kv after the refused change: %v", err)
	}
}

// A NATS server that cannot reserve an asset's byte bound is reported with
// the setting to change.
func TestEnsureNamesTheSettingWhenNATSIsShortOfSpace(t *testing.T) {
	t.Parallel()
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Configure: func(o *server.Options) {
		o.JetStreamMaxStore = 32 << 20
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	js := connect(t, srv.URL())
	cfg := jsassets.Config{}
	s := cfg.Settings(jsassets.RunBlobs) // 16 GiB on a server with 32 MiB
	_, err = jsassets.EnsureObjectStore(t.Context(), js, s.ObjectStore(jetstream.ObjectStoreConfig{Bucket: jsassets.RunBlobs.Name}))
	if !errors.Is(err, jsassets.ErrInsufficientStorage) {
		t.Fatalf("err = %v, want ErrInsufficientStorage", err)
	}
	for _, want := range []string{"toolfleet_run_blobs", "16GiB", "--js-overrides toolfleet_run_blobs.max-bytes=", "--js-profile dev"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// The dev profile fits.
	dev := jsassets.Config{Profile: jsassets.ProfileDev}.Settings(jsassets.TriggerDeadLetters)
	if _, err := jsassets.EnsureStream(t.Context(), js, dev.Stream(jetstream.StreamConfig{Name: jsassets.TriggerDeadLetters.Name, Subjects: []string{"x.>"}})); err != nil {
		t.Fatalf("dev profile: %v", err)
	}
}
