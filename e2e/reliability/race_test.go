//go:build race

package reliability

// raceEnabled: the fleet's binaries are built with -race too (fleetBinaries).
const raceEnabled = true
