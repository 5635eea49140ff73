// Package health decides the node's verdict: whether it may run RDMA jobs,
// as the conditions of client/apitype's Health (docs/HEALTH.md). It reads a
// snapshot and what the daemon tracks beside it (port flaps, expectations)
// and imports nothing but the wire types, so that rdmactl decides the same
// verdict from its own inventory read when rdmad does not answer.
package health

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// Loopback probe states (apitype.LoopbackPort.State) the verdict reads.
const (
	loopbackFailed = "failed"
)

// Expect is what the configuration declares about the node's links.
type Expect struct {
	// MinRateGbps is the least rate per port ("mlx5_0/1") that a
	// [[policy]] min_rate declares.
	MinRateGbps map[string]float64
	// Ignore are ports ("mlx5_0/2") and devices ("mlx5_1") that the
	// verdict leaves out ([health] ignore): an uncabled second port.
	Ignore []string
	// MinLoopbackGbps and MinLoopbackShare are the least bandwidth a
	// port's loopback test must reach ([health] min_loopback_gbps, and
	// min_loopback_share of the port's rate); 0: not declared.
	MinLoopbackGbps  float64
	MinLoopbackShare float64
	// Count, Ports and Devices are [health.expect]: how many RDMA devices
	// the node has (0: not checked), how many ports each has (0: not
	// checked), and devices that must be present.
	Count   int
	Ports   int
	Devices []ExpectedDevice
}

// An ExpectedDevice is one [[health.expect.device]]: a device by name or
// by PCI function, its rail (a label for messages), its port count (0:
// Expect.Ports) and its ports' least rate (0: none of its own), which the
// daemon folds into MinRateGbps for LinkDegraded.
type ExpectedDevice struct {
	Name, PCI, Rail string
	Ports           int
	RateGbps        float64
}

// Matches reports whether d is the device x names.
func (x ExpectedDevice) Matches(d apitype.Device) bool {
	return (x.Name != "" && d.Name == x.Name) || (x.PCI != "" && d.PCI == x.PCI)
}

func (x ExpectedDevice) label() string {
	l := x.Name
	if l == "" {
		l = x.PCI
	}
	if x.Rail != "" {
		l += " (" + x.Rail + ")"
	}
	return l
}

// LoopbackThreshold is the least loopback bandwidth e declares for port p
// in Gb/s: the higher of min_loopback_gbps and min_loopback_share of p's
// rate (a share counts only while the rate is known), 0 when none.
func (e Expect) LoopbackThreshold(p apitype.Port) float64 {
	t := e.MinLoopbackGbps
	if r := portRate(p); e.MinLoopbackShare > 0 && r > 0 {
		t = max(t, e.MinLoopbackShare*r)
	}
	return t
}

// ignored reports whether port ("dev/N") or its device is ignored.
func (e Expect) ignored(dev string, port int) bool {
	key := fmt.Sprintf("%s/%d", dev, port)
	return slices.Contains(e.Ignore, dev) || slices.Contains(e.Ignore, key)
}

// Input is everything one verdict reads.
type Input struct {
	Snap *apitype.Snapshot
	// Prev is the last verdict: a condition whose status did not change
	// keeps its Since.
	Prev   apitype.Health
	Now    time.Time
	Expect Expect
	// Flaps is the flap tracker's view of every port (nil: none tracked,
	// e.g. rdmactl's local check).
	Flaps map[string]FlapState
	// Local marks a verdict rdmactl decides without rdmad: only the
	// inventory is known, and what rdmad alone can tell (probes, pool,
	// peers) is unknown.
	Local bool
}

// Evaluate returns the verdict of in: one condition per type of
// apitype.ConditionTypes, in that order.
func Evaluate(in Input) apitype.Health {
	s := in.Snap
	e := evaluator{in: in, s: s}
	conds := []apitype.Condition{
		e.config(), e.inputs(), e.noDevice(), e.deviceMissing(), e.verbs(), e.portDown(), e.flapping(), e.subnetManager(), e.linkRate(), e.pcie(),
		e.loopback(), e.loopbackBandwidth(), e.mrpool(), e.memlock(), e.peers(), e.kernel(), e.policy(), e.daemon(),
	}
	h := apitype.Health{Status: apitype.ConditionOK, Conditions: conds}
	for i := range conds {
		c := &conds[i]
		if old, ok := in.Prev.Condition(c.Type); ok && old.Status == c.Status && !old.Since.IsZero() {
			c.Since = old.Since
		} else {
			c.Since = in.Now
		}
		if apitype.ConditionRank(c.Status) > apitype.ConditionRank(h.Status) {
			h.Status = c.Status
		}
	}
	h.Healthy = h.Status == apitype.ConditionOK
	return h
}

