//go:build race

package program_test

// raceOn: the race detector slows byte-heavy tests about tenfold.
const raceOn = true
