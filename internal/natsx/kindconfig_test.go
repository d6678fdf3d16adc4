package natsx_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"sigs.k8s.io/yaml"
)

// TestKindNATSConfig parses the kind overlays' nats.conf (the nats-config
// ConfigMap in k8s/components/kind/nats.yaml) with the NATS server's own
// parser: a misspelled key or a bad size would otherwise show only as a NATS
// pod crash-looping on a cluster.
func TestKindNATSConfig(t *testing.T) {
	b, err := os.ReadFile("../../k8s/components/kind/nats.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var conf string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var cm struct {
			Kind     string                `json:"kind"`
			Metadata struct{ Name string } `json:"metadata"`
			Data     map[string]string     `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Kind == "ConfigMap" && cm.Metadata.Name == "nats-config" {
			conf = cm.Data["nats.conf"]
		}
	}
	if conf == "" {
		t.Fatal("no nats-config ConfigMap with a nats.conf")
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAME", "nats-1") // the StatefulSet sets it from the pod's name
	o, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server rejects the kind nats.conf: %v", err)
	}
	if o.ServerName != "nats-1" {
		t.Errorf("server_name = %q, want the pod name", o.ServerName)
	}
	if !o.JetStream || o.StoreDir != "/data" || o.JetStreamMaxStore != 32<<30 {
		t.Errorf("jetstream = %v, store %q, max_file_store %d; want on, /data, 32 GiB", o.JetStream, o.StoreDir, o.JetStreamMaxStore)
	}
	if o.Cluster.Port != 6222 || o.Cluster.Name != "toolfleet" || len(o.Routes) != 3 {
		t.Errorf("cluster %s:%d with %d routes, want toolfleet:6222 with 3", o.Cluster.Name, o.Cluster.Port, len(o.Routes))
	}
	for i, r := range o.Routes {
		if want := "nats-" + string(rune('0'+i)) + ".nats-headless:6222"; r.Host != want {
			t.Errorf("route %d = %s, want %s", i, r.Host, want)
		}
	}
	if o.LameDuckDuration != 30*time.Second || o.LameDuckGracePeriod != 5*time.Second || o.PidFile == "" {
		t.Errorf("lame duck %s (grace %s), pid file %q", o.LameDuckDuration, o.LameDuckGracePeriod, o.PidFile)
	}
	if o.MaxPayload != 8<<20 {
		t.Errorf("max_payload = %d, want 8 MiB as the embedded server", o.MaxPayload)
	}
}
