package doctor

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/memlimit"
	"github.com/rdmad/rdmad/internal/size"
)

// Checks is the troubleshooting table, in order. rdmad runs it on the node
// (GET /v1/doctor, the D-Bus method Doctor); rdmactl runs it itself only
// when rdmad does not answer, and then the checks that need rdmad's state
// skip.
var Checks = []Check{
	{"daemon", "rdmad answers and is healthy", checkDaemon},
	{"health", "the health verdict schedulers read has no problem", checkHealth},
	{"devices", "RDMA devices exist", checkDevices},
	{"uverbs", "verbs character devices exist", checkUverbs},
	{"umad", "InfiniBand ports have their umad and issm devices", checkUmad},
	{"rdma-cm", "the RDMA-CM character device exists", checkRDMACM},
	{"ports", "ports are ACTIVE with the link up", checkPorts},
	{"sm", "InfiniBand ports see a subnet manager", checkSM},
	{"pcie", "PCIe links trained at the speed and width their slots allow", checkPCIe},
	{"pcie-mrr", "RDMA NICs read from host memory in 4096-byte requests (MaxReadReq)", checkMaxReadReq},
	{"pcie-acs", "no ACS redirect between an RDMA NIC and a GPU below the same PCIe switch", checkACS},
	{"numa", "the NUMA node of each RDMA NIC is known", checkNUMA},
	{"gpudirect", "GPUDirect RDMA (nvidia_peermem) is loaded where GPUs and RDMA NICs meet", checkGPUDirect},
	{"firmware", "RDMA devices run the firmware their policy expects", checkFirmware},
	{"gid", "RoCE v2 GIDs cover the netdev's addresses", checkGIDs},
	{"mtu", "netdev MTU, RDMA MTU and policy agree", checkMTU},
	{"pfc", "PFC is on for the RoCE priority", checkPFC},
	{"dscp-trust", "the NIC trusts DSCP", checkTrust},
	{"ecn", "ECN (DCQCN) is on for the RoCE priority and answers marked packets with CNPs", checkECN},
	{"memlock", "RLIMIT_MEMLOCK allows memory registration", checkMemlock},
	{"qp-errors", "no QP errors, retransmits or out-of-sequence packets rising", checkQPErrors},
	{"link-errors", "no symbol errors, link downs or receive errors rising", checkLinkErrors},
	{"packet-loss", "no pause storms, heavy pausing or discards on the RoCE netdevs", checkPacketLoss},
	{"peers", "peers answer probes", checkPeers},
	{"fleet", "peers' MTU, link layer, RoCE, QoS, firmware and driver agree with this node's", checkFleet},
	{"clock-offset", "peers' clocks agree with this node's", checkClockOffset},
}

// CallerChecks run in the caller's own session, after Checks: rdmactl
// runs them, never rdmad. The clock is the node's, but rdmad's sandbox
// (ProtectClock=yes in rdmad.service) forbids adjtimex(2), even to read.
var CallerChecks = []Check{
	{"memlock-user", "your RLIMIT_MEMLOCK allows memory registration", checkMemlockUser},
	{"clock", "the clock is synchronised", checkClock},
}

func skip(msg string) Result { return Result{Verdict: Skip, Message: msg} }

func notReachable(*Env) Result { return skip("rdmad not reachable (see the daemon check)") }

// collector gathers per-object findings into one Result.
type collector struct {
	verdict string
	msgs    []string
	fixes   []string
}

func (c *collector) add(verdict, msg, fix string) {
	// A skip is kept too (a check that could not run says why), and any
	// other verdict outranks it.
	if c.verdict == "" || Rank(verdict) > Rank(c.verdict) {
		c.verdict = verdict
	}
	c.msgs = append(c.msgs, msg)
	if fix != "" && !contains(c.fixes, fix) {
		c.fixes = append(c.fixes, fix)
	}
}

