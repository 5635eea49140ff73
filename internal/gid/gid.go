// Package gid holds the 128-bit RDMA global identifier as a plain value,
// so that the packages that only carry GIDs (the probe control plane and
// its value types, probe/ud) need not import the cgo binding. verbs.GID is
// this type.
package gid

import "net"

// A GID is a 128-bit global identifier.
type GID [16]byte

// IsZero reports whether g is the all-zero (unused) GID.
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as an IPv6 address, as `rdma` and sysfs show it.
func (g GID) String() string { return net.IP(g[:]).String() }
