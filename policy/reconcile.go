package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/policy/dcb"
	"github.com/rdmad/rdmad/policy/ecn"
	"github.com/rdmad/rdmad/policy/memlock"
	"github.com/rdmad/rdmad/policy/mtu"
	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/policy/qos"
	"github.com/rdmad/rdmad/policy/rdmanl"
	"github.com/rdmad/rdmad/policy/roce"
)

// Declared is everything the administrator declared that a Reconciler
// enforces: the rules in configuration order, and the memlock settings.
type Declared struct {
	Rules   []Rule
	Memlock Memlock
	RDMA    RDMASystem
}

// RDMASystem holds what [rdma] declares: node-wide settings of the RDMA
// subsystem.
type RDMASystem struct {
	// NetnsMode is "shared" or "exclusive" (rdmanl.Netns*); "" leaves it.
	NetnsMode string
}

// rdmaPolicy names the node-wide [rdma] settings' targets in status; the
// brackets keep it apart from any [[policy]] name.
const rdmaPolicy = "[rdma]"

// Memlock holds what [memlock] declares.
type Memlock struct {
	// Daemon is the RLIMIT_MEMLOCK rdmad raises for itself; nil leaves it.
	Daemon *size.Size
	// Users, when set, makes the reconciler keep LimitsFile with memlock
	// rules for UsersDomain; unset, a LimitsFile rdmad wrote is removed.
	Users       *size.Size
	UsersDomain string
	LimitsFile  string
	// ConfigPath is the configuration file that declares it, which the
	// limits file's header names ("" for memlock.DefaultConfigPath).
	ConfigPath string
}

// A Scope limits a pass to the objects an event touched. A nil Scope is a
// full pass.
type Scope struct {
	Netdevs map[string]bool
	Devices map[string]bool
}

func (s *Scope) netdev(n string) bool { return s == nil || s.Netdevs[n] }
func (s *Scope) port(p Port) bool {
	return s == nil || s.Devices[p.Device] || (p.Netdev != "" && s.Netdevs[p.Netdev])
}

// A Reconciler is the plan and its execution: it resolves the rules
// against the netdevs and ports that exist, asks each applier for the
// actual value, applies the difference where a rule enforces, and keeps
// the targets' history (counters, last change). It is not safe for
// concurrent use: the daemon's main loop owns it.
type Reconciler struct {
	log  *slog.Logger
	mtu  *mtu.Client
	dcb  *dcb.Conn
	roce *roce.Client
	ecn  *ecn.Client
	// ecnUnit writes the ecn files where rdmad's own writes fail with
	// EROFS (Options.ECNUnit); nil: such a write is an error. ecnApply
	// replaces ecn.Apply in tests (which cannot make sysfs read-only).
	ecnUnit  func(netdev string, want ecn.Want) error
	ecnApply func(netdev string, want ecn.Want) ([]string, error)
	// ecnUnitFailed remembers, per netdev, the write through ecnUnit that
	// failed: the unit is started once per change (of the netdev, what is
	// wanted or what is read), not at every pass, and the failure is
	// reported until then.
	ecnUnitFailed map[string]ecnUnitAttempt
	// nicq sets ethtool queue parameters; nil when ethtool netlink could
	// not be opened, and nicqErr says why.
	nicq    *nicq.Conn
	nicqErr error
	// rdma sets RDMA device attributes over RDMA netlink; nil when the
	// socket could not be opened (no RDMA core), and rdmaErr says why.
	rdma    *rdmanl.Conn
	rdmaErr error
	// sysRoot is where sysfs is read from ("" is /; tests use a tree).
	sysRoot string
	now     func() time.Time

	// targets persists counters and last-change times across passes.
	targets map[string]entry
	// written lists the limits files rdmad wrote and may still have to
	// remove (a limits_file that moved, a [memlock] users that went),
	// kept in the state directory so that a move made while rdmad was
	// stopped is seen at the next start; the zero value is in memory
	// only. recordErr is the last error saving it, logged once.
	written   memlock.Record
	recordErr string
	// unsupported remembers, per netdev, the ifindex at which dcbnl said
	// the device has no DCB, so that it is reported once and not asked
	// again until the link is replaced or the configuration reloaded.
	unsupported map[string]int
	// nicUnsupported does the same per ethtool group target ("rings
	// ens1f0").
	nicUnsupported map[string]int
	// rdmaUnsupported does the same per RDMA port target
	// ("optional_counters mlx5_0/1"), by the RDMA device's index, which
	// the kernel renews when the device comes back; nil until needed.
	rdmaUnsupported map[string]uint32
	// overridden is what the last applying pass found overridden
	// (Desired.Overridden), for status.
	overridden []apitype.Override
}

