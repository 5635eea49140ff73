// Package doctor is the classic RDMA troubleshooting table as checks a
// program runs: no devices, missing uverbs, ports down, no RoCE v2 GID for
// the netdev's address, MTU mismatch, PFC or DSCP trust off, memlock too
// low, clock not synchronised, error counters rising, pause storms and
// discards on the RoCE netdevs, peers down.
//
// rdmad runs the table on its node (GET /v1/doctor, D-Bus Doctor), as root
// and with its own state at hand; rdmactl prints that, and runs the table
// itself only when rdmad does not answer. Every check reads the node
// through an Env (sysfs, /proc and /dev roots, the daemon's snapshot), so
// that tests drive each one from fixture trees. The package imports no
// part of the daemon, so that rdmactl can link it.
package doctor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/inventory"
)

// Verdicts, from best to worst.
const (
	Skip = apitype.VerdictSkip
	OK   = apitype.VerdictOK
	Warn = apitype.VerdictWarn
	Fail = apitype.VerdictFail
)

// Rank orders verdicts: a larger rank is worse.
func Rank(v string) int {
	switch v {
	case OK:
		return 1
	case Warn:
		return 2
	case Fail:
		return 3
	}
	return 0
}

// A Check is one row of the troubleshooting table.
type Check struct {
	ID, Title string
	Run       func(*Env) Result
}

// A Result is what a check found.
type Result struct {
	Verdict string
	// Message says what was found, naming the objects.
	Message string
	// Fix says what to do about a warn or fail.
	Fix string
}

// DefaultMinMemlock is the RLIMIT_MEMLOCK below which memory registration
// is considered at risk when nothing better is known: the kernel's default
// since Linux 5.16, enough for small programs, too small for real pools.
const DefaultMinMemlock = 8 << 20

// An Env is the node as the checks see it.
type Env struct {
	// Ctx bounds waits (the counter interval).
	Ctx context.Context
	// SysRoot holds sys/ ("/" normally), as inventory.Reader.Root.
	SysRoot string
	// IPoIBDevice is passed to the inventory reader (inventory.Reader);
	// nil follows sysfs's device links.
	IPoIBDevice func(netdev string) (string, error)
	// ProcRoot is procfs ("/proc").
	ProcRoot string
	// DevRoot is devtmpfs ("/dev").
	DevRoot string
	// Snapshot is rdmad's state; nil when rdmad did not answer, and then
	// DaemonErr says why.
	Snapshot  *apitype.Snapshot
	DaemonErr error
	// DaemonRefused: rdmad answers but refused this caller (DaemonErr is
	// the refusal), so the fix is the caller's access, not starting rdmad.
	DaemonRefused bool
	// Interval separates the two counter reads of the "rising" checks; 0
	// skips them.
	Interval time.Duration
	// Wait waits d; nil sleeps. Tests bump counters in it.
	Wait func(ctx context.Context, d time.Duration) error
	// Addrs returns a netdev's addresses; nil asks the kernel.
	Addrs func(netdev string) ([]netip.Addr, error)
	// Adjtimex reads the kernel clock's state; nil calls adjtimex(2).
	Adjtimex func(*unix.Timex) (int, error)
	// NetCounters returns the pause and discard counters of a RoCE netdev
	// by name: the ethtool -S statistics rdmad keeps (rx_prio3_pause,
	// rx_prio3_pause_duration, tx_pause_storm_error_events,
	// rx_discards_phy, ...) and the standard pause frames as
	// tx_pause_frames and rx_pause_frames (ethtool -I -a's names). An
	// error matching errors.ErrUnsupported means the netdev has none of
	// them. rdmad sets it, and rdmactl when it runs the table itself
	// (inventory/ethtool, over netlink and ioctls, which this package
	// does not link); nil skips the packet-loss check. It
	// is called with the devices' reads (Devices, Later) when Interval is
	// set, so that its counters span the same interval.
	NetCounters func(netdev string) (map[string]uint64, error)
	// Resources reads the RDMA objects the kernel tracks per process
	// (inventory/rdmares: RDMA netlink); the memlock checks name the
	// processes that pin the most memory when registration is at risk.
	// nil leaves the names out. rdmad passes its reader; rdmactl, which
	// links rdmares, its own read.
	Resources func() (apitype.Resources, error)

	pinOnce sync.Once
	pinned  string
	// QoS reads the DCB state (trust, PFC, DSCP map, ETS) of a RoCE
	// netdev now; device is the RDMA device whose port runs over it.
	// rdmad sets it (dcbnl, which rdmactl does not link); nil makes the
	// pfc and dscp-trust checks use the snapshot's QoS list, read at
	// rdmad's last inventory refresh.
	QoS func(netdev, device string) apitype.NetdevQoS

	qosOnce sync.Once
	qos     []apitype.NetdevQoS

	once    sync.Once
	devs    []apitype.Device
	devErr  error
	later   sync.Once
	devs2   []apitype.Device
	devErr2 error
	// net1 and net2 are the NetCounters reads of the RoCE netdevs of devs,
	// with Devices and with Later.
	net1, net2 map[string]netRead
}

