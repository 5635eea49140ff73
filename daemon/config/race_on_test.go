//go:build race

package config

// raceEnabled: the race detector makes sync.Pool drop what it is given, so
// regexp matching (the locator's) allocates afresh for every line and
// allocation bounds measure the detector, not the code.
const raceEnabled = true