// An ecnUnitAttempt is a write through the ECN unit that failed.
type ecnUnitAttempt struct {
	key string // ifindex, desired and actual when it was made
	err error
}

type entry struct {
	policy string
	t      apitype.Target
}

func targetKey(kind, object string) string { return kind + " " + object }

// Options are a Reconciler's settings.
type Options struct {
	// StateDir is rdmad's state directory, where the reconciler records
	// the limits files it writes (memlock.RecordName); "" keeps that
	// record in memory only.
	StateDir string
	// SysRoot is where sysfs is read (the devices' fw_ver); "" is "/".
	// rdmad on a fixture tree passes the tree's root.
	SysRoot string
	// ECNUnit, when set, is called when a write to an ecn file fails
	// with EROFS (rdmad.service's ProtectKernelTunables= makes /sys
	// read-only): it has the files written outside rdmad's sandbox (the
	// daemon starts rdmad-ecn@<netdev>.service) and returns why not. The
	// reconciler reads the files back afterwards.
	ECNUnit func(netdev string, want ecn.Want) error
}

// NewReconciler opens the appliers' kernel interfaces and reads the record
// of limits files in o.StateDir. One that cannot be opened or read is
// reported (by its targets, or in the log), not fatal.
func NewReconciler(log *slog.Logger, o Options) *Reconciler {
	r := &Reconciler{log: log, now: time.Now, targets: map[string]entry{}, unsupported: map[string]int{}, nicUnsupported: map[string]int{},
		sysRoot: o.SysRoot, ecnUnit: o.ECNUnit, ecnUnitFailed: map[string]ecnUnitAttempt{}}
	if o.StateDir != "" {
		rec, err := memlock.LoadRecord(filepath.Join(o.StateDir, memlock.RecordName))
		if err != nil {
			log.Warn("limits file record", "err", err)
		}
		r.written = *rec
	}
	var err error
	if r.mtu, err = mtu.Open(mtu.Options{}); err != nil {
		log.Error("rtnetlink unavailable; MTU policies cannot be applied", "err", err)
	}
	if r.dcb, err = dcb.Dial(nil); err != nil {
		log.Error("dcbnl unavailable; QoS policies cannot be applied", "err", err)
	}
	if r.nicq, r.nicqErr = nicq.Dial(0); r.nicqErr != nil {
		log.Error("ethtool netlink unavailable; ring, channel and coalescing policies cannot be applied", "err", r.nicqErr)
	}
	// Without the RDMA core there is no RDMA device to manage either:
	// that error is kept for the targets, not logged.
	if r.rdma, r.rdmaErr = rdmanl.Dial(); r.rdmaErr != nil && !rdmanl.IsUnsupported(r.rdmaErr) {
		log.Error("RDMA netlink unavailable; [policy.rdma] and [rdma] cannot be applied", "err", r.rdmaErr)
	}
	r.roce = roce.New(roce.Options{})
	r.ecn = ecn.New(ecn.Options{})
	return r
}

// Close closes the appliers' kernel interfaces.
func (r *Reconciler) Close() {
	if r.mtu != nil {
		r.mtu.Close()
	}
	if r.dcb != nil {
		r.dcb.Close()
	}
	if r.nicq != nil {
		r.nicq.Close()
	}
	if r.rdma != nil {
		r.rdma.Close()
	}
}

// Overridden returns the settings the last applying pass found taken
// over by a later policy (Desired.Overridden). Callers must not modify it.
func (r *Reconciler) Overridden() []apitype.Override { return r.overridden }

// Forget drops what is remembered of netdevs (after a reload, so every
// setting is looked at afresh).
func (r *Reconciler) Forget() {
	r.unsupported = map[string]int{}
	r.nicUnsupported = map[string]int{}
	r.rdmaUnsupported = nil
	r.ecnUnitFailed = map[string]ecnUnitAttempt{}
}

