package runner

import "crypto/tls"

// ClientConfig is the TLS configuration of a Temporal client with these
// settings (nil when TLS is off), for processes that talk to Temporal without
// running a worker, e.g. the production gateway serving the AgentService.
// The client certificate is read again on every handshake.
func (t TemporalTLS) ClientConfig() (*tls.Config, error) { return t.config() }

// Validate checks that the certificate and key go together and that every
// named file exists.
func (t TemporalTLS) Validate() error { return t.validate() }
