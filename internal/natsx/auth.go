package natsx

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/toolfleet/toolfleet/sdk/natsconn"
)

// ErrAuthNotSupported is returned by [RequireAuth] for client settings an
// embedded server cannot mirror (a .creds file needs an operator setup; TLS needs
// a server certificate).
var ErrAuthNotSupported = errors.New("natsx: the embedded NATS server cannot require these credentials")

// RequireAuth returns a [EmbeddedConfig.Configure] function that makes an embedded
// server require the credential the client options carry: the user and
// password, the token, or the public key of the NKey seed. Zero options require
// nothing (nil is returned).
func RequireAuth(o natsconn.Options) (func(*server.Options), error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	switch {
	case o.CredsFile != "":
		return nil, fmt.Errorf("%w: a .creds file (use a user, a token or an NKey with the dev server)", ErrAuthNotSupported)
	case o.TLS():
		return nil, fmt.Errorf("%w: TLS (the dev server listens on loopback in plain text)", ErrAuthNotSupported)
	case o.User != "":
		return func(so *server.Options) {
			so.Users = []*server.User{{Username: o.User, Password: o.Password}}
		}, nil
	case o.Token != "":
		return func(so *server.Options) { so.Authorization = o.Token }, nil
	case o.NKeySeedFile != "":
		seed, err := os.ReadFile(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("natsx: NKey seed: %w", err)
		}
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
		if err != nil {
			return nil, fmt.Errorf("natsx: NKey seed %s: %w", o.NKeySeedFile, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("natsx: NKey seed %s: %w", o.NKeySeedFile, err)
		}
		return func(so *server.Options) { so.Nkeys = []*server.NkeyUser{{Nkey: pub}} }, nil
	}
	return nil, nil
}