func (c *collector) result(none string) Result {
	if c.verdict == "" {
		return skip(none)
	}
	return Result{Verdict: c.verdict, Message: strings.Join(c.msgs, "; "), Fix: strings.Join(c.fixes, "; ")}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func checkDaemon(e *Env) Result {
	s := e.Snapshot
	if s == nil && e.DaemonRefused {
		return Result{Verdict: Warn, Message: fmt.Sprintf("rdmad refused this caller: %v", e.DaemonErr),
			Fix: "run rdmactl doctor as root or as a member of the socket's group ([daemon] socket_group); the checks that need rdmad's state are skipped"}
	}
	if s == nil {
		return Result{Verdict: Warn, Message: fmt.Sprintf("rdmad not reachable: %v", e.DaemonErr),
			Fix: "start it (systemctl start rdmad) or point --socket at its socket; the checks that need it are skipped"}
	}
	var c collector
	if s.Config.Error != "" {
		// The whole error, every line of it: each names a file, line and
		// key the operator must fix (rdmactl doctor indents the lines).
		c.add(Fail, fmt.Sprintf("configuration rejected, generation %d stays in force: %s", s.Config.Generation, strings.TrimRight(s.Config.Error, "\n")),
			"fix the file and line named, then rdmactl reload")
	}
	names := make([]string, 0, len(s.Components))
	for n := range s.Components {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if comp := s.Components[n]; comp.State == apitype.Error {
			c.add(Fail, fmt.Sprintf("component %s: %s", n, comp.Detail()), "see rdmactl status and journalctl -u rdmad")
		}
	}
	if c.verdict == "" {
		c.add(OK, fmt.Sprintf("rdmad %s is %s (pid %d, config generation %d)", s.Version, s.State, s.PID, s.Config.Generation), "")
	}
	return c.result("")
}

// PCI classes and vendors that matter for RDMA.
const (
	pciClassInfiniBand = 0x0207
	pciClassEthernet   = 0x0200
	pciVendorMellanox  = 0x15b3
)

func checkDevices(e *Env) Result {
	devs, err := e.Devices()
	if err != nil {
		return Result{Verdict: Fail, Message: err.Error(), Fix: "check that sysfs is mounted at /sys"}
	}
	if len(devs) > 0 {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		msg := fmt.Sprintf("%d RDMA device(s): %s", len(devs), strings.Join(names, ", "))
		// One of eight HCAs lost is not "devices exist": the functions
		// of RDMA adapters without their device (DeviceMissing too).
		if lost := e.reader().FunctionsWithoutDevice(devs); len(lost) > 0 {
			var fns []string
			for _, f := range lost {
				fns = append(fns, f.Describe())
			}
			return Result{Verdict: Fail, Message: msg + "; but PCI function(s) of RDMA adapters have no RDMA device: " + strings.Join(fns, ", "),
				Fix: "the kernel log says why (dmesg | grep -e mlx5 -e 'probe failed'); reseat or replace the adapter, or list the function in [health] ignore if it is not meant for RDMA"}
		}
		return Result{Verdict: OK, Message: msg}
	}
	nics := e.rdmaNICs()
	if len(nics) > 0 {
		return Result{Verdict: Fail, Message: "no RDMA devices in /sys/class/infiniband, but PCI has " + strings.Join(nics, ", "),
			Fix: "load the RDMA driver (modprobe mlx5_ib, or mlx4_ib for ConnectX-3; for other vendors their *_ib module) and check dmesg for firmware or driver errors"}
	}
	return Result{Verdict: Fail, Message: "no RDMA devices in /sys/class/infiniband and no InfiniBand or Mellanox Ethernet NIC on PCI",
		Fix: "check that the NIC is seated and visible (lspci); for Soft-RoCE over an Ethernet netdev: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0"}
}

// rdmaNICs lists PCI functions that should have RDMA devices: InfiniBand
// controllers, and Ethernet controllers by Mellanox (RoCE).
func (e *Env) rdmaNICs() []string {
	dir := e.sys("bus", "pci", "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, ent := range ents {
		class := readHex(filepath.Join(dir, ent.Name(), "class")) >> 8
		vendor := readHex(filepath.Join(dir, ent.Name(), "vendor"))
		switch {
		case class == pciClassInfiniBand:
			out = append(out, ent.Name()+" (InfiniBand controller)")
		case class == pciClassEthernet && vendor == pciVendorMellanox:
			out = append(out, ent.Name()+" (Mellanox Ethernet controller, RoCE capable)")
		}
	}
	return out
}

func readHex(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 32)
	return v
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// devicesOrSkip returns the devices, or the Result to return when there
// are none.
func devicesOrSkip(e *Env) ([]apitype.Device, *Result) {
	devs, err := e.Devices()
	if err != nil || len(devs) == 0 {
		r := skip("no RDMA devices (see the devices check)")
		return nil, &r
	}
	return devs, nil
}

func checkUverbs(e *Env) Result {
	devs, r := devicesOrSkip(e)
	if r != nil {
		return *r
	}
	var c collector
	for _, d := range devs {
		if d.Uverbs == "" {
			c.add(Fail, d.Name+" has no verbs device (no uverbs in /sys/class/infiniband_verbs)",
				"modprobe ib_uverbs (and add it to /etc/modules-load.d/ so that it loads at boot)")
			continue
		}
		path := e.dev(strings.TrimPrefix(d.Uverbs, "/dev/"))
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			c.add(Fail, fmt.Sprintf("%s: %s is missing although the kernel has it", d.Name, d.Uverbs),
				"let udev create it (udevadm trigger --subsystem-match=infiniband_verbs); in a container, pass /dev/infiniband through")
		case fi.Mode()&os.ModeCharDevice == 0:
			c.add(Fail, fmt.Sprintf("%s: %s is not a character device", d.Name, d.Uverbs), "remove it and let udev recreate it (udevadm trigger --subsystem-match=infiniband_verbs)")
		case unix.Access(path, unix.R_OK|unix.W_OK) != nil:
			c.add(Warn, fmt.Sprintf("%s: %s exists but you (uid %d) cannot open it", d.Name, d.Uverbs, os.Getuid()),
				"add yourself to the group that owns it (often rdma) or check the udev rules of rdma-core")
		default:
			c.add(OK, d.Name+": "+d.Uverbs, "")
		}
	}
	return c.result("")
}