// Pass reconciles the objects in sc among the RDMA ports given and the
// host's netdevs. With apply false it only computes the changes
// enforcement would make and records nothing: the plan, as `rdmactl policy
// diff` shows it.
func (r *Reconciler) Pass(d Declared, ports []Port, sc *Scope, apply bool) ([]apitype.Change, []apitype.PolicyStatus) {
	netdevs, index := listNetdevs()
	want := Resolve(d.Rules, netdevs, ports)

	var changes []apitype.Change
	seen := map[string]bool{}
	record := func(src Source, kind, object string, t apitype.Target, cs []apitype.Change) {
		if t.State == "" {
			return // gone; see failed
		}
		key := targetKey(kind, object)
		seen[key] = true
		for i := range cs {
			cs[i].Policy, cs[i].Kind, cs[i].Object = src.Policy, kind, object
			cs[i].Action = "apply"
			if src.Observe {
				cs[i].Action = "report"
			}
		}
		changes = append(changes, cs...)
		if !apply {
			return
		}
		prev, ok := r.targets[key]
		t.Kind, t.Object = kind, object
		t.Applies, t.Drifts, t.LastChange = prev.t.Applies, prev.t.Drifts, prev.t.LastChange
		// Drifts counts drift events, not passes: a correction applied
		// (each one, also one that follows another: the kernel reverted
		// the setting again), or a target that starts to differ. A
		// target still drifted (observe mode) or still failing to apply
		// at the next pass is the same event.
		stillDiffers := ok && (prev.t.State == apitype.Drifted || prev.t.State == apitype.TargetError)
		if len(cs) > 0 && (t.State == apitype.Applied || !stillDiffers) {
			t.Drifts++
		}
		if t.State == apitype.Applied {
			t.Applies++
		}
		if !ok || prev.t.State != t.State || prev.t.Actual != t.Actual || prev.t.Error != t.Error {
			t.LastChange = r.now()
		}
		r.targets[key] = entry{policy: src.Policy, t: t}
		switch {
		case t.State == apitype.Applied && len(cs) > 0:
			// Every apply, also one that follows another (the kernel
			// reverted the setting again).
			r.log.Info("policy drift applied", apitype.MessageIDKey, apitype.MsgDriftApplied, "policy", src.Policy,
				"kind", kind, "object", object, "from", cs[0].From, "desired", t.Desired)
		case t.State == apitype.Drifted && (!ok || prev.t.State != t.State || prev.t.Actual != t.Actual):
			// Observe mode: once per drift, and again when the value
			// moves.
			msg := "policy drift detected; the policy observes and changes nothing"
			if kind == "firmware" {
				msg = "firmware differs from the policy's; rdmad does not flash firmware"
			}
			r.log.Warn(msg, apitype.MessageIDKey, apitype.MsgDriftDetected,
				"policy", src.Policy, "kind", kind, "object", object, "desired", t.Desired, "actual", t.Actual)
		case t.State == apitype.Unsupported && (!ok || prev.t.State != t.State || prev.t.Error != t.Error):
			// Once: the kernel's or driver's answer does not change
			// from pass to pass (a setting that is not asked again, or
			// one whose refusal is steady).
			r.log.Warn("policy setting unsupported here; rdmad leaves it alone", "policy", src.Policy,
				"kind", kind, "object", object, "desired", t.Desired, "err", t.Error)
		case ok && prev.t.State != t.State:
			attrs := []any{"policy", src.Policy, "kind", kind, "object", object, "state", t.State, "desired", t.Desired, "actual", t.Actual}
			if t.Error != "" {
				attrs = append(attrs, "err", t.Error)
			}
			r.log.Info("policy target changed", attrs...)
		}
	}

	for _, nd := range slices.Sorted(maps.Keys(want.Netdevs)) {
		if !sc.netdev(nd) {
			continue
		}
		w := want.Netdevs[nd]
		if w.MTU != 0 {
			t, cs := r.checkMTU(nd, w.MTU, apply && !w.MTUSrc.Observe)
			record(w.MTUSrc, "mtu", nd, t, cs)
		}
		if w.QoS != nil {
			t, cs := r.checkQoS(nd, index[nd], *w.QoS, apply && !w.QoSSrc.Observe)
			record(w.QoSSrc, "qos", nd, t, cs)
		}
		if w.ECN != nil {
			t, cs := r.checkECN(nd, index[nd], *w.ECN, apply && !w.ECNSrc.Observe)
			record(w.ECNSrc, "ecn", nd, t, cs)
		}
		for _, g := range nicq.Groups {
			if nw, ok := w.NIC[g.Kind]; ok {
				t, cs := r.checkNIC(g, nd, index[nd], nw.Values, apply && !nw.Src.Observe)
				record(nw.Src, g.Kind, nd, t, cs)
			}
		}
	}
	var rdmaDevs map[string]rdmanl.Device // one dump per pass, when needed
	var rdmaErr error
	rdmaDumped := false
	for _, dev := range slices.Sorted(maps.Keys(want.Devices)) {
		if sc != nil && !sc.Devices[dev] {
			continue
		}
		w := want.Devices[dev]
		if w.Firmware != "" {
			t, cs := r.checkFirmware(dev, w.Firmware)
			// Never applied, whatever the policy's mode: its changes
			// are reports.
			record(Source{Policy: w.FirmwareSrc.Policy, Observe: true}, "firmware", dev, t, cs)
		}
		if w.DIM != nil {
			if !rdmaDumped && r.rdma != nil {
				rdmaDevs, rdmaErr = r.rdma.Devices()
				rdmaDumped = true
			}
			t, cs := r.checkDIM(dev, *w.DIM, rdmaDevs, rdmaErr, apply && !w.DIMSrc.Observe)
			record(w.DIMSrc, "rdma", dev, t, cs)
		}
	}
	for _, p := range ports {
		w, ok := want.Ports[p]
		if !ok || !sc.port(p) {
			continue
		}
		if w.RoCE {
			t, cs := r.checkRoCE(p, w, apply && !w.RoCESrc.Observe)
			record(w.RoCESrc, "roce", p.String(), t, cs)
		}
		if w.Counters == nil && w.QPCounters == "" {
			continue
		}
		if !rdmaDumped && r.rdma != nil {
			rdmaDevs, rdmaErr = r.rdma.Devices()
			rdmaDumped = true
		}
		if w.Counters != nil {
			t, cs := r.checkCounters(p, *w.Counters, rdmaDevs, rdmaErr, apply && !w.CountersSrc.Observe)
			record(w.CountersSrc, "optional_counters", p.String(), t, cs)
		}
		if w.QPCounters != "" {
			t, cs := r.checkQPCounters(p, w.QPCounters, rdmaDevs, rdmaErr, apply && !w.QPSrc.Observe)
			record(w.QPSrc, "qp_counters", p.String(), t, cs)
		}
	}
	if sc == nil && d.RDMA.NetnsMode != "" {
		t, cs := r.checkNetnsMode(d.RDMA.NetnsMode, apply)
		record(Source{Policy: rdmaPolicy}, "rdma", "netns_mode", t, cs)
	}
	if sc == nil && d.Memlock.Daemon != nil {
		t, cs := r.checkDaemonMemlock(*d.Memlock.Daemon, apply)
		record(Source{Policy: "memlock"}, "memlock", "rdmad", t, cs)
	}
	if sc == nil && d.Memlock.Users != nil {
		t, cs := r.checkUserMemlock(d.Memlock, apply)
		record(Source{Policy: "memlock"}, "memlock", d.Memlock.LimitsFile, t, cs)
	}
	if sc == nil {
		// A limits file rdmad wrote keeps applying at every login after
		// its key is gone: remove it when [memlock] users goes, or from
		// its old path when limits_file moves. Looking at the path in
		// force also catches a key removed while rdmad was stopped, and
		// the record (in the state directory) a move made meanwhile.
		for _, path := range r.staleLimits(d.Memlock) {
			if t, cs := r.removeUserMemlock(path, apply); t.State != "" {
				record(Source{Policy: "memlock"}, "memlock", path, t, cs)
			}
		}
	}

	if !apply {
		return changes, nil
	}
	if !slices.Equal(r.overridden, want.Overridden) {
		for _, o := range want.Overridden {
			if !slices.Contains(r.overridden, o) {
				r.log.Warn("policy setting overridden by a later policy; it is not applied", "policy", o.Policy, "kind", o.Kind, "object", o.Object, "by", o.By)
			}
		}
	}
	r.overridden = want.Overridden
	// A target this pass should have visited but did not is no longer
	// wanted: its object or its policy is gone. A scoped pass only speaks
	// for the objects in its scope.
	for key, e := range r.targets {
		if seen[key] {
			continue
		}
		inScope := sc == nil || sc.Netdevs[e.t.Object] || (portKind(e.t.Kind) && sc.Devices[deviceOf(e.t.Object)]) ||
			((e.t.Kind == "firmware" || e.t.Kind == "rdma") && sc.Devices[e.t.Object])
		_, ok := want.Matches[e.policy]
		if e.t.Kind == "memlock" || e.policy == rdmaPolicy {
			ok = true // not a [[policy]]; only full passes drop it
		}
		if !ok || inScope {
			delete(r.targets, key)
		}
	}
	return changes, r.status(d, want)
}