type evaluator struct {
	in Input
	s  *apitype.Snapshot
}

func ok(t, reason, msg string) apitype.Condition {
	return apitype.Condition{Type: t, Status: apitype.ConditionOK, Reason: reason, Message: msg}
}

func unknown(t, reason, msg string) apitype.Condition {
	return apitype.Condition{Type: t, Status: apitype.ConditionUnknown, Reason: reason, Message: msg}
}

func problem(t, reason string, objects []string, msg string) apitype.Condition {
	return apitype.Condition{Type: t, Status: apitype.ConditionProblem, Reason: reason, Message: msg, Objects: objects}
}

// inventoryRead reports whether the devices are known (the inventory was
// read, without error).
func (e evaluator) inventoryRead() bool {
	c, ok := e.s.Components[apitype.ComponentInventory]
	return ok && c.State != apitype.Error
}

// notRead is the condition t while the inventory is not known.
func (e evaluator) notRead(t string) apitype.Condition {
	if c, ok := e.s.Components[apitype.ComponentInventory]; ok && c.State == apitype.Error {
		return unknown(t, "InventoryUnreadable", "the RDMA inventory cannot be read: "+c.Error)
	}
	return unknown(t, "NotReadYet", "the RDMA inventory has not been read yet")
}

// ports calls f for every port the verdict covers.
func (e evaluator) ports(f func(d apitype.Device, p apitype.Port)) {
	for _, d := range e.s.Devices {
		for _, p := range d.Ports {
			if !e.in.Expect.ignored(d.Name, p.Port) {
				f(d, p)
			}
		}
	}
}

func portKey(dev string, port int) string { return fmt.Sprintf("%s/%d", dev, port) }

// list joins the first few items of a message list, with a count of the
// rest, so a condition stays one readable line on a node of many ports.
func list(items []string) string {
	const most = 4
	if len(items) <= most {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:most], "; ") + fmt.Sprintf("; and %d more", len(items)-most)
}

func (e evaluator) config() apitype.Condition {
	if msg := e.s.Config.Error; msg != "" {
		first, _, _ := strings.Cut(msg, "\n")
		return problem(apitype.CondConfig, "ConfigRejected", nil,
			"the configuration was rejected (the last good one stays in force): "+first+"; fix it and run rdmactl reload")
	}
	if e.in.Local {
		return unknown(apitype.CondConfig, "DaemonNotAnswering", "rdmad does not answer: its configuration is not known")
	}
	return ok(apitype.CondConfig, "ConfigLoaded", fmt.Sprintf("configuration generation %d in force", e.s.Config.Generation))
}

func (e evaluator) noDevice() apitype.Condition {
	if !e.inventoryRead() {
		return e.notRead(apitype.CondNoDevice)
	}
	if len(e.s.Devices) == 0 {
		return problem(apitype.CondNoDevice, "NoRDMADevice", nil, apitype.NoDevice)
	}
	names := make([]string, 0, len(e.s.Devices))
	for _, d := range e.s.Devices {
		names = append(names, d.Name)
	}
	return ok(apitype.CondNoDevice, "DevicesPresent", "RDMA devices: "+strings.Join(names, ", "))
}

