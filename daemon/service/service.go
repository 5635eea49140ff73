// Package service is the contract between rdmad's daemon and the transports
// that serve it: the operations (Backend and the optional ResourceReader and
// BandwidthTester) and the checks of their arguments, which the Unix socket
// API (daemon/api) and D-Bus (daemon/bus) both apply before a request
// reaches the daemon. The transports import this package, never each other;
// each keeps its own wire form and its own words for an error.
package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// A Backend is what the transports serve; the daemon implements it. An
// operation a Backend cannot do fails with an error wrapping
// errors.ErrUnsupported, which each transport answers as "not supported".
type Backend interface {
	// Snapshot returns the current state. It must not block.
	Snapshot() *apitype.Snapshot
	// Reload loads the configuration again. A config error is reported in
	// the result, not as an error: the daemon keeps the last good config.
	Reload(ctx context.Context) (apitype.ReloadResult, error)
	// PolicyDiff returns what a policy pass would change, changing nothing.
	PolicyDiff(ctx context.Context) ([]apitype.Change, error)
	// PolicyApply runs a full policy pass now.
	PolicyApply(ctx context.Context) (apitype.ApplyResult, error)
	// Probe probes a configured peer now (a one-shot peer probe).
	Probe(ctx context.Context, peer string) (apitype.Peer, error)
	// Doctor runs the troubleshooting table on the node; interval
	// separates the two counter reads of the rising-counter checks (0
	// skips them). An error means it could not run (busy, stopping).
	Doctor(ctx context.Context, interval time.Duration) (apitype.DoctorReport, error)
}

// A ResourceReader is a Backend that also reads the RDMA objects the
// kernel tracks (GET /v1/resources, D-Bus Resources); the daemon's is one.
// A Backend without it answers those requests "not supported".
type ResourceReader interface {
	// Resources reads the RDMA objects per process and device. A kernel
	// that cannot be read is reported in the result's Error; an error
	// means the read could not run (busy, stopping).
	Resources(ctx context.Context) (apitype.Resources, error)
}

// ReadResources calls b's Resources (GET /v1/resources, D-Bus Resources),
// or fails with errors.ErrUnsupported when b is no ResourceReader.
func ReadResources(ctx context.Context, b Backend) (apitype.Resources, error) {
	rr, ok := b.(ResourceReader)
	if !ok {
		return apitype.Resources{}, errors.ErrUnsupported
	}
	return rr.Resources(ctx)
}

// A BandwidthTester is a Backend that also runs bandwidth tests (POST
// /v1/bw, D-Bus Bandwidth); the daemon's is one. A Backend without it
// answers those requests "not supported".
type BandwidthTester interface {
	// Bandwidth runs one RC bandwidth test to peer. An error means the
	// test did not run or failed, and its text says why and what to do
	// (the API answers it 422).
	Bandwidth(ctx context.Context, req BandwidthRequest) (apitype.BandwidthResult, error)
}

// RunBandwidth calls b's Bandwidth, or fails with errors.ErrUnsupported when
// b is no BandwidthTester.
func RunBandwidth(ctx context.Context, b Backend, r BandwidthRequest) (apitype.BandwidthResult, error) {
	bt, ok := b.(BandwidthTester)
	if !ok {
		return apitype.BandwidthResult{}, errors.ErrUnsupported
	}
	return bt.Bandwidth(ctx, r)
}

