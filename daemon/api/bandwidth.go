package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rdmad/rdmad/daemon/service"
)

// serveBandwidth runs a bandwidth test: POST /v1/bw?peer=&op=&size=&duration=&qps=
// (op write|read|send, default write; size in bytes, default 65536;
// duration a Go duration, default 5s; qps the queue pairs in parallel,
// default 1), or instead of peer loopback=DEVICE[:PORT] (loopback= for the
// first ACTIVE port): a test of one of this node's ports against itself.
// Admin level: it fills the link.
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
			writeError(w, http.StatusBadRequest, fmt.Sprintf("size %d is out of range; use 1 to %d bytes (1 MiB), e.g. ?size=65536", n, service.MaxBandwidthSize))
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
			writeError(w, http.StatusBadRequest, fmt.Sprintf("duration %s is out of range; use %s to %s, e.g. ?duration=5s", d, service.MinBandwidthDuration, service.MaxBandwidthDuration))
			return
		}
	}
	qps := 0
	if v := q.Get("qps"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("qps %.32q is not a number of queue pairs; use 1 to %d, e.g. ?qps=4", v, service.MaxBandwidthQPs))
			return
		}
		if n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("qps %d is out of range; use 1 to %d queue pairs, e.g. ?qps=4", n, service.MaxBandwidthQPs))
			return
		}
		qps = n
	}
	var req service.BandwidthRequest
	var err error
	if q.Has("loopback") {
		if q.Has("peer") {
			writeError(w, http.StatusBadRequest, "give peer or loopback, not both (POST /v1/bw?peer=ADDRESS or ?loopback=DEVICE:PORT)")
			return
		}
		if req, err = service.ParseLoopbackRequest(q.Get("loopback"), q.Get("op"), size, d, qps); err != nil {
			writeError(w, http.StatusBadRequest, err.Error()+" (POST /v1/bw?loopback=DEVICE:PORT&qps=1&op=write&size=65536&duration=5s)")
			return
		}
	} else {
		if req, err = service.ParseBandwidthRequest(q.Get("peer"), q.Get("op"), size, d); err == nil {
			req.QPs, err = qps, service.CheckBandwidthQPs(qps)
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error()+" (POST /v1/bw?peer=ADDRESS&op=write&size=65536&duration=5s, or ?loopback=DEVICE:PORT)")
			return
		}
	}
	res, err := service.RunBandwidth(r.Context(), s.backend, req)
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, "this rdmad runs no bandwidth tests")
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	default:
		writeJSON(w, http.StatusOK, res)
	}
}
