package natsx

import "github.com/toolfleet/toolfleet/sdk/natsconn"

// ConnOptions are the NATS credentials and TLS settings every component takes
// (flags --nats-creds, --nats-user, --nats-ca, ...; TOOLFLEET_NATS_* variables).
// The type lives in the public package sdk/natsconn because tool.Config carries
// it; this alias is where the cross-team design (seams) looks for it.
type ConnOptions = natsconn.Options
