package doctor

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// Thresholds of the packet-loss check. Some pausing is how lossless RoCE
// works; a priority paused much of the time, a pause storm or a drop is
// not.
const (
	// pausedShare: a priority paused for this share of the interval or
	// more (its pause_duration counter) is pausing heavily.
	pausedShare = 0.10
	// pauseFramesPerSecond: without a duration counter, this many pause
	// frames a second on a priority (or of link-level pause) is heavy
	// pausing. A pause of the largest quanta (65535 x 512 bit times)
	// lasts 336 µs at 100 Gb/s and 1.3 ms at 25 Gb/s, and a port that
	// holds the priority paused sends the next before it runs out: at
	// 1,000 a second the priority is paused a sizeable part of the time.
	pauseFramesPerSecond = 1000
)

// The counter names of the packet-loss check: the ethtool -S names rdmad
// keeps (inventory/ethtool.Kept; this package must not link it) and the
// standard pause frames under ethtool -I -a's names.
var (
	prioPauseName = regexp.MustCompile(`^(rx|tx)_prio([0-7])_pause(_duration)?$`)
	discardName   = regexp.MustCompile(`^(rx_discards_phy|tx_discards_phy|rx_out_of_buffer|rx_prio[0-7]_discards|rx_prio[0-7]_buf_discard)$`)
)

const (
	stormWarning = "tx_pause_storm_warning_events"
	stormError   = "tx_pause_storm_error_events"
	txPause      = "tx_pause_frames"
	rxPause      = "rx_pause_frames"
)

// packetLossFix is the fix of heavy pausing and discards.
const packetLossFix = "check PFC on the RoCE priority (the pfc check; dcb pfc show dev <netdev> here and on the switch port) and the switch's buffer and ECN settings for that priority: lossless RoCE needs PFC on the same priority end to end, and ECN marking (DCQCN) before the buffers fill"

// stormFix is the fix of a pause storm.
const stormFix = "a pause storm comes from a receiver that stopped draining: tx_pause_storm_* counts this host's own (check its driver, PCIe link and load: dmesg, ethtool -S for rx_out_of_buffer); then " + packetLossFix + ", and the switch's PFC watchdog"

