// Package natstest starts an embedded NATS server with JetStream for one test.
package natstest

import (
	"testing"

	"github.com/toolfleet/toolfleet/internal/natsx"
)

// Start runs an embedded NATS server with JetStream on a free loopback port, with its
// store in the test's temporary folder, and shuts it down when the test ends.
func Start(t testing.TB) *natsx.Embedded {
	t.Helper()
	srv, err := natsx.StartEmbedded(t.Context(), natsx.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start embedded NATS: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}