// portKind reports whether targets of kind are per RDMA port (object
// "dev/port").
func portKind(kind string) bool {
	return kind == "roce" || kind == "optional_counters" || kind == "qp_counters"
}

func deviceOf(object string) string {
	for i := 0; i < len(object); i++ {
		if object[i] == '/' {
			return object[:i]
		}
	}
	return ""
}

// status builds the per-policy view of the targets, in configuration order.
func (r *Reconciler) status(d Declared, want Desired) []apitype.PolicyStatus {
	out := make([]apitype.PolicyStatus, 0, len(d.Rules)+1)
	byPolicy := map[string][]apitype.Target{}
	for _, e := range r.targets {
		byPolicy[e.policy] = append(byPolicy[e.policy], e.t)
	}
	add := func(name, mode string) {
		ts := byPolicy[name]
		sort.Slice(ts, func(i, j int) bool {
			if ts[i].Object != ts[j].Object {
				return ts[i].Object < ts[j].Object
			}
			return ts[i].Kind < ts[j].Kind
		})
		if ts == nil {
			ts = []apitype.Target{}
		}
		out = append(out, apitype.PolicyStatus{Name: name, Mode: mode, Targets: ts})
	}
	for _, p := range d.Rules {
		add(p.Name, p.Mode())
	}
	// A removed limits file is a memlock target too, also once the
	// [memlock] keys are gone.
	if d.Memlock.Daemon != nil || d.Memlock.Users != nil || len(byPolicy["memlock"]) > 0 {
		add("memlock", "enforce")
	}
	if d.RDMA.NetnsMode != "" {
		add(rdmaPolicy, "enforce")
	}
	return out
}

