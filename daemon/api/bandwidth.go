package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// A BandwidthTester is a Backend that also runs bandwidth tests (POST
// /v1/bw, D-Bus Bandwidth); the daemon's is one. A Backend without it
// answers those requests "not supported".
type BandwidthTester interface {
	// Bandwidth runs one RC bandwidth test to peer. An error means the
	// test did not run or failed, and its text says why and what to do
	// (the API answers it 422).
	Bandwidth(ctx context.Context, req BandwidthRequest) (apitype.BandwidthResult, error)
}

// A BandwidthRequest is the parameters of a bandwidth test, checked.
type BandwidthRequest struct {
	Peer     string
	Op       string // write, read or send
	Size     int
	Duration time.Duration
}

// Bandwidth test defaults and bounds of the API (the peer applies the same
// bounds: wire.MaxBWSize, MinBWDuration, MaxBWDuration).
const (
	DefaultBandwidthOp       = "write"
	DefaultBandwidthSize     = 65536
	DefaultBandwidthDuration = 5 * time.Second
	MaxBandwidthSize         = 1 << 20
	MinBandwidthDuration     = 100 * time.Millisecond
	MaxBandwidthDuration     = 30 * time.Second
)

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

// RunBandwidth calls b's Bandwidth, or fails with errors.ErrUnsupported when
// b is no BandwidthTester.
func RunBandwidth(ctx context.Context, b Backend, r BandwidthRequest) (apitype.BandwidthResult, error) {
	bt, ok := b.(BandwidthTester)
	if !ok {
		return apitype.BandwidthResult{}, errors.ErrUnsupported
	}
	return bt.Bandwidth(ctx, r)
}

// serveBandwidth runs a bandwidth test: POST /v1/bw?peer=&op=&size=&duration=
// (op write|read|send, default write; size in bytes, default 65536;
// duration a Go duration, default 5s). Admin level: it fills the link.
func (s *Server) serveBandwidth(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size := 0
	if v := q.Get("size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("size %.32q is not a number of bytes; use e.g. ?size=65536", v))
			return
		}
		if n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("size %d is out of range; use 1 to %d bytes (1 MiB), e.g. ?size=65536", n, MaxBandwidthSize))
			return
		}
		size = n
	}
	var d time.Duration
	if v := q.Get("duration"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("duration %.32q is not a duration; use e.g. ?duration=5s", v))
			return
		}
		if d <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("duration %s is out of range; use %s to %s, e.g. ?duration=5s", d, MinBandwidthDuration, MaxBandwidthDuration))
			return
		}
	}
	req, err := ParseBandwidthRequest(q.Get("peer"), q.Get("op"), size, d)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error()+" (POST /v1/bw?peer=ADDRESS&op=write&size=65536&duration=5s)")
		return
	}
	res, err := RunBandwidth(r.Context(), s.backend, req)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, "this rdmad runs no bandwidth tests")
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	default:
		writeJSON(w, http.StatusOK, res)
	}
}
