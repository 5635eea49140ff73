package probe

import (
	"fmt"
	"math"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// Flows: a RoCE v2 fabric spreads traffic over its equal-cost paths by the
// UDP source port, which the adapter derives from the sending QP (rxe) or
// from the address handle's flow label (mlx5), so one probe flow sees one
// of them. With [probe] flows = K each local port has K probe QPs
// (verbs/peer), and a path's turns walk the flows the peer admitted
// round-robin, one probe a turn (R-Pingmesh walks a target's flow labels
// the same way, within one probe budget): the probe rate is that of one
// flow, whatever K. Each flow keeps a window of its own of window/K
// samples (at least minFlowWindow), and the path's figures are those of
// the union of its flows' windows, which spans the same turns as one
// flow's window would. The path keeps no window of its own: that would
// be every sample twice. A flow is lossy by the same loss rule as a path;
// a path with a lossy flow is degraded with the flows as its reason
// ("loss on 1 of 4 flows"), since one bad link behind a switch drops only
// the flows hashed onto it.
//
// A lost probe on a flow not known lossy is either noise, a flow going
// bad or the start of an outage, and waiting K turns for the flow's next
// probe would make every one of them K times slower to tell: the path's
// next turn is brought forward (expire) and probes every flow at once (a
// burst, flowSet.burst), so that a dead flow has its second loss, and a
// dead path a loss on every flow, within a timeout or two. A path is down
// when its last down_after probes were lost and so was every flow's last
// one (a path with one flow of four answering is degraded, "3 of 4
// flows"), and up again once its flows answered up_after probes since
// their last losses, counted together.

// DefaultFlows is [probe] flows' default. R-Pingmesh's reasoning: a fault
// on one of the n equal-cost links between two switches is missed by K
// flows hashed independently with probability (1-1/n)^K; with 4 flows and
// the 4 to 8 uplinks of a ToR that is 32% to 59% for one peer alone, and
// a node probes tens of peers over the same uplinks, so that together
// they cover every link, while each path still costs one probe a turn.
const DefaultFlows = 4

// minFlowWindow is the fewest samples a flow's window holds: enough that
// the loss rule (at least two losses) can tell a lossy flow from one lost
// probe.
const minFlowWindow = 5

// flowWindow is the size of each of k flows' windows for a path window of
// w samples: a k-th of it, so that their union spans the turns one
// flow's window of w would, and at least minFlowWindow.
func flowWindow(w, k int) int { return max((w+k-1)/k, minFlowWindow) }

// A flowSet is the flows of a path that probes more than one: kept apart
// (path.fl, nil on one flow) so that a path on one flow costs a pointer.
type flowSet struct {
	flows []flowState
	lossy uint8 // how many of flows are lossy
	// next is the flow of the path's next turn (round-robin); burst says
	// the next turn probes every flow (after a loss: expire).
	next  uint8
	burst bool
	// lostRun is the path's run of lost probes, of any flow.
	lostRun int32
	// at is the flow whose sample is being judged (-1: every flow's), for
	// restart.
	at int8
	// pcts are the union's percentiles as last published.
	pcts
	// why is the flows' reason (flowsReason), written for the figures in
	// whyFor.
	why    string
	whyFor flowsKey
}

// A flowState is one flow of a path: its own window and counters, the
// runs of answers and losses since its last loss and answer (which decide
// the path's down and up), and whether it is lossy now.
type flowState struct {
	win        window
	sent, lost uint64
	consecLost uint16
	consecOK   uint16
	lossy      bool
	// sport is the local flow's UDP source port (0: unknown), for the
	// reasons. Its QPN the state takes from the local port (flowStates):
	// 48 bytes a flow, not 72 (TestPeerSizeClass).
	sport uint16
}

// loss returns the counts and the loss rate of the union of the flows'
// windows.
func (fs *flowSet) loss() winStats {
	var st winStats
	for i := range fs.flows {
		w := &fs.flows[i].win
		st.Samples += w.count()
		st.Lost += int(w.lost)
	}
	if st.Samples > 0 {
		st.LossPct = 100 * float64(st.Lost) / float64(st.Samples)
	}
	return st
}

// stats returns the union's counts, loss rate and percentiles, computed
// in buf (window.stats).
func (fs *flowSet) stats(buf *[]uint16) winStats {
	w0 := &fs.flows[0].win
	return slotStats(fs.loss(), buf, len(fs.flows)*w0.size(), len(fs.flows), func(i int) *window { return &fs.flows[i].win })
}

// published is window.published of the union.
func (fs *flowSet) published(buf *[]uint16) winStats {
	return fs.pcts.publish(fs.loss(), func() winStats { return fs.stats(buf) })
}

// restart starts every flow afresh after an outage (it was reported as
// down, not as the flows' loss), with the sample judged in the window of
// the flow it came from.
func (fs *flowSet) restart(s sample) {
	for i := range fs.flows {
		f := &fs.flows[i]
		f.win.reset()
		f.lossy = false
		if int(fs.at) == i || fs.at < 0 {
			f.win.add(s)
		}
	}
	fs.lossy = 0
	fs.lostRun = 0
	fs.fresh = math.MaxUint16
}

// pathFlows returns how many flows a path probes on: 1 unless the peer
// admitted more.
func (pa *path) pathFlows() int {
	if pa.fl == nil {
		return 1
	}
	return len(pa.fl.flows)
}

// turnProbes returns how many probes the path's next turn sends: one, or
// one per flow in a burst.
func (pa *path) turnProbes() int {
	if pa.fl == nil || !pa.fl.burst {
		return 1
	}
	return len(pa.fl.flows)
}

// canSend reports whether the path's next turn may go: at most
// maxInflightPerPath probes in flight once it went, a burst's past the
// one probe of the turn not counted.
func (pa *path) canSend() bool {
	return int(pa.inflight) <= maxInflightPerPath-1+pa.turnProbes()-1
}

// turnFlows returns the flows the path's next turn probes, from first
// to first+n-1: the next one of the round-robin, or every flow in a
// burst. It moves the round-robin on and ends the burst.
func (pa *path) turnFlows() (first, n int) {
	fl := pa.fl
	switch {
	case fl == nil:
		return 0, 1
	case fl.burst:
		fl.burst = false
		return 0, len(fl.flows)
	}
	f := int(fl.next) % len(fl.flows)
	fl.next = uint8((f + 1) % len(fl.flows))
	return f, 1
}

// hurry reports whether a lost probe of the path's flow calls for the
// path's next turn soon, and sets that turn to be a burst: on one flow
// always; on several unless the flow is lossy and some flow answered its
// last probe (one dead flow among answering ones is no outage, and must
// not make the path probed ten times a second).
func (pa *path) hurry(flow int) bool {
	fl := pa.fl
	if fl == nil {
		return true
	}
	if flow >= 0 && flow < len(fl.flows) && fl.flows[flow].lossy && !pa.everyFlowLosing() {
		return false
	}
	fl.burst = true
	return true
}

// offeredFlows returns the QPNs of lp's further flows (1 on) that this
// node offers a peer: as many as [probe] flows asks for and the port has.
func (m *Manager) offeredFlows(lp ud.LocalPort) []ud.Flow {
	n := min(max(m.cfg.Flows, 1), len(lp.Flows))
	if n <= 1 {
		return nil
	}
	return lp.Flows[1:n]
}

// flowsQueryExt returns the extension of a query from lp naming its
// further flows, and false when there are none to offer.
func (m *Manager) flowsQueryExt(lp ud.LocalPort) (wire.Ext, bool) {
	fs := m.offeredFlows(lp)
	if len(fs) == 0 {
		return wire.Ext{}, false
	}
	// In a buffer of the manager's: the query is encoded before the
	// next one is made.
	b := m.control.qflows[:0]
	for _, f := range fs {
		b = wire.AppendFlowQPN(b, f.QPN)
	}
	m.control.qflows = b
	return wire.Ext{Type: wire.ExtFlows, Value: b}, true
}

// acceptFlows sets the flows path pa probes after the peer's answer a
// (its index is the path's local port, lp): flow 0 and as many further
// ones as the answer says the peer admitted of those offered. A peer that
// does not say (an rdmad that predates flows, a version-1 answer) gets
// flow 0 only: it would drop the probes of the others, which would look
// lossy. A path whose number of flows changes starts its flows afresh.
func (m *Manager) acceptFlows(pa *path, lp ud.LocalPort, a wire.Message) {
	n := 1
	if k, ok := wire.FlowsAccepted(a); ok {
		n = 1 + min(k, len(m.offeredFlows(lp)))
	}
	if n == 1 {
		if pa.fl != nil {
			pa.fl = nil
			pa.win = *newWindow(m.cfg.Window)
			m.pub.changed = true
		}
		return
	}
	if pa.pathFlows() != n {
		fs := make([]flowState, n)
		size := flowWindow(m.cfg.Window, n)
		samples := newSamples(size, n)
		for i := range fs {
			fs[i].win = windowAt(samples, size, i)
		}
		pa.fl = &flowSet{flows: fs, pcts: pcts{fresh: math.MaxUint16}}
		// The path's figures are its flows' (flowSet.loss, stats): it
		// needs no window of its own.
		pa.win = window{}
		m.pub.changed = true
	}
	for i := range pa.fl.flows {
		pa.fl.flows[i].sport = lp.Flows[i].SourcePort
	}
}

// observeFlows takes a sample of flow (-1: of every flow, a failure of the
// whole path) of a path with several flows and judges the path; see
// health.judge. It reports whether the path's state changed.
func (pa *path) observeFlows(flow int, s sample, buf *[]uint16, t Thresholds, now time.Time, tx *texts) bool {
	for i := range pa.fl.flows {
		if flow >= 0 && i != flow {
			continue
		}
		f := &pa.fl.flows[i]
		f.win.add(s)
		if s.lost {
			f.consecLost = min(f.consecLost+1, math.MaxUint16)
			f.consecOK = 0
		} else {
			f.consecOK = min(f.consecOK+1, math.MaxUint16)
			f.consecLost = 0
		}
		ws := f.win.loss()
		switch {
		case !f.lossy && ws.Lost >= t.MinLosses && ws.LossPct > t.LossPct:
			f.lossy = true
			pa.fl.lossy++
		case f.lossy && t.clear(winStats{Samples: ws.Samples, Lost: ws.Lost, LossPct: ws.LossPct}):
			f.lossy = false
			pa.fl.lossy--
		}
	}
	if flow >= 0 {
		pa.fl.added(1)
	} else {
		pa.fl.added(len(pa.fl.flows))
	}
	// The path's runs (health.judge reads them): down when its last
	// down_after probes were lost and so was every flow's last one; up
	// again after up_after answers since the flows' last losses, counted
	// together. A sample of every flow (-1) is one probe of the path.
	if s.lost {
		if pa.fl.lostRun < math.MaxInt32 {
			pa.fl.lostRun++
		}
	} else {
		pa.fl.lostRun = 0
	}
	pa.h.consecLost, pa.h.consecOK = 0, 0
	if pa.everyFlowLosing() {
		pa.h.consecLost = pa.fl.lostRun
	}
	if !s.lost {
		for i := range pa.fl.flows {
			pa.h.consecOK += int32(pa.fl.flows[i].consecOK)
		}
	}
	// Back up from down, judge restarts the flows (flowSet.restart).
	pa.fl.at = int8(flow)
	return pa.h.judge(s, judged{fs: pa.fl, buf: buf}, t, now, pa.flowsReason(t, tx), tx)
}

// A flowsKey is what a path's flows reason was written for.
type flowsKey struct {
	lossy, worst  uint8
	lost, samples int32
	lossPct       float64
}

// flowsReason returns why the path's flows make it degraded ("" when none
// is lossy), written again only when the figures it gives change, and
// then taken from tx (nil: none) when it holds the text.
func (pa *path) flowsReason(t Thresholds, tx *texts) string {
	if pa.fl == nil || pa.fl.lossy == 0 {
		return ""
	}
	worst, wl := 0, winStats{}
	for i := range pa.fl.flows {
		if !pa.fl.flows[i].lossy {
			continue
		}
		if ws := pa.fl.flows[i].win.loss(); ws.LossPct > wl.LossPct || wl.Samples == 0 {
			worst, wl = i, ws
		}
	}
	k := flowsKey{lossy: pa.fl.lossy, worst: uint8(worst), lost: int32(wl.Lost), samples: int32(wl.Samples), lossPct: t.LossPct}
	if k == pa.fl.whyFor && pa.fl.why != "" {
		return pa.fl.why
	}
	f := &pa.fl.flows[worst]
	if why := tx.flows(k, len(pa.fl.flows), f.sport); why != "" {
		pa.fl.why, pa.fl.whyFor = why, k
		return why
	}
	port := ""
	if f.sport != 0 {
		port = fmt.Sprintf(", UDP source port %d", f.sport)
	}
	what := "the other flows are clean: suspect one of the fabric's equal-cost paths (a link or switch that drops only the flows hashed onto it)"
	if int(pa.fl.lossy) == len(pa.fl.flows) {
		what = "every flow loses"
	}
	pa.fl.why = fmt.Sprintf("loss on %d of %d flows (worst flow %d%s: %.1f%% over its last %d probes, threshold %.1f%%); %s",
		pa.fl.lossy, len(pa.fl.flows), worst, port, wl.LossPct, wl.Samples, t.LossPct, what)
	pa.fl.whyFor = k
	tx.keepFlows(k, len(pa.fl.flows), f.sport, pa.fl.why)
	return pa.fl.why
}

// flowStates appends the path's flows as the state shows them to out: its
// flows, or for a path on one flow that flow with the path's figures (st)
// and lp's first flow.
func (pa *path) flowStates(out []apitype.PeerFlow, st winStats, lp *ud.LocalPort, buf *[]uint16) []apitype.PeerFlow {
	if pa.fl == nil {
		f := apitype.PeerFlow{Flow: 0, Sent: pa.sent, Lost: pa.lost, LossPct: st.LossPct, RTTP50: st.P50, RTTP99: st.P99}
		if lp != nil && len(lp.Flows) > 0 {
			f.QPN, f.SourcePort = lp.Flows[0].QPN, lp.Flows[0].SourcePort
		}
		return append(out, f)
	}
	for i := range pa.fl.flows {
		f := &pa.fl.flows[i]
		ws := f.win.published(buf)
		var qpn uint32
		if lp != nil && i < len(lp.Flows) {
			qpn = lp.Flows[i].QPN
		}
		out = append(out, apitype.PeerFlow{Flow: i, SourcePort: f.sport, QPN: qpn, Sent: f.sent, Lost: f.lost,
			LossPct: ws.LossPct, RTTP50: ws.P50, RTTP99: ws.P99, Lossy: f.lossy})
	}
	return out
}

// localIndex returns the index of the local port key in m.local, -1 when
// it is gone.
func (m *Manager) localIndex(key string) int {
	for i := range m.local {
		if m.local[i].Key == key {
			return i
		}
	}
	return -1
}

// everyFlowLosing reports whether the last probe of every flow of the path
// was lost (always, for a path on one flow, after a loss): the start of an
// outage rather than a lossy flow.
func (pa *path) everyFlowLosing() bool {
	if pa.fl == nil {
		return true
	}
	for i := range pa.fl.flows {
		if pa.fl.flows[i].consecLost == 0 {
			return false
		}
	}
	return true
}
