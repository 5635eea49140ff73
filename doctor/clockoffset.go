package doctor

import (
	"fmt"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// MaxClockOffset is how far a peer's clock may be from this node's before
// the clock-offset check warns: NTP keeps a fleet's clocks within a few
// milliseconds of each other, and 100 ms apart the logs, traces and
// timestamps of one job's nodes no longer order their events (the guide's
// troubleshooting row "多节点时间不同步", clocks not synchronised).
const MaxClockOffset = 100 * time.Millisecond

// minClockSamples is how many agreeing exchanges a peer's offset needs
// before it is judged: one message, whatever error bound it claims, is
// never a verdict (rdmad restarts a peer's window when a sample disagrees
// with it, so two samples are two exchanges that agree).
const minClockSamples = 2

// checkClockOffset runs inside rdmad (it needs no adjtimex, which rdmad's
// ProtectClock forbids): it reads the clock offset rdmad measures to each
// peer over the control exchange (docs/PROBES.md, "Clock offset") and warns
// for each peer whose clock is more than MaxClockOffset from this node's
// even at the most favourable end of its error bound. When most of the
// judged peers (at least two) are off the same way, this node's clock is
// the likelier culprit, and the message says so.
func checkClockOffset(e *Env) Result {
	s := e.Snapshot
	if s == nil {
		return notReachable(e)
	}
	if comp, ok := s.Components[apitype.ComponentPeers]; !ok || comp.State == apitype.Disabled || comp.State == apitype.Unavailable {
		return skip("no peer probes, so no peer clock to compare with (see the peers check)")
	}
	judged, pending, ahead, behind := 0, 0, 0, 0
	var worst time.Duration
	var c collector
	var off []string
	for _, p := range s.Peers.Peers {
		switch {
		case p.ClockSamples == 0:
			continue
		case p.ClockSamples < minClockSamples:
			pending++
			continue
		}
		judged++
		d := p.ClockOffset
		if d < 0 {
			d = -d
		}
		worst = max(worst, d)
		if d-p.ClockOffsetError <= MaxClockOffset {
			continue
		}
		dir := "ahead of"
		if p.ClockOffset < 0 {
			dir = "behind"
			behind++
		} else {
			ahead++
		}
		off = append(off, fmt.Sprintf("%s's clock is %v %s this node's (± %v)", p.Name, d.Round(time.Millisecond), dir, p.ClockOffsetError.Round(time.Microsecond)))
	}
	if judged == 0 {
		if pending > 0 {
			return skip(fmt.Sprintf("%d peers have sent one clock sample so far; the offset is judged from %d exchanges that agree", pending, minClockSamples))
		}
		return skip("no peer has sent clock timestamps yet (an rdmad that predates them sends none)")
	}
	fix := "synchronise every node's clock with NTP (chronyd or systemd-timesyncd; timedatectl status shows whether a node is synchronised), on the nodes named first"
	for _, line := range limit(off) {
		c.add(Warn, line, fix)
	}
	if n := max(ahead, behind); n >= 2 && 2*n > judged {
		c.add(Warn, fmt.Sprintf("%d of the %d peers judged disagree with this node the same way: suspect this node's clock first", n, judged),
			"check this node's clock: timedatectl status, chronyc tracking")
	}
	if c.verdict == "" {
		c.add(OK, fmt.Sprintf("%d peers' clocks are within %v of this node's (the largest offset %v)", judged, MaxClockOffset, worst.Round(time.Microsecond)), "")
	}
	return c.result("")
}
