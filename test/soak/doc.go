// Package soak holds the soak run of rdmad (issue #18 item 5; `make soak`,
// docs/BENCHMARKS.md, "Soak"): the daemon's own main loop, local API, watch
// hub, metrics and peer manager, with 1,000 peers on an in-memory
// transport, for SOAK_DURATION (default 30m) while the peers change every
// minute, the configuration reloads every 10 s and watchers come and go.
// It reports the slope per hour of the daemon's heap, goroutines, open
// files and RSS, and fails only on growth no noise explains.
//
// The test is behind the build tag soak, so that `go test ./...` and CI
// never run it:
//
//	SOAK_DURATION=30m go test -tags soak -run TestSoak -v -timeout 45m ./test/soak
package soak
