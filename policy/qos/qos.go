// Package qos applies rdmad's QoS policy for one netdev through dcbnl:
// which priorities have PFC, which DSCP values map to which priority,
// whether the port trusts DSCP or the VLAN PCP, and ETS (which traffic
// class each priority is in and the classes' bandwidth shares).
//
// The reconciler calls Observe, then Plan (pure: what differs), then Apply
// (make it so). Applying a plan twice is harmless, and only APP entries
// with the DSCP selector are ever added or removed.
//
// # Trust
//
// Kernels from Linux 6.3 with a driver that implements it have an APP trust
// table (DCB_ATTR_DCB_APP_TRUST_TABLE); there "trust dscp" sets the table to
// [dscp] and "trust pcp" to [pcp]. Everywhere else, including mlx5, trust
// follows the convention mlnx_qos and the upstream mlx5 driver use: a port
// trusts DSCP exactly when its APP table has DSCP entries. On such ports
// "trust dscp" needs a DSCP map (Plan refuses it otherwise), and "trust
// pcp" removes every DSCP entry and cannot be combined with a DSCP map.
//
// # Unsupported devices
//
// A netdev without dcbnl support (veth, virtio, most non-RDMA NICs) answers
// EOPNOTSUPP. Observe then returns Actual{Supported: false} and an error
// for which IsUnsupported is true. That is a steady state of the device,
// not a failure to retry: see IsUnsupported.
package qos

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/rdmad/rdmad/policy/dcb"
)

// Trust modes.
const (
	TrustUnmanaged = ""     // leave the port's trust as it is
	TrustPCP       = "pcp"  // classify by VLAN PCP
	TrustDSCP      = "dscp" // classify by IP DSCP through the DSCP map
)

// Desired is the QoS policy for one netdev. Nil fields are left as the
// device has them.
type Desired struct {
	// Trust is TrustUnmanaged, TrustPCP or TrustDSCP.
	Trust string
	// PFC lists the priorities (0..7) that must have PFC on; all others
	// get it off. Nil leaves PFC alone; an empty non-nil slice turns PFC
	// off everywhere.
	PFC []int
	// DSCPToPrio maps DSCP values (0..63) to priorities (0..7). DSCP
	// entries of the APP table that are not in the map are removed. Nil
	// leaves the DSCP entries alone.
	DSCPToPrio map[int]int
	// ETS is the priority to traffic class map and the classes' shares.
	// Nil leaves ETS alone.
	ETS *ETS
}

// Validate reports the first out-of-range value in d.
func (d Desired) Validate() error {
	switch d.Trust {
	case TrustUnmanaged, TrustPCP, TrustDSCP:
	default:
		return fmt.Errorf("qos: trust %q: want %q or %q", d.Trust, TrustPCP, TrustDSCP)
	}
	for _, p := range d.PFC {
		if p < 0 || p >= dcb.MaxPriorities {
			return fmt.Errorf("qos: pfc priority %d: want 0..%d", p, dcb.MaxPriorities-1)
		}
	}
	for dscp, prio := range d.DSCPToPrio {
		if dscp < 0 || dscp > 63 {
			return fmt.Errorf("qos: dscp %d: want 0..63", dscp)
		}
		if prio < 0 || prio >= dcb.MaxPriorities {
			return fmt.Errorf("qos: dscp %d -> priority %d: want priority 0..%d", dscp, prio, dcb.MaxPriorities-1)
		}
	}
	if d.ETS != nil {
		return d.ETS.Validate()
	}
	return nil
}

// Actual is the QoS state observed on one netdev.
type Actual struct {
	Ifname string
	// Supported reports whether the device answers dcbnl at all. When it
	// is false the other fields are empty.
	Supported bool
	// Trust is what the port trusts: "dscp", "pcp", or for trust tables
	// with other contents the selector names joined by spaces, in order
	// of precedence ("" for an empty table).
	Trust string
	// TrustTable reports whether Trust comes from an APP trust table
	// (true) or is inferred from the presence of DSCP APP entries.
	TrustTable bool
	// PFC lists the priorities with PFC on, ascending. It is nil when the
	// driver does not report PFC.
	PFC []int
	// DSCPToPrio is the DSCP part of the APP table. If the table has
	// several entries for one DSCP value, the map holds the first the
	// kernel lists; DSCPApps has them all.
	DSCPToPrio map[int]int
	// DSCPApps are the APP entries with the DSCP selector, in kernel order.
	DSCPApps []dcb.App
	// IEEE is the dcbnl reply the rest was read from (ETS, the PFC
	// object, the whole APP table, DCBX), for reports; nil when
	// Supported is false. Plan and Apply do not use it.
	IEEE *dcb.IEEE

	pfc *dcb.PFC // the raw object, the base for a PFC change
	ets *dcb.ETS // likewise for an ETS change; nil when not reported
}