func (r *Reconciler) checkMTU(nd string, desired int, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: strconv.Itoa(desired)}
	if r.mtu == nil {
		return failed(t, errors.New("rtnetlink is unavailable (see the log)")), nil
	}
	actual, err := r.mtu.Observe(nd)
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = strconv.Itoa(actual)
	if actual == desired {
		t.State = apitype.InSync
		return t, nil
	}
	return settle(t, []apitype.Change{{From: t.Actual, To: t.Desired}}, enforce, func() error { return r.mtu.Set(nd, desired) })
}

func (r *Reconciler) checkQoS(nd string, ifindex int, want qos.Desired, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: FormatQoS(want.Trust, want.PFC, want.DSCPToPrio, want.PFC != nil, want.DSCPToPrio != nil)}
	if want.ETS != nil {
		t.Desired = joinNonEmpty(t.Desired, want.ETS.String())
	}
	if idx, ok := r.unsupported[nd]; ok && idx == ifindex {
		if prev, ok := r.targets[targetKey("qos", nd)]; ok {
			return prev.t, nil
		}
	}
	if r.dcb == nil {
		return failed(t, errors.New("dcbnl is unavailable (see the log)")), nil
	}
	actual, err := qos.Observe(r.dcb, nd)
	if qos.IsUnsupported(err) {
		r.unsupported[nd] = ifindex
		t.State, t.Actual = apitype.Unsupported, "no DCB"
		t.Error = fmt.Sprintf("%s has no DCB (dcbnl) support in its driver; QoS cannot be managed on it", nd)
		return t, nil
	}
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = FormatQoS(actual.Trust, actual.PFC, actual.DSCPToPrio, want.PFC != nil, want.DSCPToPrio != nil)
	if want.ETS != nil && actual.IEEE != nil && actual.IEEE.ETS != nil {
		t.Actual = joinNonEmpty(t.Actual, qos.ETSFrom(actual.IEEE.ETS).String())
	}
	plan, err := qos.Plan(want, actual)
	if qos.IsUnsupported(err) {
		// The device has DCB but not the part the policy manages (a
		// driver without ETS or PFC objects): a steady state, as above.
		r.unsupported[nd] = ifindex
		t.State, t.Error = apitype.Unsupported, err.Error()
		return t, nil
	}
	if err != nil {
		return failed(t, err), nil
	}
	if len(plan) == 0 {
		t.State = apitype.InSync
		return t, nil
	}
	var cs []apitype.Change
	for _, c := range plan {
		cs = append(cs, apitype.Change{From: c.From, To: c.String()})
	}
	var applyErr error
	t, cs = settle(t, cs, enforce, func() error {
		applyErr = qos.Apply(r.dcb, nd, plan)
		return applyErr
	})
	if qos.IsUnsupported(applyErr) {
		r.unsupported[nd] = ifindex
		t.State = apitype.Unsupported
	}
	return t, cs
}