// peerNameRE is the shape of a peer's name: an IPv4 or IPv6 address (with
// a zone) or a host name, at most 253 characters.
var peerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.:%_-]{0,252}$`)

// ValidPeerName reports whether name has the shape of a peer's name, as
// the socket and D-Bus require of every peer a caller names (POST
// /v1/probe and /v1/bw, Probe and Bandwidth). A name without it is never a
// configured peer, and it is text (a NUL, say) that must not travel on into
// the backend's messages and the answer.
func ValidPeerName(name string) bool { return peerNameRE.MatchString(name) }

// Doctor intervals: the default of GET /v1/doctor and the most either
// transport takes.
const (
	DefaultDoctorInterval = 2 * time.Second
	MaxDoctorInterval     = 10 * time.Second
)

// ValidDoctorInterval reports whether d is an interval Doctor may be asked
// for: 0 (skip the rising-counter checks) to MaxDoctorInterval.
func ValidDoctorInterval(d time.Duration) bool { return d >= 0 && d <= MaxDoctorInterval }

// A BandwidthRequest is the parameters of a bandwidth test, checked.
type BandwidthRequest struct {
	Peer     string
	Op       string // write, read or send
	Size     int
	Duration time.Duration
	// QPs is the queue pairs run in parallel, 1 to MaxBandwidthQPs; 0
	// is 1.
	QPs int
	// Loopback asks for a test of one of this node's ports against
	// itself (Peer is ""): Device's Port, Device "" the first device
	// with an ACTIVE port, Port 0 the device's first ACTIVE port.
	Loopback bool
	Device   string
	Port     int
}

// Bandwidth test defaults and bounds of both transports (the peer applies
// the same bounds: wire.MaxBWSize, MinBWDuration, MaxBWDuration).
const (
	DefaultBandwidthOp       = "write"
	DefaultBandwidthSize     = 65536
	DefaultBandwidthDuration = 5 * time.Second
	MaxBandwidthSize         = 1 << 20
	MinBandwidthDuration     = 100 * time.Millisecond
	MaxBandwidthDuration     = 30 * time.Second
	// MaxBandwidthQPs is the most queue pairs a test runs in parallel
	// (verbs/bw.MaxQPs).
	MaxBandwidthQPs = 16
)

// CheckBandwidthQPs checks a test's count of parallel queue pairs (0
// takes 1).
func CheckBandwidthQPs(n int) error {
	if n < 0 || n > MaxBandwidthQPs {
		return fmt.Errorf("qps %d is out of range; use 1 to %d queue pairs, e.g. 4", n, MaxBandwidthQPs)
	}
	return nil
}

// loopbackDevice is the shape of an RDMA device's name.
var loopbackDevice = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ParseLoopbackRequest checks a loopback test's parameters as the API
// takes them: target is DEVICE, DEVICE:PORT (DEVICE/PORT as rdmactl
// devices writes it too) or "" for the first ACTIVE port; the rest as
// ParseBandwidthRequest, and qps as CheckBandwidthQPs.
func ParseLoopbackRequest(target, op string, size int, d time.Duration, qps int) (BandwidthRequest, error) {
	r, err := ParseBandwidthRequest("loopback", op, size, d)
	r.Peer, r.Loopback, r.QPs = "", true, qps
	if err != nil {
		return r, err
	}
	if err := CheckBandwidthQPs(qps); err != nil {
		return r, err
	}
	if target == "" {
		return r, nil
	}
	dev, port, hasPort := strings.Cut(target, ":")
	if !hasPort {
		dev, port, hasPort = strings.Cut(target, "/")
	}
	if !loopbackDevice.MatchString(dev) {
		return r, fmt.Errorf("device %.64q is not an RDMA device name; give one as rdmactl status shows it, e.g. rxe0 or mlx5_0:1", dev)
	}
	r.Device = dev
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 255 {
			return r, fmt.Errorf("port %.16q of %s is not a port number; use 1 to 255, e.g. %s:1", port, dev, dev)
		}
		r.Port = n
	}
	return r, nil
}

// ParseBandwidthRequest checks a test's parameters as the API and D-Bus
// take them; an empty op, size 0 or duration 0 take the defaults. The
// error names the bad parameter and what to give.
func ParseBandwidthRequest(peer, op string, size int, d time.Duration) (BandwidthRequest, error) {
	r := BandwidthRequest{Peer: peer, Op: op, Size: size, Duration: d}
	if r.Op == "" {
		r.Op = DefaultBandwidthOp
	}
	if r.Size == 0 {
		r.Size = DefaultBandwidthSize
	}
	if r.Duration == 0 {
		r.Duration = DefaultBandwidthDuration
	}
	switch {
	case peer == "":
		return r, errors.New("say which peer: an address or host name of an rdmad node that allows this one ([[peer]] or [probe] allow there)")
	case !ValidPeerName(peer):
		return r, fmt.Errorf("peer %.64q is not an IP address or host name", peer)
	case r.Op != "write" && r.Op != "read" && r.Op != "send":
		return r, fmt.Errorf("op %.32q: use write, read or send", r.Op)
	case r.Size < 1 || r.Size > MaxBandwidthSize:
		return r, fmt.Errorf("size %d is out of range; use 1 to %d bytes (1 MiB), e.g. 65536", r.Size, MaxBandwidthSize)
	case r.Duration < MinBandwidthDuration || r.Duration > MaxBandwidthDuration:
		return r, fmt.Errorf("duration %s is out of range; use %s to %s, e.g. 5s", r.Duration, MinBandwidthDuration, MaxBandwidthDuration)
	case r.Duration%time.Millisecond != 0:
		return r, fmt.Errorf("duration %s is finer than a millisecond; use e.g. 5s or 2500ms", r.Duration)
	}
	return r, nil
}