// ErrUnsupported is wrapped by errors about devices, or features of a
// device, that dcbnl cannot manage.
var ErrUnsupported = errors.New("device does not support DCB")

// errnoENOTSUPP is the kernel-internal ENOTSUPP (524), which some drivers
// leak to user space instead of EOPNOTSUPP.
const errnoENOTSUPP = syscall.Errno(524)

// IsUnsupported reports whether err says the device (or the requested
// feature) cannot be managed through dcbnl: EOPNOTSUPP, ENOTSUPP or
// ErrUnsupported.
//
// The reconciler should treat this as the target's state ("unsupported"),
// not as a failure: report it once in status, and do not retry or back off
// on it until the link changes (a new ifindex, driver rebind, or a policy
// reload), because asking again gives the same answer.
func IsUnsupported(err error) bool {
	return errors.Is(err, ErrUnsupported) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, errnoENOTSUPP)
}

// Observe reads ifname's QoS state. For a device without dcbnl support it
// returns Actual{Ifname: ifname, Supported: false} and an error for which
// IsUnsupported is true.
func Observe(c *dcb.Conn, ifname string) (Actual, error) {
	ieee, err := c.IEEE(ifname)
	if err != nil {
		if IsUnsupported(err) {
			return Actual{Ifname: ifname}, fmt.Errorf("qos: %s: %w (%w); PFC, trust and DSCP maps cannot be managed on it: "+
				"leave it out of the QoS policy, or check that its driver supports DCB", ifname, ErrUnsupported, err)
		}
		return Actual{Ifname: ifname}, fmt.Errorf("qos: observe %s: %w", ifname, err)
	}
	return actualFrom(ifname, ieee), nil
}

func actualFrom(ifname string, ieee *dcb.IEEE) Actual {
	a := Actual{Ifname: ifname, Supported: true, DSCPToPrio: map[int]int{}, TrustTable: ieee.TrustTable, IEEE: ieee}
	for _, app := range ieee.Apps {
		if app.Selector != dcb.SelectorDSCP {
			continue
		}
		a.DSCPApps = append(a.DSCPApps, app)
		if _, ok := a.DSCPToPrio[int(app.Protocol)]; !ok {
			a.DSCPToPrio[int(app.Protocol)] = int(app.Priority)
		}
	}
	if ieee.ETS != nil {
		e := *ieee.ETS
		a.ets = &e
	}
	if ieee.PFC != nil {
		p := *ieee.PFC
		a.pfc = &p
		a.PFC = []int{}
		for prio := range dcb.MaxPriorities {
			if p.IsEnabled(prio) {
				a.PFC = append(a.PFC, prio)
			}
		}
	}
	switch {
	case ieee.TrustTable:
		names := make([]string, len(ieee.Trust))
		for i, s := range ieee.Trust {
			names[i] = selectorName(s)
		}
		a.Trust = strings.Join(names, " ")
	case len(a.DSCPApps) > 0:
		a.Trust = TrustDSCP
	default:
		a.Trust = TrustPCP
	}
	return a
}

func selectorName(s uint8) string {
	switch s {
	case dcb.SelectorEthertype:
		return "ethtype"
	case dcb.SelectorStream:
		return "stream-port"
	case dcb.SelectorDgram:
		return "dgram-port"
	case dcb.SelectorAny:
		return "port"
	case dcb.SelectorDSCP:
		return TrustDSCP
	case dcb.SelectorPCP:
		return TrustPCP
	}
	return fmt.Sprintf("selector-%d", s)
}

// trustSelectors is the trust table that expresses a Desired.Trust.
func trustSelectors(trust string) []uint8 {
	if trust == TrustDSCP {
		return []uint8{dcb.SelectorDSCP}
	}
	return []uint8{dcb.SelectorPCP}
}

// A Kind names what a Change touches.
type Kind string

// Change kinds.
const (
	KindPFC   Kind = "pfc"
	KindDSCP  Kind = "dscp"
	KindTrust Kind = "trust"
	KindETS   Kind = "ets"
)