// joinNonEmpty joins the non-empty strings with spaces.
func joinNonEmpty(s ...string) string {
	out := ""
	for _, v := range s {
		if v == "" {
			continue
		}
		if out != "" {
			out += " "
		}
		out += v
	}
	return out
}

// checkECN compares the DCQCN priorities of nd with what the policy wants
// and writes the files that differ. A netdev without the ecn sysfs files
// (not mlx5) is unsupported: reported as such at every pass, never retried
// as an error. A write refused because /sys is read-only (rdmad's sandbox)
// goes through the ECN unit, when there is one (writeECNUnit).
func (r *Reconciler) checkECN(nd string, ifindex int, want ECNRule, enforce bool) (apitype.Target, []apitype.Change) {
	np, rp := want.NP != nil, want.RP != nil
	t := apitype.Target{Desired: ecn.State{NP: want.NP, RP: want.RP}.String(np, rp)}
	if r.ecn == nil {
		r.ecn = ecn.New(ecn.Options{})
	}
	actual, err := r.ecn.Observe(nd)
	if ecn.IsUnsupported(err) {
		t.State, t.Actual, t.Error = apitype.Unsupported, "no ecn sysfs", err.Error()
		return t, nil
	}
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = actual.String(np, rp)
	if t.Actual == t.Desired {
		t.State = apitype.InSync
		return t, nil
	}
	var applyErr error
	t, cs := settle(t, []apitype.Change{{From: t.Actual, To: t.Desired}}, enforce, func() error {
		w := ecn.Want{NP: want.NP, RP: want.RP}
		if r.ecnApply != nil {
			_, applyErr = r.ecnApply(nd, w)
		} else {
			_, applyErr = r.ecn.Apply(nd, w)
		}
		if ecn.IsReadOnly(applyErr) && r.ecnUnit != nil {
			applyErr = r.writeECNUnit(nd, ifindex, w, t.Desired, t.Actual)
		}
		return applyErr
	})
	if ecn.IsUnsupported(applyErr) {
		t.State, t.Actual = apitype.Unsupported, "no ecn sysfs"
	}
	return t, cs
}

