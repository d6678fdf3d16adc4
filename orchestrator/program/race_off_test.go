//go:build !race

package program_test

const raceOn = false
