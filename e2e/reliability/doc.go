// Package reliability holds the fleet's reliability suite: tests that attack
// or disturb a real embedded fleet (gateway, workers, NATS) and count what
// went wrong. Each runs a short form in the test command and the full form
// with TOOLFLEET_RELIABILITY=full (`make reliability`); docs/reliability.md
// lists what each proves and its latest figures.
package reliability