// netRead is one NetCounters read of a netdev.
type netRead struct {
	counters map[string]uint64
	err      error
}

// Devices returns the RDMA devices from sysfs (read once per Env).
func (e *Env) Devices() ([]apitype.Device, error) {
	e.once.Do(func() {
		e.devs, e.devErr = e.reader().Read()
		if e.devErr == nil && e.NetCounters != nil && e.Interval > 0 {
			e.net1 = e.readNet()
		}
	})
	return e.devs, e.devErr
}

// Later returns the devices read again Interval after Devices, for
// counters that must not rise (read once per Env).
func (e *Env) Later() ([]apitype.Device, error) {
	e.Devices()
	e.later.Do(func() {
		wait := e.Wait
		if wait == nil {
			wait = sleep
		}
		ctx := e.Ctx
		if ctx == nil {
			ctx = context.Background()
		}
		if err := wait(ctx, e.Interval); err != nil {
			e.devErr2 = err
			return
		}
		e.devs2, e.devErr2 = e.reader().Read()
		if e.net1 != nil {
			e.net2 = e.readNet()
		}
	})
	return e.devs2, e.devErr2
}

// readNet reads the counters of the RoCE netdevs of the first devices
// read.
func (e *Env) readNet() map[string]netRead {
	m := map[string]netRead{}
	for _, nd := range roceNetdevs(e.devs) {
		c, err := e.NetCounters(nd)
		m[nd] = netRead{counters: c, err: err}
	}
	return m
}

func (e *Env) reader() inventory.Reader {
	return inventory.Reader{Root: e.SysRoot, IPoIBDevice: e.IPoIBDevice}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *Env) sys(p ...string) string {
	root := e.SysRoot
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root, "sys"}, p...)...)
}

func (e *Env) proc(p ...string) string {
	root := e.ProcRoot
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(append([]string{root}, p...)...)
}

func (e *Env) dev(p ...string) string {
	root := e.DevRoot
	if root == "" {
		root = "/dev"
	}
	return filepath.Join(append([]string{root}, p...)...)
}

func (e *Env) addrs(netdev string) ([]netip.Addr, error) {
	if e.Addrs != nil {
		return e.Addrs(netdev)
	}
	ifi, err := net.InterfaceByName(netdev)
	if err != nil {
		return nil, err
	}
	as, err := ifi.Addrs()
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", netdev, err)
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

func (e *Env) adjtimex(tx *unix.Timex) (int, error) {
	if e.Adjtimex != nil {
		return e.Adjtimex(tx)
	}
	return unix.Adjtimex(tx)
}

// Run runs checks in order and returns their reports.
func Run(e *Env, checks []Check) []apitype.DoctorCheck {
	out := make([]apitype.DoctorCheck, 0, len(checks))
	for _, c := range checks {
		r := c.Run(e)
		out = append(out, apitype.DoctorCheck{ID: c.ID, Title: c.Title, Verdict: r.Verdict, Message: r.Message, Fix: r.Fix})
	}
	return out
}

// Worst returns the worst verdict of rs (Skip when rs is empty).
func Worst(rs []apitype.DoctorCheck) string {
	w := Skip
	for _, r := range rs {
		if Rank(r.Verdict) > Rank(w) {
			w = r.Verdict
		}
	}
	return w
}