func checkPorts(e *Env) Result {
	devs, r := devicesOrSkip(e)
	if r != nil {
		return *r
	}
	active := 0
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.State == "ACTIVE" {
				active++
			}
		}
	}
	var c collector
	for _, d := range devs {
		for _, p := range d.Ports {
			name := fmt.Sprintf("%s/%d", d.Name, p.Port)
			if p.State == "ACTIVE" && p.PhysState == "LinkUp" {
				c.add(OK, name+" ACTIVE/LinkUp", "")
				continue
			}
			// A spare port that is down is common; with no active port
			// at all RDMA cannot work.
			v := Warn
			if active == 0 {
				v = Fail
			}
			msg := fmt.Sprintf("%s is %s, physical state %s", name, p.State, p.PhysState)
			if p.Netdev != "" {
				msg += " (netdev " + p.Netdev + ")"
			}
			c.add(v, msg, portFix(p))
		}
	}
	return c.result("no ports")
}

func portFix(p apitype.Port) string {
	switch {
	case p.PhysState == "Disabled" && p.Netdev != "":
		return fmt.Sprintf("bring the netdev up: ip link set %s up", p.Netdev)
	case p.PhysState == "Disabled":
		return "the port is administratively disabled: enable it (ip link set <netdev> up, or ibportstate enable for InfiniBand)"
	case p.PhysState == "Polling":
		return "no link partner: check the cable, the transceiver and that the switch port is enabled"
	case p.LinkLayer == "InfiniBand" && (p.State == "INIT" || p.State == "ARMED"):
		return "the link is up but no subnet manager activated the port: start opensm on a node or check the fabric's SM"
	case p.Netdev != "":
		return fmt.Sprintf("check ip link show %s and the switch port", p.Netdev)
	}
	return "check the cable and the switch port"
}

// forRoCEPorts runs check on every RoCE port that has a netdev and gathers
// its verdicts; a node without such ports gets skip(none).
func forRoCEPorts(e *Env, none string, check func(c *collector, name string, p apitype.Port)) Result {
	devs, r := devicesOrSkip(e)
	if r != nil {
		return *r
	}
	var c collector
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer != "Ethernet" || p.Netdev == "" {
				continue
			}
			check(&c, fmt.Sprintf("%s/%d", d.Name, p.Port), p)
		}
	}
	return c.result(none)
}

