//go:build tools

// Package tools pins the build tools of rdmad in their own module, so they
// stay out of the daemon's dependency graph: packaging/build runs
// `go run github.com/goreleaser/nfpm/v2/cmd/nfpm` from this directory.
package tools

import (
	_ "github.com/goreleaser/nfpm/v2/cmd/nfpm"
)
