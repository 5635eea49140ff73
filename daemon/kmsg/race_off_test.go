//go:build !race

package kmsg

const raceEnabled = false