func checkGIDs(e *Env) Result {
	return forRoCEPorts(e, "no RoCE ports with a netdev (InfiniBand GIDs come from the subnet manager)", func(c *collector, name string, p apitype.Port) {
		v2 := map[netip.Addr]bool{}
		routable := 0
		for _, g := range p.GIDs {
			if g.Type != "RoCE v2" {
				continue
			}
			a, err := netip.ParseAddr(g.GID)
			if err != nil {
				continue
			}
			a = a.Unmap()
			v2[a] = true
			if !a.IsLinkLocalUnicast() {
				routable++
			}
		}
		addrs, err := e.addrs(p.Netdev)
		if err != nil {
			c.add(Warn, fmt.Sprintf("%s: cannot read the addresses of %s: %v", name, p.Netdev, err), "check that the netdev exists: ip addr show "+p.Netdev)
			return
		}
		var missing []string
		for _, a := range addrs {
			a = a.Unmap()
			if a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() {
				continue
			}
			if !v2[a] {
				missing = append(missing, a.String())
			}
		}
		switch {
		case len(missing) > 0:
			c.add(Fail, fmt.Sprintf("%s: no RoCE v2 GID for %s on %s", name, strings.Join(missing, ", "), p.Netdev),
				fmt.Sprintf("the GID table follows %s's addresses: check that %s is the RoCE netdev (rdma link show), that the address is not on a VLAN/bond the device does not serve, and re-add Soft-RoCE links after changing their netdev", p.Netdev, p.Netdev))
		case routable == 0:
			c.add(Fail, fmt.Sprintf("%s: %s has no IPv4 or global IPv6 address, so no routable RoCE v2 GID (rdma_cm cannot resolve it)", name, p.Netdev),
				fmt.Sprintf("give %s an address: ip addr add <address>/<prefix> dev %s", p.Netdev, p.Netdev))
		default:
			c.add(OK, fmt.Sprintf("%s: %d routable RoCE v2 GID(s) for %s", name, routable, p.Netdev), "")
		}
	})
}

func checkMTU(e *Env) Result {
	return forRoCEPorts(e, "no RoCE ports with a netdev (InfiniBand MTUs come from the subnet manager)", func(c *collector, name string, p apitype.Port) {
		mtu, err := readInt(e.sys("class", "net", p.Netdev, "mtu"))
		if err != nil {
			c.add(Warn, fmt.Sprintf("%s: cannot read the MTU of %s: %v", name, p.Netdev, err), "check that the netdev exists: ip link show "+p.Netdev)
			return
		}
		active := apitype.RoCEActiveMTU(mtu)
		if t, pol, ok := e.target("mtu", p.Netdev); ok && (t.State == apitype.Drifted || t.State == apitype.TargetError) {
			fix := "rdmactl policy apply"
			if t.State == apitype.Drifted {
				fix = fmt.Sprintf("policy %q is in observe mode: set mode = \"enforce\" or ip link set %s mtu %s", pol, p.Netdev, t.Desired)
			}
			msg := fmt.Sprintf("%s: %s has MTU %d but policy %q wants %s", name, p.Netdev, mtu, pol, t.Desired)
			if t.Error != "" {
				msg += ": " + t.Error
			}
			c.add(Fail, msg, fix)
			return
		}
		switch {
		case active < 1024:
			c.add(Warn, fmt.Sprintf("%s: %s MTU %d gives an RDMA MTU of only %d", name, p.Netdev, mtu, active),
				fmt.Sprintf("raise the MTU to at least 1500: ip link set %s mtu 1500 (or declare mtu in a [[policy]])", p.Netdev))
		case mtu > 1500 && active < 4096:
			want := 2*active + 96
			c.add(Warn, fmt.Sprintf("%s: jumbo MTU %d on %s gives an RDMA MTU of only %d; %d would give %d", name, mtu, p.Netdev, active, want, 2*active),
				fmt.Sprintf("ip link set %s mtu %d on every node and switch port of the fabric (or 9000, which gives 4096)", p.Netdev, want))
		default:
			c.add(OK, fmt.Sprintf("%s: %s MTU %d, RDMA MTU %d", name, p.Netdev, mtu, active), "")
		}
	})
}

// target finds a policy target of kind for object in the snapshot and the
// name of its policy.
func (e *Env) target(kind, object string) (apitype.Target, string, bool) {
	if e.Snapshot == nil {
		return apitype.Target{}, "", false
	}
	for _, p := range e.Snapshot.Policy.Policies {
		for _, t := range p.Targets {
			if t.Kind == kind && t.Object == object {
				return t, p.Name, true
			}
		}
	}
	return apitype.Target{}, "", false
}

