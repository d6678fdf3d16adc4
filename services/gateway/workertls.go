package gateway

import "github.com/toolfleet/toolfleet/services/gateway/registry"

// Worker dialing lives in package registry (registry/tls.go); these names keep
// the gateway's API source-compatible.

// WorkerTLSConfig says how the gateway connects to workers: see [registry.TLSConfig].
type WorkerTLSConfig = registry.TLSConfig

// FlagSet is what [WorkerTLSConfig.AddFlags] needs: see [registry.FlagSet].
type FlagSet = registry.FlagSet

// Environment variables read by [WorkerTLSConfig.AddFlags] as the flags' defaults.
const (
	EnvWorkerTLS        = registry.EnvWorkerTLS
	EnvWorkerCA         = registry.EnvWorkerCA
	EnvWorkerCert       = registry.EnvWorkerCert
	EnvWorkerKey        = registry.EnvWorkerKey
	EnvWorkerServerName = registry.EnvWorkerServerName
)

// ErrWorkerTLS is wrapped by errors of a [WorkerTLSConfig].
var ErrWorkerTLS = registry.ErrWorkerTLS
