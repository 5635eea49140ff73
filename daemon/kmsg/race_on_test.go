//go:build race

package kmsg

// raceEnabled: the race detector makes sync.Pool drop what it is given, so
// regexp matching allocates afresh for some records and allocation bounds
// measure the detector, not the code.
const raceEnabled = true