// deviceMissing compares the devices with [health.expect] and looks for
// PCI functions of RDMA adapters that lost their device (one of eight HCAs
// gone is otherwise a healthy node: NoDevice fires only at zero).
func (e evaluator) deviceMissing() apitype.Condition {
	const t = apitype.CondDeviceMissing
	if !e.inventoryRead() {
		return e.notRead(t)
	}
	x := e.in.Expect
	var judged []apitype.Device
	for _, d := range e.s.Devices {
		if !slices.Contains(x.Ignore, d.Name) {
			judged = append(judged, d)
		}
	}
	orphans := map[string]apitype.PCIFunction{}
	var orphanOrder []string
	for _, f := range e.s.FunctionsWithoutDevice {
		if !slices.Contains(x.Ignore, f.Address) {
			orphans[f.Address] = f
			orphanOrder = append(orphanOrder, f.Address)
		}
	}
	var reason string
	var objs, msgs []string
	note := func(r, obj, msg string) {
		if reason == "" {
			reason = r
		}
		if obj != "" && !slices.Contains(objs, obj) {
			objs = append(objs, obj)
		}
		msgs = append(msgs, msg)
	}
	listed := map[string]bool{}
	checkPorts := func(label string, d apitype.Device, want int) {
		if want > 0 && len(d.Ports) != want {
			note("PortsMissing", d.Name, fmt.Sprintf("%s has %d ports, expect %d", label, len(d.Ports), want))
		}
	}
	for _, want := range x.Devices {
		i := slices.IndexFunc(judged, want.Matches)
		if i < 0 {
			msg := want.label() + " is missing"
			switch f, ok := orphans[want.PCI]; {
			case ok:
				msg += ": its PCI function has no RDMA device: " + f.Describe()
				delete(orphans, want.PCI)
			case want.PCI != "":
				msg += ": no RDMA adapter answers at that PCI address (lspci -D -s " + want.PCI + "); reseat it or check its slot"
			}
			obj := want.Name
			if obj == "" {
				obj = want.PCI
			}
			note("ExpectedDeviceMissing", obj, msg)
			continue
		}
		d := judged[i]
		listed[d.Name] = true
		label := d.Name
		if want.Rail != "" {
			label += " (" + want.Rail + ")"
		}
		checkPorts(label, d, cmp.Or(want.Ports, x.Ports))
	}
	for _, d := range judged {
		if !listed[d.Name] {
			checkPorts(d.Name, d, x.Ports)
		}
	}
	if x.Count > 0 && len(judged) != x.Count {
		if len(judged) < x.Count {
			note("ExpectedDeviceMissing", "", fmt.Sprintf("%d of %d RDMA devices present", len(judged), x.Count))
		} else {
			var extra []string
			for _, d := range judged {
				if len(x.Devices) > 0 && !listed[d.Name] {
					extra = append(extra, d.Name)
				}
			}
			msg := fmt.Sprintf("%d RDMA devices, expect %d", len(judged), x.Count)
			if len(extra) > 0 {
				msg += " (not listed: " + strings.Join(extra, ", ") + ")"
			}
			note("UnexpectedDevice", "", msg)
			for _, n := range extra {
				if !slices.Contains(objs, n) {
					objs = append(objs, n)
				}
			}
		}
	}
	for _, a := range orphanOrder {
		if f, ok := orphans[a]; ok {
			note("FunctionWithoutRDMADevice", a, "PCI function "+f.Describe()+" has no RDMA device")
		}
	}
	if reason != "" {
		return problem(t, reason, objs, list(msgs)+"; the kernel log says why (dmesg | grep -e mlx5 -e "+
			"'probe failed'); reseat or replace the adapter, or declare what the node has in [health.expect]")
	}
	switch {
	case x.Count > 0 || len(x.Devices) > 0:
		return ok(t, "DevicesAsExpected", fmt.Sprintf("%d RDMA devices, as [health.expect] declares", len(judged)))
	case len(e.s.Devices) == 0:
		return ok(t, "NoDevice", "no RDMA device (see NoDevice); no adapter's PCI function lacks its device")
	}
	return ok(t, "NoFunctionWithoutDevice", "every RDMA adapter's PCI function has its RDMA device; [health.expect] declares nothing more")
}

func (e evaluator) verbs() apitype.Condition {
	const t = apitype.CondVerbs
	if !e.inventoryRead() {
		return e.notRead(t)
	}
	if len(e.s.Devices) == 0 {
		return ok(t, "NoDevice", "no RDMA device (see NoDevice)")
	}
	// A device in [health] ignore is left out as its ports are: an
	// ignored mlx4_0 without a provider must not fail the node (#40 item 5).
	var judged []string
	for _, d := range e.s.Devices {
		if !slices.Contains(e.in.Expect.Ignore, d.Name) {
			judged = append(judged, d.Name)
		}
	}
	if len(judged) == 0 {
		return ok(t, "AllIgnored", "every RDMA device is in [health] ignore")
	}
	var objs, msgs []string
	for _, d := range e.s.Devices {
		if d.Uverbs == "" && slices.Contains(judged, d.Name) {
			objs = append(objs, d.Name)
			msgs = append(msgs, d.Name+" has no verbs node (/dev/infiniband/uverbsN)")
		}
	}
	if len(objs) > 0 {
		return problem(t, "NoUverbsNode", objs, list(msgs)+": load ib_uverbs (modprobe ib_uverbs); until then no program can use verbs on it")
	}
	if e.in.Local {
		return ok(t, "UverbsPresent", "every RDMA device has its verbs node")
	}
	c, found := e.s.Components[apitype.ComponentVerbs]
	switch {
	case !found:
		return unknown(t, "NotCheckedYet", "rdmad has not opened verbs yet")
	case c.State == apitype.Error || c.State == apitype.Unavailable:
		return problem(t, "VerbsUnavailable", judged, "devices are present but verbs cannot be used: "+c.Detail())
	}
	return ok(t, "VerbsAvailable", "verbs open on every RDMA device")
}

