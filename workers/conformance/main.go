// Command conformance serves the Conformance toolkit: the fixture tools of the
// official MCP conformance suite (see package conformance). `toolfleet dev
// --conformance` runs it in process; this binary runs it on its own.
//
//	go run ./workers/conformance --listen 127.0.0.1:19106 --nats nats://127.0.0.1:4222
//
// Flags and environment are those of every worker (see sdk/tool.Main).
package main

import (
	conformancev1 "github.com/toolfleet/toolfleet/gen/tools/conformance/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/conformance/conformance"
)

func main() {
	tool.Main("conformance", func(w *tool.Worker) error {
		conformancev1.RegisterConformanceServiceServer(w, conformance.New())
		return nil
	})
}
