// Command toolfleet is the fleet's CLI. `toolfleet dev` runs the whole fleet in one
// process on embedded NATS and an embedded Temporal server.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "toolfleet:", err)
		}
		os.Exit(exitCode(err))
	}
}

// errReported marks an error the command already printed.
var errReported = errors.New("reported")
