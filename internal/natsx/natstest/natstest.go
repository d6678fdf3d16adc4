// Package natstest starts an embedded NATS server with JetStream for one test.
package natstest

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/internal/natsx"
)

// MaxStore is the JetStream file-storage ceiling of a test's server. NATS
// defaults it to 75% of the disk free when the server starts, and every
// bucket reserves its byte bound against it (the KV worker's 1 GiB, the
// gateway's stores, …): on a machine with a few GiB free, a test failed
// with "insufficient storage" although it writes kilobytes. Tests do not
// measure disk capacity, so their ceiling is fixed; sdk/jsassets tests the
// refusal with a ceiling of its own.
const MaxStore = 64 << 30

// RoomyStore sets MaxStore on o unless a ceiling is already set: pass it as
// (or call it from) a Configure function of a test's embedded server.
func RoomyStore(o *server.Options) {
	if o.JetStreamMaxStore == 0 {
		o.JetStreamMaxStore = MaxStore
	}
}

// Start runs an embedded NATS server with JetStream on a free loopback port, with its
// store in the test's temporary folder, and shuts it down when the test ends.
func Start(t testing.TB) *natsx.Embedded {
	t.Helper()
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir(), Configure: RoomyStore})
	if err != nil {
		t.Fatalf("start embedded NATS: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}