func (e evaluator) portDown() apitype.Condition {
	const t = apitype.CondPortDown
	if !e.inventoryRead() {
		return e.notRead(t)
	}
	var objs, msgs []string
	n := 0
	e.ports(func(d apitype.Device, p apitype.Port) {
		n++
		if p.State == "ACTIVE" {
			return
		}
		k := portKey(d.Name, p.Port)
		objs = append(objs, k)
		m := k
		if p.Netdev != "" {
			m += " (" + p.Netdev + ")"
		}
		msgs = append(msgs, fmt.Sprintf("%s is %s/%s", m, orUnknown(p.State), orUnknown(p.PhysState)))
	})
	if len(objs) > 0 {
		return problem(t, "PortNotActive", objs, list(msgs)+": check the cable, the switch port and `ip link`; list a port in [health] ignore if it is not meant to be used")
	}
	if n == 0 {
		return ok(t, "NoPorts", "no RDMA port to check")
	}
	return ok(t, "AllPortsActive", fmt.Sprintf("%d of %d ports ACTIVE", n, n))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func (e evaluator) flapping() apitype.Condition {
	const t = apitype.CondPortFlapping
	if e.in.Flaps == nil {
		if e.in.Local {
			return unknown(t, "DaemonNotAnswering", "rdmad does not answer: port flaps are counted by rdmad")
		}
		return ok(t, "NotTracked", "port flaps are not tracked")
	}
	if !e.inventoryRead() {
		return e.notRead(t)
	}
	var objs, msgs []string
	e.ports(func(d apitype.Device, p apitype.Port) {
		k := portKey(d.Name, p.Port)
		if f, found := e.in.Flaps[k]; found && f.Flapping {
			objs = append(objs, k)
			msgs = append(msgs, f.Why(k, p.Netdev))
		}
	})
	if len(objs) > 0 {
		return problem(t, "PortFlapping", objs, list(msgs)+": check the cable, the transceiver and the switch port's error counters")
	}
	return ok(t, "Stable", "no port flapping")
}

// portRate is the rate a port runs at in Gb/s: its RDMA rate, or for a
// RoCE port that reports none its netdev's speed.
func portRate(p apitype.Port) float64 {
	if p.RateGbps > 0 {
		return p.RateGbps
	}
	return float64(p.NetdevSpeedMbps) / 1000
}

func (e evaluator) linkRate() apitype.Condition {
	const t = apitype.CondLinkDegraded
	if !e.inventoryRead() {
		return e.notRead(t)
	}
	if len(e.in.Expect.MinRateGbps) == 0 {
		return ok(t, "NoExpectation", "no [[policy]] min_rate or [health.expect] rate is declared")
	}
	var objs, msgs, unknowns []string
	e.ports(func(d apitype.Device, p apitype.Port) {
		k := portKey(d.Name, p.Port)
		want, found := e.in.Expect.MinRateGbps[k]
		if !found || p.State != "ACTIVE" {
			return // a down port is PortDown's
		}
		got := portRate(p)
		switch {
		case got == 0:
			unknowns = append(unknowns, k)
		case got < want:
			objs = append(objs, k)
			w := ""
			if p.Width != "" {
				w = " " + p.Width
			}
			msgs = append(msgs, fmt.Sprintf("%s runs at %g Gb/s%s, below its min_rate %g Gb/s", k, got, w, want))
		}
	})
	if len(objs) > 0 {
		return problem(t, "RateBelowMinimum", objs, list(msgs)+": the link trained low; check the cable, the transceiver and the switch port's speed")
	}
	if len(unknowns) > 0 {
		return unknown(t, "RateUnknown", "the rate of "+strings.Join(unknowns, ", ")+" is not known")
	}
	return ok(t, "RateAsDeclared", "every port with a min_rate runs at it or faster")
}

func (e evaluator) pcie() apitype.Condition {
	const t = apitype.CondPCIeDegraded
	if !e.inventoryRead() {
		return e.notRead(t)
	}
	var objs, msgs []string
	n := 0
	for _, d := range e.s.Devices {
		if d.PCIe == nil || e.in.Expect.ignored(d.Name, -1) {
			continue
		}
		n++
		if l := *d.PCIe; l.Degraded() {
			objs = append(objs, d.Name)
			m := fmt.Sprintf("%s (%s) trained PCIe %g GT/s x%d, its path allows %g GT/s x%d", d.Name, l.Address,
				l.Speed, l.Width, l.PathMaxSpeed, l.PathMaxWidth)
			if l.Limit != "" {
				m += " (limited by " + l.Limit + ")"
			}
			msgs = append(msgs, m)
		}
	}
	if len(objs) > 0 {
		return problem(t, "LinkBelowPath", objs, list(msgs)+": reseat the card or move it to a slot of its width and generation; `lspci -vv` LnkSta shows the same")
	}
	if n == 0 {
		return ok(t, "NoPCIeLink", "no RDMA device with a PCIe link")
	}
	return ok(t, "FullSpeed", "every RDMA device's PCIe link runs at what its path allows")
}

func (e evaluator) loopback() apitype.Condition {
	const t = apitype.CondLoopback
	if e.in.Local {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer: the loopback probes run in rdmad")
	}
	if c, found := e.s.Components[apitype.ComponentLoopback]; found && c.State == apitype.Disabled {
		return ok(t, "NotMonitored", "loopback probes are disabled: "+c.Detail())
	}
	var objs, msgs []string
	for _, l := range e.s.Loopback {
		if l.State != loopbackFailed || e.in.Expect.ignored(l.Device, l.Port) {
			continue
		}
		k := portKey(l.Device, l.Port)
		objs = append(objs, k)
		m := k + " fails"
		if l.LastError != "" {
			m += ": " + l.LastError
		}
		msgs = append(msgs, m)
	}
	if len(objs) > 0 {
		return problem(t, "ProbesFail", objs, list(msgs))
	}
	if len(e.s.Loopback) == 0 {
		if c, found := e.s.Components[apitype.ComponentLoopback]; found && c.State == apitype.Error {
			return problem(t, "ProberFailed", nil, "the loopback prober fails: "+c.Detail())
		}
		return ok(t, "NoProbes", "no port is probed")
	}
	return ok(t, "ProbesPass", fmt.Sprintf("%d ports pass their loopback probes", len(e.s.Loopback)))
}

// loopbackBandwidth judges each port's last loopback bandwidth test
// against its threshold (Expect.LoopbackThreshold), as it stands now: a
// threshold changed by a reload judges the same result again. A port
// without a test is not judged (the tests run on demand, rdmactl bw
// --loopback); a failed test leaves the last result that ran to its end.
func (e evaluator) loopbackBandwidth() apitype.Condition {
	const t = apitype.CondLoopbackBandwidth
	if e.in.Local {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer: the loopback bandwidth tests run in rdmad")
	}
	if e.in.Expect.MinLoopbackGbps == 0 && e.in.Expect.MinLoopbackShare == 0 {
		return ok(t, "NoThreshold", "no [health] min_loopback_gbps or min_loopback_share is declared")
	}
	var results []apitype.BandwidthResult
	if e.s.Bandwidth != nil {
		results = e.s.Bandwidth.Loopback
	}
	var objs, msgs, unknowns []string
	judged := 0
	for _, r := range results {
		d, n, found := splitPort(r.Local)
		if !found || e.in.Expect.ignored(d, n) {
			continue
		}
		p, present := e.port(d, n)
		if !present {
			continue // the device is gone: its result says nothing now
		}
		want := e.in.Expect.LoopbackThreshold(p)
		if want == 0 {
			unknowns = append(unknowns, r.Local)
			continue
		}
		judged++
		if r.Gbps < want {
			objs = append(objs, r.Local)
			msgs = append(msgs, fmt.Sprintf("%s reached %.2f Gb/s in its last loopback test (%s, %d QP(s), %s), below its threshold %.2f Gb/s",
				r.Local, r.Gbps, r.Op, max(r.QPs, 1), r.Time.UTC().Format(time.RFC3339), want))
		}
	}
	if len(objs) > 0 {
		return problem(t, "BelowThreshold", objs, list(msgs)+": check the port's rate, its PCIe link and the adapter's load; run rdmactl bw --loopback again to judge it anew")
	}
	if len(unknowns) > 0 && judged == 0 {
		return unknown(t, "RateUnknown", "the rate of "+strings.Join(unknowns, ", ")+" is not known, so min_loopback_share gives no threshold")
	}
	if judged == 0 {
		return ok(t, "NotTested", "no port has run a loopback bandwidth test since rdmad started (rdmactl bw --loopback)")
	}
	return ok(t, "AtThreshold", fmt.Sprintf("%d port(s) reached their loopback bandwidth threshold in their last test", judged))
}

// port returns port n of device d in the snapshot.
func (e evaluator) port(d string, n int) (apitype.Port, bool) {
	for _, dev := range e.s.Devices {
		if dev.Name != d {
			continue
		}
		for _, p := range dev.Ports {
			if p.Port == n {
				return p, true
			}
		}
	}
	return apitype.Port{}, false
}

// splitPort splits "dev/N".
func splitPort(key string) (string, int, bool) {
	i := strings.LastIndexByte(key, '/')
	if i <= 0 {
		return "", 0, false
	}
	var n int
	if _, err := fmt.Sscanf(key[i+1:], "%d", &n); err != nil {
		return "", 0, false
	}
	return key[:i], n, true
}

func (e evaluator) mrpool() apitype.Condition {
	const t = apitype.CondMRPool
	if e.in.Local {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer: the registration canary runs in rdmad")
	}
	c, found := e.s.Components[apitype.ComponentMRPool]
	if found && c.State == apitype.Disabled {
		return ok(t, "NotMonitored", "the MR pool is disabled: "+c.Detail())
	}
	var objs, msgs []string
	for _, p := range e.s.MRPool {
		switch {
		case p.Canary.LastError != "":
			objs = append(objs, p.Device)
			msgs = append(msgs, p.Device+": the registration canary fails: "+p.Canary.LastError)
		case !p.Registered && p.LastError != "":
			objs = append(objs, p.Device)
			msgs = append(msgs, p.Device+": the pool cannot register: "+p.LastError)
		}
	}
	if len(objs) > 0 {
		return problem(t, "RegistrationFails", objs, list(msgs)+": check memlock (ulimit -l) and rdmactl doctor")
	}
	if found && c.State == apitype.Error {
		return problem(t, "PoolFailed", nil, "the MR pool fails: "+c.Detail())
	}
	return ok(t, "Registers", "memory registration works")
}

func (e evaluator) memlock() apitype.Condition {
	const t = apitype.CondMemlock
	var msgs []string
	declared := false
	for _, p := range e.s.Policy.Policies {
		for _, tg := range p.Targets {
			if tg.Kind != "memlock" {
				continue
			}
			declared = true
			if tg.State == apitype.TargetError || tg.State == apitype.Drifted {
				m := fmt.Sprintf("%s: %s, declared %s", tg.Object, orUnknown(tg.Actual), tg.Desired)
				if tg.Error != "" {
					m += " (" + tg.Error + ")"
				}
				msgs = append(msgs, m)
			}
		}
	}
	if len(msgs) > 0 {
		return problem(t, "BelowDeclared", nil, "locked-memory limit: "+list(msgs))
	}
	if !declared {
		if e.in.Local {
			return unknown(t, "DaemonNotAnswering", "rdmad does not answer: its memlock policy is not known")
		}
		return ok(t, "NotDeclared", "no memlock policy is declared ([memlock])")
	}
	return ok(t, "AsDeclared", "the locked-memory limits are as declared")
}

func (e evaluator) peers() apitype.Condition {
	const t = apitype.CondPeers
	if e.in.Local {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer: the peer probes run in rdmad")
	}
	var objs, msgs []string
	for _, p := range e.s.Peers.Ports {
		if p.LocalFault != "" {
			objs = append(objs, p.Key)
			msgs = append(msgs, p.Key+": "+p.LocalFault)
		}
	}
	if len(objs) > 0 {
		return problem(t, "LocalFault", objs, list(msgs))
	}
	if len(e.s.Peers.Peers) == 0 {
		return ok(t, "NoPeers", "no peer is probed")
	}
	return ok(t, "Reachable", "no local port has lost every peer")
}

func (e evaluator) kernel() apitype.Condition {
	const t = apitype.CondKernelFault
	if e.in.Local {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer: it follows the kernel log")
	}
	var objs, msgs, notes []string
	c, followed := e.s.Components[apitype.ComponentKernelLog]
	for _, f := range e.s.KernelFaults {
		if e.in.Expect.ignored(f.Device, -1) {
			continue
		}
		who := f.Device
		if f.Netdev != "" {
			who += " " + f.Netdev
		}
		if !f.Fatal() {
			// Non-fatal: shown, no problem alone (link downs count
			// toward PortFlapping instead).
			notes = append(notes, fmt.Sprintf("%s (%s, %d×)", who, f.Pattern, f.Count))
			continue
		}
		if !slices.Contains(objs, f.Device) {
			objs = append(objs, f.Device)
		}
		msgs = append(msgs, fmt.Sprintf("%s (%s, %d×): %s", who, f.Pattern, f.Count, f.Line))
	}
	note := ""
	if len(notes) > 0 {
		note = "; non-fatal: " + list(notes)
	}
	if len(objs) > 0 {
		return problem(t, "KernelReported", objs, list(msgs)+"; `journalctl -k` has the context"+note)
	}
	reason, none := "NoFaults", "the kernel log reported no fault of an RDMA device"
	if len(notes) > 0 {
		reason, none = "NonFatalOnly", "the kernel log reported no fatal fault of an RDMA device"+note
	}
	switch {
	case followed && c.State == apitype.Error:
		return unknown(t, "KernelLogUnreadable", "the kernel log cannot be followed: "+c.Detail()+note)
	case followed && c.State == apitype.Disabled:
		return ok(t, "NotMonitored", "the kernel log is not followed: "+c.Detail())
	case followed && c.Detail() != "":
		// A note of a follower that runs: a test switch that weakens
		// what counts (RDMAD_TEST_KMSG_USERSPACE) shows in the verdict.
		return ok(t, reason, none+"; "+c.Detail())
	}
	return ok(t, reason, none)
}

func (e evaluator) policy() apitype.Condition {
	const t = apitype.CondPolicy
	var objs, msgs []string
	for _, p := range e.s.Policy.Policies {
		for _, tg := range p.Targets {
			if tg.Kind == "memlock" || (tg.State != apitype.TargetError && tg.State != apitype.Drifted) {
				continue
			}
			objs = append(objs, tg.Object)
			m := fmt.Sprintf("%s %s of %s is %s (%s, declared %s)", p.Name, tg.Kind, tg.Object, tg.State, orUnknown(tg.Actual), tg.Desired)
			if tg.Error != "" {
				m += ": " + tg.Error
			}
			msgs = append(msgs, m)
		}
	}
	if len(objs) > 0 {
		return problem(t, "TargetsNotInSync", objs, list(msgs)+"; rdmactl policy diff shows the rest")
	}
	if e.in.Local && len(e.s.Policy.Policies) == 0 {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer: its policies are not known")
	}
	return ok(t, "InSync", "every declared setting is in force")
}

// daemonParts are the components whose error is rdmad's own trouble: the
// others have a condition of their own.
var daemonParts = map[string]bool{apitype.ComponentConfig: false, apitype.ComponentInventory: false,
	apitype.ComponentVerbs: false, apitype.ComponentMRPool: false, apitype.ComponentLoopback: false,
	apitype.ComponentKernelLog: false}

func (e evaluator) daemon() apitype.Condition {
	const t = apitype.CondDaemon
	if e.in.Local {
		return unknown(t, "DaemonNotAnswering", "rdmad does not answer on its socket: start it (systemctl start rdmad) or check `systemctl status rdmad`")
	}
	var msgs []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range e.s.Components {
			if !yield(k) {
				return
			}
		}
	}) {
		c := e.s.Components[name]
		if _, own := daemonParts[name]; own || c.State != apitype.Error {
			continue
		}
		msgs = append(msgs, name+": "+c.Detail())
	}
	if len(msgs) > 0 {
		return problem(t, "ComponentFailed", nil, list(msgs))
	}
	return ok(t, "Running", "every part of rdmad runs")
}