// roceNetdevs returns the netdevs of the Ethernet RDMA ports of devs,
// sorted, each once.
func roceNetdevs(devs []apitype.Device) []string {
	var out []string
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer == "Ethernet" && p.Netdev != "" && !slices.Contains(out, p.Netdev) {
				out = append(out, p.Netdev)
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkPacketLoss reads the RoCE netdevs' pause and discard counters twice,
// Interval apart (with the devices' reads, like the other rising-counter
// checks), and fails on a pause storm's error events, warns on its warning
// events, on a priority (or link-level pause) paused heavily and on any
// discard.
func checkPacketLoss(e *Env) Result {
	if e.NetCounters == nil {
		return skip("the pause and discard counters (ethtool netlink and ioctls) are read on the host itself, not for a fixture tree")
	}
	if _, r := devicesOrSkip(e); r != nil {
		return *r
	}
	if e.Interval <= 0 {
		return skip("no interval to compare counters over (--interval 0)")
	}
	if _, err := e.Later(); err != nil {
		return skip(fmt.Sprintf("second counter read: %v", err))
	}
	netdevs := roceNetdevs(e.devs)
	if len(netdevs) == 0 {
		return skip("no RoCE ports with a netdev (InfiniBand ports have no pause frames)")
	}
	var c collector
	var notes []string
	judged := 0
	for _, nd := range netdevs {
		before, after := e.net1[nd], e.net2[nd]
		err := before.err
		if err == nil {
			err = after.err
		}
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			notes = append(notes, fmt.Sprintf("%s has no pause or discard counters (its driver offers neither: ethtool -I -a %s, ethtool -S %s)", nd, nd, nd))
			continue
		case err != nil:
			c.add(Warn, fmt.Sprintf("cannot read the pause and discard counters of %s: %v", nd, err),
				fmt.Sprintf("compare with ethtool -S %s by hand; journalctl -u rdmad says more", nd))
			continue
		}
		n := judgeNetdev(&c, nd, before.counters, after.counters, e.Interval)
		if n == 0 {
			notes = append(notes, fmt.Sprintf("%s has none of the pause or discard counters rdmad judges", nd))
		}
		judged += n
	}
	if c.verdict == "" {
		if judged == 0 {
			return skip(strings.Join(notes, "; "))
		}
		c.add(OK, fmt.Sprintf("no pause storm, heavy pausing or discards over %s (%d counters)", e.Interval, judged), "")
	}
	c.msgs = append(c.msgs, notes...)
	return c.result("")
}

// judgeNetdev compares a netdev's two reads, adds its findings to c and
// returns how many counters it judged.
func judgeNetdev(c *collector, nd string, before, after map[string]uint64, interval time.Duration) int {
	secs := interval.Seconds()
	rise := func(name string) (uint64, bool) {
		v, ok := after[name]
		pv, ok2 := before[name]
		if !ok || !ok2 {
			return 0, false
		}
		if v < pv { // the driver reset its counters
			return 0, true
		}
		return v - pv, true
	}
	judged := 0
	var lines []string
	var stormErr, stormWarn, pausing, discards []string

	if d, ok := rise(stormError); ok {
		judged++
		if d > 0 {
			stormErr = append(stormErr, fmt.Sprintf("%s +%d", stormError, d))
		}
	}
	if d, ok := rise(stormWarning); ok {
		judged++
		if d > 0 {
			stormWarn = append(stormWarn, fmt.Sprintf("%s +%d", stormWarning, d))
		}
	}
	for _, g := range []struct{ name, what string }{{rxPause, "received"}, {txPause, "sent"}} {
		if d, ok := rise(g.name); ok {
			judged++
			if float64(d)/secs >= pauseFramesPerSecond {
				pausing = append(pausing, fmt.Sprintf("%d link-level pause frames %s (%s +%d)", d, g.what, g.name, d))
			}
		}
	}
	// Per priority and direction: the share of time paused where the
	// driver counts it, else the frame rate.
	names := make([]string, 0, len(after))
	for name := range after {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		m := prioPauseName.FindStringSubmatch(name)
		if m == nil || m[3] != "" {
			continue
		}
		dir, prio := m[1], m[2]
		frames, ok := rise(name)
		if !ok {
			continue
		}
		judged++
		by := "by the link partner, the network is congested"
		if dir == "tx" {
			by = "by this port, this host cannot take the traffic in"
		}
		if dur, ok := rise(name + "_duration"); ok {
			judged++
			share := float64(dur) / 1e6 / secs
			if share >= pausedShare {
				pausing = append(pausing, fmt.Sprintf("priority %s paused %.0f%% of the time %s (%s +%d, %s_duration +%s)",
					prio, 100*share, by, name, frames, name, time.Duration(dur)*time.Microsecond))
			}
			continue
		}
		if float64(frames)/secs >= pauseFramesPerSecond {
			pausing = append(pausing, fmt.Sprintf("priority %s paused %s (%s +%d)", prio, by, name, frames))
		}
	}
	for _, name := range names {
		if !discardName.MatchString(name) {
			continue
		}
		d, ok := rise(name)
		if !ok {
			continue
		}
		judged++
		if d > 0 {
			discards = append(discards, name+" +"+strconv.FormatUint(d, 10))
		}
	}

	in := " in " + interval.String()
	if len(stormErr) > 0 {
		c.add(Fail, fmt.Sprintf("%s: PAUSE STORM: %s%s: the NIC sent pause frames until its timeout and stopped sending them (drops follow)", nd, strings.Join(stormErr, ", "), in), stormFix)
	}
	if len(stormWarn) > 0 {
		c.add(Warn, fmt.Sprintf("%s: pause storm building: %s%s: the NIC has been sending pause frames for long", nd, strings.Join(stormWarn, ", "), in), stormFix)
	}
	if len(pausing) > 0 {
		lines = append(lines, fmt.Sprintf("%s: heavy pausing%s: %s", nd, in, strings.Join(pausing, "; ")))
	}
	if len(discards) > 0 {
		lines = append(lines, fmt.Sprintf("%s: discards rising: %s%s", nd, strings.Join(discards, ", "), in))
	}
	for _, l := range lines {
		c.add(Warn, l, packetLossFix)
	}
	return judged
}