// writeECNUnit has the ECN unit write what rdmad could not (its /sys is
// read-only) and reads the files back. A failure of a unit that was
// started is remembered: the same netdev (ifindex), desired and actual
// state do not start the unit again (that would start a failing unit at
// every pass, each start in the journal); the remembered error is
// reported instead, until something changes or the configuration is
// reloaded (Forget).
func (r *Reconciler) writeECNUnit(nd string, ifindex int, w ecn.Want, desired, actual string) error {
	if r.ecnUnitFailed == nil {
		r.ecnUnitFailed = map[string]ecnUnitAttempt{}
	}
	key := strconv.Itoa(ifindex) + "\x00" + desired + "\x00" + actual
	if f, ok := r.ecnUnitFailed[nd]; ok && f.key == key {
		return f.err
	}
	unit := ecn.UnitName(nd)
	err := r.ecnUnit(nd, w)
	if err == nil {
		var s ecn.State
		if s, err = r.ecn.Observe(nd); err != nil {
			err = fmt.Errorf("read back after %s: %w", unit, err)
		} else if got := s.String(w.NP != nil, w.RP != nil); got != desired {
			err = fmt.Errorf("%s ran, but the files read %s, not %s (see journalctl -u %s)", unit, got, desired, unit)
		}
	}
	if err != nil {
		err = fmt.Errorf("ecn: %s: /sys is read-only in rdmad's sandbox, and %s did not write it: %w", nd, unit, err)
		// A start that created no job (no system bus yet) is tried
		// again at the next pass: nothing ran, nothing was logged.
		if !errors.Is(err, ecn.ErrNotStarted) {
			r.ecnUnitFailed[nd] = ecnUnitAttempt{key: key, err: err}
		}
		return err
	}
	delete(r.ecnUnitFailed, nd)
	r.log.Debug("ecn written through the unit", "netdev", nd, "unit", unit, "desired", desired)
	return nil
}

func (r *Reconciler) checkRoCE(p Port, w PortWant, enforce bool) (apitype.Target, []apitype.Change) {
	var want roce.Settings
	desc := ""
	t := apitype.Target{}
	actual, err := r.roce.Observe(p.Device, p.Port)
	if err != nil {
		t.Desired = roceString(w.ToS, w.Mode)
		return failed(t, err), nil
	}
	want = actual
	if w.ToS != nil {
		want.ToS = uint8(*w.ToS)
	}
	if w.Mode != "" {
		m, err := roce.ParseMode(w.Mode)
		if err != nil {
			return failed(t, err), nil
		}
		want.Mode = m
	}
	desc = roceString(w.ToS, w.Mode)
	t.Desired = desc
	tos := int(actual.ToS)
	t.Actual = roceString(&tos, modeShort(actual.Mode, w.Mode))
	if want == actual {
		t.State = apitype.InSync
		return t, nil
	}
	return settle(t, []apitype.Change{{From: t.Actual, To: t.Desired}}, enforce, func() error { return r.roce.Apply(p.Device, p.Port, want) })
}

func roceString(tos *int, mode string) string {
	s := ""
	if tos != nil {
		s = fmt.Sprintf("tos=%d", *tos)
	}
	if mode != "" {
		if s != "" {
			s += " "
		}
		s += "mode=" + mode
	}
	return s
}

// modeShort shows the kernel's mode the way the config spells it, and only
// when the policy manages the mode.
func modeShort(m roce.Mode, managed string) string {
	if managed == "" {
		return ""
	}
	switch m {
	case roce.ModeV1:
		return "v1"
	case roce.ModeV2:
		return "v2"
	}
	return string(m)
}

func (r *Reconciler) checkDaemonMemlock(want memlock.Size, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: want.String()}
	cur, err := memlock.Observe()
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = cur.Soft.String()
	if cur.Soft >= want {
		t.State = apitype.InSync
		return t, nil
	}
	return settle(t, []apitype.Change{{From: t.Actual, To: t.Desired}}, enforce, func() error {
		_, err := memlock.Raise(want)
		return err
	})
}

func (r *Reconciler) checkUserMemlock(m Memlock, enforce bool) (apitype.Target, []apitype.Change) {
	rule := memlock.Rule{Domain: m.UsersDomain, Soft: *m.Users, Hard: *m.Users}
	t := apitype.Target{Desired: fmt.Sprintf("%s memlock %s", rule.Domain, m.Users.String())}
	if !enforce {
		t.State, t.Actual = apitype.InSync, "(not checked in a diff)"
		return t, nil
	}
	// Recorded before it is written: a crash in between leaves a record
	// of a file that is not there, never a file that is not recorded. An
	// admin's file at the path, which WriteLimits refuses, is not.
	// The file is looked at only until it is recorded (Add of a recorded
	// path writes nothing unless a save failed): no extra I/O per pass.
	if r.written.Has(m.LimitsFile) || absent(m.LimitsFile) || memlock.IsOurs(m.LimitsFile) {
		r.noteRecord(r.written.Add(m.LimitsFile))
	}
	changed, err := memlock.WriteLimitsFrom(m.LimitsFile, m.ConfigPath, []memlock.Rule{rule})
	if errors.Is(err, memlock.ErrNotOurs) {
		r.noteRecord(r.written.Drop(m.LimitsFile)) // swapped in meanwhile
	}
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = t.Desired
	// The file is in place, but while the state directory cannot be
	// written (read-only, full) its record is in memory only: the status
	// says so, not just the log, since a restart before the next save
	// forgets that the file is rdmad's. The next pass saves it again.
	if r.recordErr != "" {
		t.Error = "limits file record not saved: " + r.recordErr
	}
	if changed {
		t.State = apitype.Applied
		return t, []apitype.Change{{From: "(different or missing)", To: t.Desired}}
	}
	t.State = apitype.InSync
	return t, nil
}