// qosField returns the value of key ("pfc", "trust") in a FormatQoS string
// ("trust=dscp pfc=3"), and whether it is there.
func qosField(s, key string) (string, bool) {
	for _, f := range strings.Fields(s) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// policyQoS compares the value of key ("pfc", "trust") of every QoS policy
// target with what the policy declares, into c, and returns the netdevs
// for which a policy declares key.
func policyQoS(e *Env, c *collector, key, what string) map[string]bool {
	declared := map[string]bool{}
	for _, p := range e.Snapshot.Policy.Policies {
		for _, t := range p.Targets {
			if t.Kind != "qos" {
				continue
			}
			want, ok := qosField(t.Desired, key)
			if !ok {
				continue
			}
			declared[t.Object] = true
			got, _ := qosField(t.Actual, key)
			switch {
			case t.State == apitype.Unsupported:
				c.add(Warn, fmt.Sprintf("%s: %s cannot be set: the netdev has no DCB (%s)", t.Object, what, dash(t.Actual)),
					"lossless RoCE needs a NIC with DCB (dcbnl); on a NIC without it, rely on ECN/DCQCN or use a different netdev")
			case t.State == apitype.TargetError:
				c.add(Fail, fmt.Sprintf("%s: setting %s failed: %s", t.Object, what, t.Error), "see journalctl -u rdmad; then rdmactl policy apply")
			case got != want:
				fix := "rdmactl policy apply"
				if t.State == apitype.Drifted {
					fix = fmt.Sprintf("policy %q is in observe mode: set mode = \"enforce\", or set it by hand (dcb / mlnx_qos)", p.Name)
				}
				c.add(Fail, fmt.Sprintf("%s: %s is %s, policy %q wants %s", t.Object, what, dash(got), p.Name, want), fix)
			default:
				c.add(OK, fmt.Sprintf("%s: %s %s as policy %q declares", t.Object, what, want, p.Name), "")
			}
		}
	}
	return declared
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// memlockNeed is the RLIMIT_MEMLOCK the checks ask for: what rdmad's policy
// declares for itself, else DefaultMinMemlock.
func (e *Env) memlockNeed() (size.Size, string) {
	if t, _, ok := e.target("memlock", "rdmad"); ok {
		if s, err := size.Parse(t.Desired); err == nil {
			return s, "[memlock] daemon"
		}
	}
	return DefaultMinMemlock, "the kernel default"
}

// readMemlock reads the RLIMIT_MEMLOCK of a /proc/<pid>/limits.
func readMemlock(path string) (soft, hard size.Size, err error) {
	l, err := memlimit.ReadProc(path)
	return l.Soft, l.Hard, err
}

// checkMemlock checks rdmad's own limit, which its MR pool and probes
// register memory under.
func checkMemlock(e *Env) Result {
	need, why := e.memlockNeed()
	if e.Snapshot == nil {
		return skip("rdmad's limit not checked: rdmad not reachable")
	}
	path := e.proc(strconv.Itoa(e.Snapshot.PID), "limits")
	soft, _, err := readMemlock(path)
	switch {
	case err != nil:
		return Result{Verdict: Warn, Message: fmt.Sprintf("cannot read rdmad's limit: %v", err), Fix: "run rdmactl doctor as root, or on the node where rdmad runs"}
	case soft < need:
		return Result{Verdict: Fail, Message: fmt.Sprintf("rdmad (pid %d) may lock %s, less than %s (%s)%s", e.Snapshot.PID, soft, need, why, e.pinHolders()),
			Fix: "set [memlock] daemon = \"unlimited\" in rdmad.toml, or LimitMEMLOCK=infinity in rdmad.service"}
	}
	if reg := e.registrationFailing(); reg != "" {
		return Result{Verdict: Warn, Message: fmt.Sprintf("rdmad may lock %s, but %s%s", soft, reg, e.pinHolders()),
			Fix: "see what pins memory with rdmactl resources; stop or shrink what pins the most, or check the device (rdmactl status)"}
	}
	return Result{Verdict: OK, Message: fmt.Sprintf("rdmad may lock %s", soft)}
}

// checkMemlockUser checks the limit of the session doctor runs in: what
// RDMA programs the caller starts get. It is a CallerCheck: rdmad's own
// session says nothing about the caller's.
func checkMemlockUser(e *Env) Result {
	need, why := e.memlockNeed()
	soft, _, err := readMemlock(e.proc("self", "limits"))
	switch {
	case err != nil:
		return Result{Verdict: Warn, Message: fmt.Sprintf("cannot read your own limit: %v", err)}
	case soft < need:
		return Result{Verdict: Warn, Message: fmt.Sprintf("you may lock %s, less than %s (%s): RDMA programs you start may fail to register memory (ibv_reg_mr: Cannot allocate memory)%s", soft, need, why, e.pinHolders()),
			Fix: "raise it for RDMA users: [memlock] users = \"unlimited\" in rdmad.toml (or a limits.d memlock rule), then log in again"}
	}
	return Result{Verdict: OK, Message: fmt.Sprintf("you may lock %s", soft)}
}

// maxClockError is the kernel's estimated clock error above which the
// clock counts as unsynchronised.
const maxClockError = 100000 // µs

func checkClock(e *Env) Result {
	var tx unix.Timex
	st, err := e.adjtimex(&tx)
	if err != nil {
		return skip(fmt.Sprintf("cannot read the clock state: adjtimex: %v", err))
	}
	fix := "enable NTP (systemctl enable --now systemd-timesyncd, or chronyd): probe timestamps and logs across nodes disagree otherwise"
	switch {
	case tx.Status&unix.STA_UNSYNC != 0 || st == unix.TIME_ERROR:
		return Result{Verdict: Warn, Message: "the kernel clock is not synchronised (STA_UNSYNC)", Fix: fix}
	case tx.Maxerror > maxClockError:
		return Result{Verdict: Warn, Message: fmt.Sprintf("the clock's maximum error is %d ms", tx.Maxerror/1000), Fix: fix}
	}
	return Result{Verdict: OK, Message: fmt.Sprintf("synchronised, maximum error %d ms", tx.Maxerror/1000)}
}

// qpCounters are hw_counters that count QP errors, retransmits and
// out-of-sequence packets (mlx5 and rxe names).
var qpCounters = []string{
	"out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err", "implied_nak_seq_err",
	"duplicate_request", "req_cqe_error", "resp_cqe_error", "req_remote_access_errors", "req_remote_invalid_request",
	"resp_local_length_error", "resp_remote_access_errors", "roce_slow_restart",
	"out_of_seq_request", "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
	"send_err", "rcvd_rnr_err", "send_rnr_err",
}

// linkCounters are port counters of physical and receive errors.
var linkCounters = []string{
	"symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "local_link_integrity_errors",
	"excessive_buffer_overrun_errors", "port_rcv_remote_physical_errors", "port_xmit_discards", "VL15_dropped",
}

func checkQPErrors(e *Env) Result {
	return checkRising(e, qpCounters, func(p apitype.Port) map[string]uint64 { return p.HWCounters },
		"QP error counters rise: retransmits and sequence errors mean drops: check PFC/ECN on the path (pfc check), the MTU on every hop, and rdma statistic show")
}

func checkLinkErrors(e *Env) Result {
	return checkRising(e, linkCounters, func(p apitype.Port) map[string]uint64 { return p.Counters },
		"physical errors rise: reseat or replace the cable or transceiver, check the switch port's error counters")
}

func checkRising(e *Env, names []string, get func(apitype.Port) map[string]uint64, fix string) Result {
	before, r := devicesOrSkip(e)
	if r != nil {
		return *r
	}
	if e.Interval <= 0 {
		return skip("no interval to compare counters over (--interval 0)")
	}
	after, err := e.Later()
	if err != nil {
		return skip(fmt.Sprintf("second counter read: %v", err))
	}
	old := map[string]map[string]uint64{}
	for _, d := range before {
		for _, p := range d.Ports {
			old[fmt.Sprintf("%s/%d", d.Name, p.Port)] = get(p)
		}
	}
	var c collector
	seen := 0
	for _, d := range after {
		for _, p := range d.Ports {
			name := fmt.Sprintf("%s/%d", d.Name, p.Port)
			prev, ok := old[name]
			if !ok {
				continue
			}
			var rising []string
			for _, n := range names {
				v, ok := get(p)[n]
				if !ok {
					continue
				}
				seen++
				if pv, ok := prev[n]; ok && v > pv {
					rising = append(rising, fmt.Sprintf("%s +%d", n, v-pv))
				}
			}
			if len(rising) > 0 {
				c.add(Warn, fmt.Sprintf("%s: %s in %s", name, strings.Join(rising, ", "), e.Interval), fix)
			}
		}
	}
	if c.verdict == "" {
		if seen == 0 {
			return skip("the devices expose none of these counters")
		}
		c.add(OK, fmt.Sprintf("%d counters steady over %s", seen, e.Interval), "")
	}
	return c.result("")
}

// maxNamed bounds the peers a peers finding names; the rest are counted.
const maxNamed = 3

func checkPeers(e *Env) Result {
	s := e.Snapshot
	if s == nil {
		return notReachable(e)
	}
	comp, ok := s.Components[apitype.ComponentPeers]
	switch {
	case !ok:
		return skip("rdmad reports no peer probes (not started yet, or an rdmad without them)")
	case comp.State == apitype.Disabled:
		why := "[probe] peers = false"
		if d := comp.Detail(); d != "" {
			why = d
		}
		return skip("peer probes are disabled: " + why)
	case comp.State == apitype.Unavailable:
		why := "rdmad did not say why (see rdmactl status)"
		if d := comp.Detail(); d != "" {
			why = d
		}
		return skip("peer probes are unavailable: " + why)
	case comp.State == apitype.Error:
		return skip("peer probes are in error (see the daemon check): " + comp.Detail())
	}
	ps := s.Peers
	if len(ps.Peers) == 0 {
		return skip(fmt.Sprintf("no peer is probed yet (%d configured)", ps.Configured))
	}
	var down, degraded, unknown []apitype.Peer
	for _, p := range ps.Peers {
		switch p.State {
		case apitype.PeerDown:
			down = append(down, p)
		case apitype.PeerDegraded:
			degraded = append(degraded, p)
		case apitype.PeerUp:
		default:
			unknown = append(unknown, p)
		}
	}
	if len(unknown) == len(ps.Peers) {
		return skip(fmt.Sprintf("none of the %d peers has been probed yet; run doctor again in a few seconds", len(ps.Peers)))
	}
	port := "the control port ([probe] port, 18516 by default)"
	if ps.ControlPort != 0 {
		port = fmt.Sprintf("UDP %d (the control endpoint, [probe] port)", ps.ControlPort)
	}
	var c collector
	if len(down) > 0 {
		msg := fmt.Sprintf("%d of %d peers down: %s", len(down), len(ps.Peers), namePeers(down, func(p apitype.Peer) string { return p.Reason }))
		var fix []string
		for _, lp := range ps.Ports {
			if lp.LocalFault != "" {
				msg += "; LOCAL FAULT? " + lp.LocalFault
				fix = append(fix, fmt.Sprintf("first check this node's %s: its link, cable and switch port (rdma link show, ip link, the ports and link-errors checks)", lp.Key))
			}
		}
		for _, g := range ps.GroupFaults {
			msg += "; GROUP FAULT? " + g.Reason
			fix = append(fix, fmt.Sprintf("first check the switch and uplink of group %s", g.Group))
		}
		fix = append(fix, "check that rdmad runs on the peers (systemctl status rdmad there)",
			"that the firewalls let UDP 4791 (RoCE v2) and "+port+" through between the nodes",
			"that the peers' addresses and GIDs match (rdma link show, the gid check)",
			"and that the MTU is the same along the path; rdmactl peers shows each path and the reason")
		c.add(Fail, msg, strings.Join(fix, "; "))
	}
	if len(degraded) > 0 {
		c.add(Warn, fmt.Sprintf("%d of %d peers degraded (loss or RTT p99 over [probe] loss_threshold or rtt_threshold): %s", len(degraded), len(ps.Peers),
			namePeers(degraded, worstPath)),
			"look for congestion or a lossy link on the way: PFC/ECN (the pfc and dscp-trust checks), rising link and QP error counters, "+
				"MTU mismatches; rdmactl peers shows RTT and loss per path")
	}
	if c.verdict == "" {
		msg := fmt.Sprintf("all %d probed peers are up", len(ps.Peers)-len(unknown))
		if len(unknown) > 0 {
			msg += fmt.Sprintf(" (%d not probed yet)", len(unknown))
		}
		c.add(OK, msg, "")
	}
	return c.result("")
}

// namePeers lists up to maxNamed peers with a detail each, and counts the
// rest.
func namePeers(ps []apitype.Peer, detail func(apitype.Peer) string) string {
	var out []string
	for i, p := range ps {
		if i == maxNamed {
			out = append(out, fmt.Sprintf("and %d more", len(ps)-maxNamed))
			break
		}
		if d := detail(p); d != "" {
			out = append(out, p.Name+" ("+d+")")
		} else {
			out = append(out, p.Name)
		}
	}
	return strings.Join(out, ", ")
}

// worstPath says how a degraded peer's worst path is doing.
func worstPath(p apitype.Peer) string {
	for _, pa := range p.Paths {
		if pa.State == apitype.PeerDegraded {
			return fmt.Sprintf("from %s: loss %.1f%% of %d, RTT p99 %s", pa.Local, pa.LossPct, pa.Samples, pa.RTTP99)
		}
	}
	return ""
}

// checkFleet compares this node with its peers as their fingerprints
// (docs/PROBES.md, "Fingerprints") let the peer probes judge: it warns for
// settings that must agree along a path (MTU, active MTU, link layer, RoCE
// mode and ToS, QoS trust and PFC), naming the field, the peer and both
// values, and is ok, naming them, when only firmware or driver versions
// differ (normal during a rollout; the most common fault otherwise). Peers
// whose fingerprint is unknown (older rdmad) are counted, not judged.
func checkFleet(e *Env) Result {
	s := e.Snapshot
	if s == nil {
		return notReachable(e)
	}
	if comp, ok := s.Components[apitype.ComponentPeers]; !ok || comp.State == apitype.Disabled || comp.State == apitype.Unavailable {
		return skip("no peer probes, so no peer to compare with (see the peers check)")
	}
	ps := s.Peers
	known, unknown := 0, 0
	var must, mustFix, info []string
	for _, p := range ps.Peers {
		if p.FingerprintUnknown || p.Fingerprint == nil {
			if p.WireVersion != 0 {
				unknown++
			}
			continue
		}
		known++
		for _, m := range p.Mismatches {
			line := fmt.Sprintf("%s: %s %s here (%s) but %s on %s (%s)", p.Name, m.Field, m.Local, m.LocalPort, m.Peer, p.Name, m.PeerPort)
			if m.Severity == apitype.SeverityInfo {
				info = append(info, line)
				continue
			}
			must = append(must, line)
			mustFix = append(mustFix, fleetFix(m.Field))
		}
	}
	note := ""
	if unknown > 0 {
		note = fmt.Sprintf(" (%d peers run an rdmad without fingerprints: not compared)", unknown)
	}
	if known == 0 {
		return skip("no peer has sent its fingerprint yet" + note)
	}
	var c collector
	for i, line := range limit(must) {
		fix := ""
		if i < len(mustFix) {
			fix = mustFix[i]
		}
		c.add(Warn, "MISMATCH "+line, fix)
	}
	if len(info) > 0 {
		// Informational: the verdict stays ok unless a setting that must
		// agree differs too; the fix is given either way.
		c.add(OK, "versions differ (informational): "+strings.Join(limit(info), "; "),
			"upgrade firmware, driver, kernel and rdmad to the fleet's versions when the rollout is done (mlxfwmanager, the vendor's driver package, the distribution's kernel): differing versions are the commonest cause of interop faults")
	}
	if c.verdict == "" {
		c.add(OK, fmt.Sprintf("%d peers agree with this node's MTU, link layer, RoCE and QoS settings%s", known, note), "")
	} else if note != "" {
		c.msgs = append(c.msgs, strings.TrimSpace(note))
	}
	return c.result("")
}

// limit keeps the first lines and counts the rest.
func limit(lines []string) []string {
	const most = 10
	if len(lines) <= most {
		return lines
	}
	return append(lines[:most:most], fmt.Sprintf("and %d more", len(lines)-most))
}

func fleetFix(field string) string {
	switch field {
	case "mtu", "active_mtu":
		return "align the MTU on every node of the fabric (and the switch ports): declare it with [[policy]] mtu = ... in rdmad.toml on every node, or ip link set <netdev> mtu <n>"
	case "link_layer":
		return "the two ports run different link layers (InfiniBand vs Ethernet): probe between ports of the same fabric, or set the port type (mlxconfig LINK_TYPE_P1)"
	case "roce_mode", "roce_tos":
		return "declare the same [[policy]] roce tos/mode on every node, so that RDMA-CM traffic lands in the same class everywhere"
	case "trust", "pfc":
		return "declare the same [[policy]] qos trust and pfc on every node (and the switches): lossless RoCE needs PFC on the same priority end to end"
	case "rate":
		return "one end trained at a lower rate: check that port's cable, transceiver and switch port speed (a [[policy]] min_rate makes rdmactl check report it as LinkDegraded), or expect it where the fleet mixes NIC generations"
	}
	return "align the setting on both nodes"
}
