package natsconn_test

import (
	"context"
	"flag"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/internal/natsx"
	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// A component registers the NATS flags, then connects with what they say.
func Example() {
	// A NATS server that requires a user and password (a real deployment has its own).
	srv, err := natsx.StartEmbedded(context.Background(), natsx.EmbeddedConfig{Configure: func(o *server.Options) {
		o.Users = []*server.User{{Username: "gateway", Password: "s3cret"}}
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()

	var opts natsconn.Options
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	opts.AddFlags(fs)
	// In production the password comes from TOOLFLEET_NATS_PASSWORD, not a flag.
	if err := fs.Parse([]string{"--nats-user=gateway", "--nats-password=s3cret"}); err != nil {
		fmt.Println(err)
		return
	}
	nc, err := opts.Connect(srv.URL(), "example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	fmt.Println("connected:", nc.IsConnected())
	// Output: connected: true
}