// A Change is one difference between desired and actual state, and what
// Apply does about it.
type Change struct {
	Kind Kind
	// Prio is the priority of a KindPFC change.
	Prio int
	// DSCP is the DSCP value of a KindDSCP change.
	DSCP int
	// From and To describe the value before and after ("off", "on",
	// "prio 3", "unmapped", "pcp", "dscp").
	From, To string
	// Implicit marks a trust change that needs no request of its own: it
	// follows from DSCP entries being added or removed.
	Implicit bool

	pfcBase  *dcb.PFC // KindPFC: the device's PFC object to modify
	add, del []dcb.App
	trust    []uint8  // KindTrust with a trust table
	ets      *dcb.ETS // KindETS: the whole object to write
}

// String formats c for `rdmactl policy diff`, e.g. "pfc: prio 3 off -> on".
func (c Change) String() string {
	switch c.Kind {
	case KindETS:
		return fmt.Sprintf("ets: %s -> %s", c.From, c.To)
	case KindPFC:
		return fmt.Sprintf("pfc: prio %d %s -> %s", c.Prio, c.From, c.To)
	case KindDSCP:
		return fmt.Sprintf("dscp %d: %s -> %s", c.DSCP, c.From, c.To)
	}
	s := fmt.Sprintf("%s: %s -> %s", c.Kind, c.From, c.To)
	if c.Implicit {
		s += " (by DSCP APP entries)"
	}
	return s
}

// Plan returns the changes that make actual match desired, in the order
// Apply makes them. It is pure. It fails when desired is invalid, when
// it manages something the device cannot do (the error satisfies
// IsUnsupported), and when the trust mode cannot be expressed on a device
// without an APP trust table.
func Plan(desired Desired, actual Actual) ([]Change, error) {
	if err := desired.Validate(); err != nil {
		return nil, err
	}
	manages := desired.Trust != TrustUnmanaged || desired.PFC != nil || desired.DSCPToPrio != nil || desired.ETS != nil
	if !actual.Supported {
		if manages {
			return nil, fmt.Errorf("qos: %s: %w", actual.Ifname, ErrUnsupported)
		}
		return nil, nil
	}
	var changes []Change
	if desired.DSCPToPrio != nil {
		changes = append(changes, planDSCP(desired.DSCPToPrio, actual.DSCPApps)...)
	}
	if desired.ETS != nil {
		c, err := planETS(*desired.ETS, actual)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c...)
	}
	if desired.PFC != nil {
		c, err := planPFC(desired.PFC, actual)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c...)
	}
	if desired.Trust != TrustUnmanaged {
		c, err := planTrust(desired, actual)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c...)
	}
	return changes, nil
}

func prioString(prios []int) string {
	if len(prios) == 0 {
		return "unmapped"
	}
	s := make([]string, len(prios))
	for i, p := range prios {
		s[i] = fmt.Sprint(p)
	}
	return "prio " + strings.Join(s, ",")
}

func planDSCP(want map[int]int, have []dcb.App) []Change {
	byDSCP := map[int][]dcb.App{}
	for _, a := range have {
		byDSCP[int(a.Protocol)] = append(byDSCP[int(a.Protocol)], a)
	}
	keys := map[int]bool{}
	for d := range want {
		keys[d] = true
	}
	for d := range byDSCP {
		keys[d] = true
	}
	sorted := make([]int, 0, len(keys))
	for d := range keys {
		sorted = append(sorted, d)
	}
	sort.Ints(sorted)

	var changes []Change
	for _, d := range sorted {
		prio, wanted := want[d]
		var from []int
		var add, del []dcb.App
		present := false
		for _, a := range byDSCP[d] {
			from = append(from, int(a.Priority))
			if wanted && int(a.Priority) == prio {
				present = true
				continue
			}
			del = append(del, a)
		}
		if wanted && !present {
			add = append(add, dcb.App{Selector: dcb.SelectorDSCP, Protocol: uint16(d), Priority: uint8(prio)})
		}
		if len(add) == 0 && len(del) == 0 {
			continue
		}
		to := "unmapped"
		if wanted {
			to = prioString([]int{prio})
		}
		changes = append(changes, Change{Kind: KindDSCP, DSCP: d, From: prioString(from), To: to, add: add, del: del})
	}
	return changes
}

