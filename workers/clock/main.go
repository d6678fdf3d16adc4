// Command clock serves the Clock toolkit: the current time in a time zone and
// conversion between time zones, with the IANA database built in.
//
//	go run ./workers/clock --listen 127.0.0.1:19105
//
// Flags and environment are those of every worker (see sdk/tool.Main).
package main

import (
	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/workers/clock/clock"
)

func main() {
	tool.Main("clock", func(w *tool.Worker) error {
		clockv1.RegisterClockServiceServer(w, clock.New())
		return nil
	})
}
