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