func planPFC(want []int, actual Actual) ([]Change, error) {
	if actual.pfc == nil {
		return nil, fmt.Errorf("qos: pfc on %s: %w: the driver does not report PFC (no IEEE PFC object); leave pfc out of its policy",
			actual.Ifname, ErrUnsupported)
	}
	var changes []Change
	for prio := range dcb.MaxPriorities {
		on := slices.Contains(want, prio)
		if on == actual.pfc.IsEnabled(prio) {
			continue
		}
		c := Change{Kind: KindPFC, Prio: prio, From: "off", To: "on", pfcBase: actual.pfc}
		if !on {
			c.From, c.To = "on", "off"
		}
		changes = append(changes, c)
	}
	return changes, nil
}

func planTrust(desired Desired, actual Actual) ([]Change, error) {
	if actual.TrustTable {
		if actual.Trust == desired.Trust {
			return nil, nil
		}
		return []Change{{Kind: KindTrust, From: actual.Trust, To: desired.Trust, trust: trustSelectors(desired.Trust)}}, nil
	}
	// No trust table: the port trusts DSCP exactly when it has DSCP APP
	// entries, so the DSCP map decides.
	dscpAfter := len(actual.DSCPApps) > 0
	if desired.DSCPToPrio != nil {
		dscpAfter = len(desired.DSCPToPrio) > 0
	}
	switch desired.Trust {
	case TrustDSCP:
		if !dscpAfter {
			return nil, fmt.Errorf("qos: trust dscp on %s: the device has no APP trust table, so it trusts DSCP only "+
				"while DSCP APP entries exist; give it a DSCP to priority map", actual.Ifname)
		}
	case TrustPCP:
		if desired.DSCPToPrio != nil && len(desired.DSCPToPrio) > 0 {
			return nil, fmt.Errorf("qos: trust pcp on %s conflicts with its DSCP map: the device has no APP trust table, "+
				"so any DSCP APP entry makes it trust DSCP; drop the DSCP map or trust dscp", actual.Ifname)
		}
	}
	if actual.Trust == desired.Trust {
		return nil, nil
	}
	c := Change{Kind: KindTrust, From: actual.Trust, To: desired.Trust, Implicit: true}
	if desired.Trust == TrustPCP && desired.DSCPToPrio == nil {
		// The DSCP entries are not managed by a map, so removing them is
		// this change's own work.
		c.del = slices.Clone(actual.DSCPApps)
	}
	return []Change{c}, nil
}

// Apply makes changes on ifname: it adds DSCP APP entries, then removes
// stale ones (so a remapped DSCP value is never briefly unmapped, and mlx5
// never briefly drops to PCP trust), then writes ETS, then PFC, then the
// trust table. It goes on after a failed step and returns all errors joined.
//
// Apply is idempotent: an entry that already exists (EEXIST) or is already
// gone (ENOENT) counts as done.
func Apply(c *dcb.Conn, ifname string, changes []Change) error {
	var add, del []dcb.App
	var pfc *dcb.PFC
	var trust []uint8
	var ets *dcb.ETS
	for _, ch := range changes {
		add = append(add, ch.add...)
		del = append(del, ch.del...)
		if ch.Kind == KindPFC && ch.pfcBase != nil {
			if pfc == nil {
				p := *ch.pfcBase
				pfc = &p
			}
			if ch.To == "on" {
				pfc.Enabled |= 1 << ch.Prio
			} else {
				pfc.Enabled &^= 1 << ch.Prio
			}
		}
		if ch.trust != nil {
			trust = ch.trust
		}
		if ch.ets != nil {
			ets = ch.ets
		}
	}
	var errs []error
	if len(add) > 0 {
		errs = append(errs, setdel(add, syscall.EEXIST, func(apps []dcb.App) error { return c.AddApps(ifname, apps) }))
	}
	if len(del) > 0 {
		errs = append(errs, setdel(del, syscall.ENOENT, func(apps []dcb.App) error { return c.DelApps(ifname, apps) }))
	}
	if ets != nil {
		errs = append(errs, c.SetETS(ifname, *ets))
	}
	if pfc != nil {
		errs = append(errs, c.SetPFC(ifname, *pfc))
	}
	if trust != nil {
		errs = append(errs, c.SetTrust(ifname, trust))
	}
	return errors.Join(errs...)
}

// setdel applies apps in one request. The kernel stops a request at the
// first entry that fails, so when that failure is the harmless one
// (EEXIST on add, ENOENT on delete) the entries are retried one by one.
func setdel(apps []dcb.App, harmless syscall.Errno, do func([]dcb.App) error) error {
	err := do(apps)
	if err == nil || !errors.Is(err, harmless) {
		return err
	}
	var errs []error
	for _, a := range apps {
		if err := do([]dcb.App{a}); err != nil && !errors.Is(err, harmless) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
