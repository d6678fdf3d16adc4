// Package check builds toolfleet's kustomize overlays offline and checks what
// they produce: every resource decodes strictly into its k8s.io/api type (an
// unknown or mistyped field fails), and the resources fit together — every image
// is one the Tiltfile builds (or a pinned third-party image), every Service
// selects a workload's pods on a port it has, every probe port exists on its
// container, every ConfigMap and Secret referenced is defined, optional, or
// documented as external in docs/operations.md, and every pod runs locked down.
// Fleet rules (CheckFleet, CheckNATSCluster) hold the kind, kind-hydra, kind-ha and prod
// overlays to replicated JetStream assets, a 3-node NATS cluster that can
// form, enough replicas, and a CPU budget that fits one 2-core kind node.
// It also parses both Dockerfiles with BuildKit's parser and linter and checks
// that the Tilt image runs on the production image's base, user and entrypoint.
//
// It is its own Go module so that kustomize's API and k8s.io/api never reach
// the production binaries or the main module's tests. Run it with
// `make test-k8s` (part of `make test`).
package check
