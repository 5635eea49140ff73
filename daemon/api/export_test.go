package api

import (
	"context"
	"net"
	"time"
)

// Limits lets the tests of package api_test serve with other limits.
type Limits = limits

// ServeLimits is Serve with the limits lim.
func (s *Server) ServeLimits(ctx context.Context, ln net.Listener, grace time.Duration, lim Limits) error {
	return s.serve(ctx, ln, grace, lim)
}

// DefaultLimits are the limits Serve uses.
func DefaultLimits() Limits {
	return defaultLimits()
}

// SharedDir is sharedDir (helpers_test.go) for the external tests: a
// directory every uid can enter with a copy of the test binary.
var SharedDir = sharedDir
