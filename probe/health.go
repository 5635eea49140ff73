package probe

import (
	"fmt"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// Thresholds decide a path's state.
type Thresholds struct {
	// DownAfter consecutive lost probes make a path down; UpAfter
	// consecutive answers bring it back.
	DownAfter, UpAfter int
	// LossPct over the window (with at least MinLosses losses) makes a
	// path degraded; it clears at half of it.
	LossPct   float64
	MinLosses int
	// RTT, when set, is the p99 round trip over which a path is
	// degraded; it clears at 80% of it. The round trip is the one this
	// node measured, the responder's host delay included: what the
	// responder claims of it is the peer's word, not a measurement.
	RTT time.Duration
}

// minRTTSamples is how many answers a window needs before its p99 counts.
const minRTTSamples = 10

// A health is a path's state machine. Hysteresis keeps one lost probe or
// one slow answer from flapping the state: down needs DownAfter losses in a
// row and up again UpAfter answers in a row; degraded clears only well
// below the threshold that set it.
type health struct {
	state string
	// since is when the state began, as Unix nanoseconds (8 bytes in
	// every path rather than 24).
	since      int64
	reason     string
	consecLost int32
	consecOK   int32
	// badFor is what the reason of a degraded path was written for: it is
	// written again only when the figures it gives change, not after
	// every probe.
	badFor badKey
}

// A badKey is the figures a degraded reason gives: the counts, and the
// p99 as its window code (the percentiles are codes decoded: exact). The
// thresholds the text also gives are not in it: a reload that changes
// them clears every key (Manager.apply), which keeps a path's health at
// 64 bytes and its path in the 352-byte size class (TestPeerSizeClass).
type badKey struct {
	lost, samples int32
	p99           uint16
}

func keyOf(ws winStats) badKey {
	return badKey{lost: int32(ws.Lost), samples: int32(ws.Samples), p99: toF12(ws.P99)}
}

// badReason returns why ws is bad under t ("" when it is not), reusing the
// health's reason when it was written for the same figures.
func (h *health) badReason(ws winStats, t Thresholds, tx *texts) string {
	k := keyOf(ws)
	if h.state == apitype.PeerDegraded && h.reason != "" && k == h.badFor {
		return h.reason
	}
	r := tx.badReason(k, ws, t)
	if r != "" {
		h.badFor = k
	}
	return r
}

func newHealth(now time.Time) health {
	return health{state: apitype.PeerUnknown, since: now.UnixNano()}
}

// A judged is the samples a path's health judges: the path's window (w),
// or on several flows the union of the flows' windows (fs). A struct of
// both rather than an interface, so that windowStats keeps the window's
// loss inlined on the probe path of a path on one flow.
type judged struct {
	w   *window
	fs  *flowSet
	buf *[]uint16 // the scratch percentiles are computed in (window.stats)
}

// restart leaves only s, the sample judged: after an outage.
func (j judged) restart(s sample) {
	if j.fs != nil {
		j.fs.restart(s)
	} else {
		j.w.restart(s)
	}
}

// windowStats returns what the thresholds look at: the percentiles only
// when an RTT threshold is set (the loss counts are kept as samples come).
func (t Thresholds) windowStats(j judged) winStats {
	switch {
	case j.fs != nil && t.RTT > 0:
		return j.fs.stats(j.buf)
	case j.fs != nil:
		return j.fs.loss()
	case t.RTT > 0:
		return j.w.stats(j.buf)
	}
	return j.w.loss()
}

func (t Thresholds) bad(ws winStats) string {
	if ws.Lost >= t.MinLosses && ws.LossPct > t.LossPct {
		return fmt.Sprintf("loss %.1f%% over the last %d probes (threshold %.1f%%)", ws.LossPct, ws.Samples, t.LossPct)
	}
	if t.RTT > 0 && ws.Samples-ws.Lost >= minRTTSamples && ws.P99 > t.RTT {
		return fmt.Sprintf("RTT p99 %v over the last %d probes (threshold %v)", ws.P99, ws.Samples, t.RTT)
	}
	return ""
}

func (t Thresholds) clear(ws winStats) bool {
	lossOK := ws.Lost < t.MinLosses || ws.LossPct <= t.LossPct/2
	rttOK := t.RTT == 0 || ws.Samples-ws.Lost < minRTTSamples || ws.P99 <= t.RTT*8/10
	return lossOK && rttOK
}

// observe adds one probe outcome to w and reports whether the state
// changed. w is reset when a path comes back
// from down: the losses of the outage were reported as down, not as the
// loss rate of the path that returned.
func (h *health) observe(s sample, w *window, buf *[]uint16, t Thresholds, now time.Time, tx *texts) bool {
	w.add(s)
	if ok := !s.lost; ok {
		h.consecOK++
		h.consecLost = 0
	} else {
		h.consecLost++
		h.consecOK = 0
	}
	return h.judge(s, judged{w: w, buf: buf}, t, now, "", tx)
}

// judge moves the state after a sample s was added to w and the runs of
// answers and losses were counted; tx (nil: none) keeps the reasons made. flowsBad, when set, is why some of the
// path's flows are lossy (flows.go): it makes an up path degraded, and a
// degraded one stays so while it is set, whatever the path's window says.
func (h *health) judge(s sample, w judged, t Thresholds, now time.Time, flowsBad string, tx *texts) bool {
	next, reason := h.state, h.reason
	if flowsBad != "" {
		// The reason is the flows', not the window's figures: badReason
		// must not take it for one it wrote.
		h.badFor = badKey{}
	}
	switch {
	case int(h.consecLost) >= t.DownAfter:
		next, reason = apitype.PeerDown, fmt.Sprintf("%d probes in a row unanswered", h.consecLost)
	case h.state == apitype.PeerDown:
		if int(h.consecOK) >= t.UpAfter {
			w.restart(s)
			next, reason = apitype.PeerUp, ""
		}
	case h.state == apitype.PeerUnknown:
		if !s.lost {
			next, reason = apitype.PeerUp, ""
		}
	case h.state == apitype.PeerUp:
		if flowsBad != "" {
			next, reason = apitype.PeerDegraded, flowsBad
		} else if r := h.badReason(t.windowStats(w), t, tx); r != "" {
			next, reason = apitype.PeerDegraded, r
		}
	case h.state == apitype.PeerDegraded:
		ws := t.windowStats(w)
		switch {
		case flowsBad != "":
			reason = flowsBad
		case t.clear(ws):
			next, reason = apitype.PeerUp, ""
		default:
			if r := h.badReason(ws, t, tx); r != "" {
				reason = r
			}
		}
	}
	h.reason = reason
	if next == h.state {
		return false
	}
	h.state, h.since = next, now.UnixNano()
	return true
}
