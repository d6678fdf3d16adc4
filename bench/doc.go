// Package bench holds toolfleet's benchmarks. Every benchmark measures a baseline in
// the same run and reports a ratio against it, so the numbers mean something on a
// shared, noisy machine. Results and the commands that produced them are recorded in
// docs/performance.md.
package bench
