package probe

import (
	"sync/atomic"
	"time"
)

// A pass of the manager takes milliseconds, but one thing in it can block:
// posting the probes (Transport.ProbeBatch) is a call into the provider,
// which on hardware is a doorbell write and on rxe runs the kernel's
// requester in the caller's context. On the test bed a tc drop on the
// sender made rxe retry a send inside the next post, and the pass stood
// 14-16 s in it (docs/TESTING.md): no probe went, no reply was taken, no
// state was published, and the status went on showing the last one, every
// peer up. So the manager says what its pass is doing and since when
// (Stalled), and the daemon turns a pass that has stood too long into an
// error of its peers component: a stalled prober cannot vouch for its
// peers, and the health verdict must not say they are fine.
type passWatch struct {
	start atomic.Int64 // UnixNano when the running pass began; 0 between passes
	phase atomic.Int32 // a passPhase
}

type passPhase int32

const (
	phaseStart passPhase = iota
	phaseInbox
	phaseExpire
	phaseVisits
	phasePost
	phasePublish
	phaseSettings
	phasePorts
	phaseFinish
	phaseCollect
)

var phaseNames = [...]string{
	phaseStart:    "starting a pass",
	phaseInbox:    "taking the replies and control answers",
	phaseExpire:   "counting timed-out probes",
	phaseVisits:   "visiting the peers due",
	phasePost:     "handing the probes to the ports' posters",
	phasePublish:  "publishing the state",
	phaseSettings: "applying new settings",
	phasePorts:    "reading the local ports from the RDMA engine",
	phaseFinish:   "finishing the pass (the allow list, the fingerprint)",
	phaseCollect:  "taking what the ports' posters report",
}

func (w *passWatch) begin(now time.Time, ph passPhase) {
	w.phase.Store(int32(ph))
	w.start.Store(now.UnixNano())
}

func (w *passWatch) in(ph passPhase) { w.phase.Store(int32(ph)) }

func (w *passWatch) end() { w.start.Store(0) }

// StallBound is how long a pass may run before Stalled reports it: ten
// times the probe interval, at least 10 s. A pass at ten thousand peers
// takes some 20 ms.
func StallBound(interval time.Duration) time.Duration { return max(10*time.Second, 10*interval) }

// Stalled reports whether the manager's pass running at now began more
// than bound ago, when it began and what it is doing. Safe for any
// goroutine.
func (m *Manager) Stalled(now time.Time, bound time.Duration) (since time.Time, doing string, stalled bool) {
	st := m.pass.start.Load()
	if st == 0 {
		return time.Time{}, "", false
	}
	since = time.Unix(0, st)
	if now.Sub(since) <= bound {
		return time.Time{}, "", false
	}
	ph := passPhase(m.pass.phase.Load())
	doing = "?"
	if ph >= 0 && int(ph) < len(phaseNames) {
		doing = phaseNames[ph]
	}
	return since, doing, true
}