// staleLimits lists the limits files rdmad should no longer have: the
// configured one when [memlock] users is unset, and every recorded one
// that is not the configured one (limits_file moved, also while rdmad was
// stopped).
func (r *Reconciler) staleLimits(m Memlock) []string {
	var paths []string
	if m.Users == nil {
		paths = append(paths, m.LimitsFile)
	}
	for _, p := range r.written.Paths() {
		if p != m.LimitsFile {
			paths = append(paths, p)
		}
	}
	return paths
}

// absent reports whether nothing, not even a dangling symlink, is at path.
func absent(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// noteRecord logs an error saving the record of limits files, once until
// it changes or goes.
func (r *Reconciler) noteRecord(err error) {
	switch {
	case err == nil:
		r.recordErr = ""
	case err.Error() != r.recordErr:
		r.recordErr = err.Error()
		r.log.Warn("limits file record not saved", "path", r.written.Path(), "err", err)
	}
}

// removeUserMemlock removes the limits file at path if rdmad wrote it (its
// header says so; a symlink is never followed). A file that is not
// rdmad's, or no file, is not rdmad's business: no target (State "").
func (r *Reconciler) removeUserMemlock(path string, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: "(no file: [memlock] users is not set for this path)"}
	cs := []apitype.Change{{From: "rdmad's memlock rules", To: "(removed)"}}
	if !enforce {
		// A diff only says what would go.
		if !memlock.IsOurs(path) {
			return t, nil
		}
		t.State, t.Actual = apitype.Drifted, "rdmad's memlock rules"
		return t, cs
	}
	removed, err := memlock.RemoveLimits(path)
	switch {
	case errors.Is(err, memlock.ErrNotOurs):
		r.log.Debug("limits file not written by rdmad; left alone", "path", path, "err", err)
		r.noteRecord(r.written.Drop(path))
		return t, nil
	case err != nil:
		// Still recorded: tried again at the next full pass, and by
		// the package scripts on purge.
		return failed(t, err), cs
	case !removed:
		r.noteRecord(r.written.Drop(path))
		return t, nil
	}
	r.noteRecord(r.written.Drop(path))
	t.State, t.Actual = apitype.Applied, "(removed)"
	return t, cs
}

// settle finishes t for a setting that differs from its desired value: a
// policy in observe mode (or a dry run) reports it drifted; otherwise apply
// runs and t is applied or failed.
func settle(t apitype.Target, cs []apitype.Change, enforce bool, apply func() error) (apitype.Target, []apitype.Change) {
	if !enforce {
		t.State = apitype.Drifted
		return t, cs
	}
	if err := apply(); err != nil {
		return failed(t, err), cs
	}
	t.State, t.Actual = apitype.Applied, t.Desired
	return t, cs
}

// failed marks t as failed with err, or as gone (State "") when err says
// the object disappeared: a device that vanishes mid-pass is normal, and its
// removal event follows.
func failed(t apitype.Target, err error) apitype.Target {
	if errors.Is(err, unix.ENODEV) {
		t.State = ""
		return t
	}
	t.State, t.Error = apitype.TargetError, err.Error()
	return t
}

func listNetdevs() ([]string, map[string]int) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, nil
	}
	names := make([]string, 0, len(ifs))
	index := make(map[string]int, len(ifs))
	for _, i := range ifs {
		names = append(names, i.Name)
		index[i.Name] = i.Index
	}
	return names, index
}
