package kmsg

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// PatternErr is the pattern of a record of severity err or worse that
// names a device and matches no catalogued pattern.
const PatternErr = "err"

// errPriority is LOG_ERR: records of this severity or worse are faults
// whatever they say.
const errPriority = 3

// Classes of a Pattern (docs/HEALTH.md, "Kernel faults"): a fatal fault is
// a KernelFault problem; a non-fatal one is counted and shown but no
// problem alone (its link downs feed the flap rule, Pattern.Down); a
// noise message is no fault at all, only counted (Stats.Noise).
const (
	ClassFatal    = apitype.KernelFatal
	ClassNonFatal = apitype.KernelNonFatal
	ClassNoise    = "noise"
)

// A Pattern is one known kind of NIC fault message.
type Pattern struct {
	// Name is the KernelFault.Pattern it yields: stable, lower case.
	Name string
	// Class is ClassFatal, ClassNonFatal or ClassNoise.
	Class string
	// MaxPriority is the least severe priority it applies at: some
	// drivers log real faults at warning (4) or info (6).
	MaxPriority int
	// Netdev: the record must name one of the device's netdevs (a link
	// message about another netdev of the same PCI function, such as a
	// switchdev representor, is not the RDMA port's), and the fault is
	// kept per netdev (KernelFault.Netdev).
	Netdev bool
	// Down: each message is a link down of the netdev, whose times the
	// fault keeps (KernelFault.Recent) for the flap rule.
	Down bool
	// Any are literals one of which every match of Re contains: the
	// regular expression runs only on a message that has one (a flood of
	// messages costs a few substring searches each, not a backtracking
	// match per pattern; FuzzParseRecord checks the promise).
	Any []string
	Re  *regexp.Regexp
}

// prefilter reports whether msg contains one of p.Any.
func (p *Pattern) prefilter(msg []byte) bool {
	for _, a := range p.Any {
		if bytes.Contains(msg, []byte(a)) {
			return true
		}
	}
	return false
}

// Catalog is the shipped table of known fault messages, tried in order
// (the first that matches names the fault, or makes a noise message no
// fault; a record that matches none is a fault only at err or worse, as
// PatternErr, fatal). Every entry is matched only against records that
// are about an RDMA device, its PCI function or its netdev
// (index.identify). The texts are the drivers' own, as of Linux 6.x; the
// comments say where each comes from and why it has its class.
// docs/HEALTH.md, "Kernel faults" lists them for operators. The soft
// lockup in mlx5's NAPI poll (PatternSoftLockup) spans several records and
// has a detector of its own (Follower.softLockup).
var Catalog = []Pattern{
	// mlx5 health poller and its health buffer dump
	// (drivers/net/ethernet/mellanox/mlx5/core/health.c): poll_health's
	// "device's health compromised - reached miss count" (err);
	// print_health_info's "Health issue observed, <syndrome>,
	// severity(N) ..." and "synd 0x8: unrecoverable hardware error",
	// logged at the severity the firmware declares (warning for a high
	// temperature), and "PCI slot is unavailable";
	// mlx5_health_try_recover's "health recovery flow aborted" and
	// "health recovery failed" (err). Fatal: the firmware itself says
	// the device is unhealthy.
	{Name: "mlx5-health", Class: ClassFatal, MaxPriority: 4, Any: []string{"ealth ", "PCI slot", "synd 0x"}, Re: regexp.MustCompile(
		`health compromised|Health issue observed|PCI slot is unavailable|health recovery (flow aborted|failed)|\bsynd 0x[0-9a-f]+: `)},
	// mlx5 fatal errors (health.c): poll_health's "Fatal error %u
	// detected" (a fatal sensor: PCI or firmware) and the fw_fatal
	// reporter's "Driver is in error state. Unloading" (err). Fatal.
	{Name: "mlx5-fw-fatal", Class: ClassFatal, MaxPriority: 4, Any: []string{"Fatal error ", "Driver is in error state"}, Re: regexp.MustCompile(
		`Fatal error [0-9]+ detected|Driver is in error state`)},
	// mlx5 firmware command timeouts (drivers/net/ethernet/mellanox/
	// mlx5/core/cmd.c): wait_func's and cb_timeout_handler's "<CMD>(0x..)
	// timeout. Will cause a leak of a command resource",
	// wait_func_handle_exec_timeout's "No done completion" and
	// mlx5_cmd_comp_handler's "Command completion arrived after timeout",
	// all mlx5_core_warn (warning). Fatal: the firmware does not answer
	// its command interface (NVSentinel's cmd_exec_timeout, fatal too).
	{Name: "mlx5-cmd-timeout", Class: ClassFatal, MaxPriority: 4, Any: []string{"Will cause a leak", "No done completion", "arrived after timeout"}, Re: regexp.MustCompile(
		`timeout\. Will cause a leak of a command resource|No done completion|Command completion arrived after timeout`)},
	// A failed ACCESS_REG (opcode 0x805) command (cmd.c,
	// mlx5_cmd_out_err: "ACCESS_REG(0x805) op_mod(0x..) failed, status
	// <s>(0x..), syndrome (0x..), err(-N)", err): the firmware refuses a
	// register read, typically of the counters that a monitoring tool
	// reads on a physical function the firmware restricts (DGX and other
	// converged systems). Noise: NVSentinel's access_reg_failed and
	// gpud's class it non-fatal noise; it comes in floods and says
	// nothing about the link. Before mlx5-cmd-failed, which it would
	// otherwise be.
	{Name: "mlx5-access-reg", Class: ClassNoise, MaxPriority: errPriority, Any: []string{"ACCESS_REG(0x805) op_mod("}, Re: regexp.MustCompile(
		`ACCESS_REG\(0x805\) op_mod\(0x[0-9a-f]+\) failed, status `)},
	// mlx5 failed firmware commands (cmd.c, mlx5_cmd_out_err /
	// mlx5_cmd_check): "<CMD>(0x..) op_mod(0x..) failed, status <s>(0x..),
	// syndrome (0x..)" (err, rate limited; commands of user contexts only
	// at debug). Fatal, as any err line about the device is.
	{Name: "mlx5-cmd-failed", Class: ClassFatal, MaxPriority: errPriority, Any: []string{"), syndrome (0x"}, Re: regexp.MustCompile(
		`failed, status [^,]*\(0x[0-9a-f]+\), syndrome \(0x[0-9a-f]+\)`)},
	// Transmit and receive queue timeouts of an mlx5e netdev: the stack's
	// watchdog calls mlx5e_tx_timeout, which logs "TX timeout detected"
	// (en_main.c), and the tx and rx reporters' "TX timeout on queue: N,
	// SQ: 0x.., CQ: 0x.., ..." and "RX timeout on channel: N, ..."
	// (en/reporter_tx.c, en/reporter_rx.c, through mlx5e_health_report's
	// netdev_err). Fatal: a queue stalled for the watchdog's timeout
	// (NVSentinel's mlx5_tx/rx_timeout_detected are non-fatal, as the
	// driver tries to recover; rdmad keeps them fatal, as every err line
	// about the device is: a stalled queue is what an interrupt or
	// firmware fault looks like, and the fault ends with its window).
	{Name: "mlx5-queue-timeout", Class: ClassFatal, MaxPriority: errPriority, Any: []string{"TX timeout ", "RX timeout on channel: "}, Re: regexp.MustCompile(
		`\bTX timeout detected|\bTX timeout on queue: [0-9]+, SQ: |\bRX timeout on channel: [0-9]+, `)},
	// The stack's transmit watchdog (net/sched/sch_generic.c,
	// dev_watchdog): since 6.8 (and 6.6.47, 6.1.107) netdev_crit's
	// "NETDEV WATCHDOG: CPU: N: transmit queue N timed out N ms", with
	// the netdev's DEVICE, for any driver. Fatal (NVSentinel's
	// netdev_watchdog is non-fatal; see mlx5-queue-timeout). The older
	// form, a WARN_ONCE "NETDEV WATCHDOG: <netdev> (<driver>): ..." at
	// info without DEVICE, names the netdev only in its text and is not
	// matched (the trust rules above); mlx5e's own lines above come with
	// it.
	{Name: "netdev-watchdog", Class: ClassFatal, MaxPriority: errPriority, Any: []string{"NETDEV WATCHDOG: "}, Re: regexp.MustCompile(
		`NETDEV WATCHDOG: CPU: [0-9]+: transmit queue [0-9]+ timed out`)},
	// Insufficient PCIe slot power (drivers/net/ethernet/mellanox/mlx5/
	// core/events.c, mlx5_pcie_event): "Detected insufficient power on
	// the PCIe slot (NW)." (mlx5_core_warn_rl, warning): the firmware
	// reports that the slot cannot power the adapter, which then may
	// throttle or power ports down. Fatal, unlike NVSentinel's and gpud's
	// pci_power_insufficient (non-fatal: often logged during the BIOS's
	// power negotiation at boot): a node whose NIC runs short of power
	// should not take RDMA jobs; a node that logs it at every boot is
	// kept out for kernel_fault_window after the boot.
	{Name: "mlx5-slot-power", Class: ClassFatal, MaxPriority: 4, Any: []string{"insufficient power on the PCIe slot"}, Re: regexp.MustCompile(
		`Detected insufficient power on the PCIe slot`)},
	// A transceiver module in error (events.c, port_module): "Port module
	// event[error]: module N, Cable error, <error>" with <error> "High
	// Temperature", "Power budget exceeded", "Bad or shorted
	// cable/module", "One or more network ports have been powered down
	// due to insufficient/unadvertised power on the PCIe slot", ... (info
	// until 6.x, err since). Fatal, the module temperature included
	// (NVSentinel's port_module_high_temp is non-fatal): the firmware
	// puts a module in error state only when it stops driving it, and a
	// module that overheated once does so again.
	{Name: "mlx5-module-error", Class: ClassFatal, MaxPriority: 6, Any: []string{"Port module event[error]: "}, Re: regexp.MustCompile(
		`Port module event\[error\]: module [0-9]+, `)},
	// The ASIC's temperature warning (events.c, temp_warn): "High
	// temperature on sensors with bit set 0x.. 0x.." (warning), the
	// warning threshold; at the critical one the firmware's health
	// buffer reports it (mlx5-health). Non-fatal: shown, no problem.
	{Name: "mlx5-temp-warn", Class: ClassNonFatal, MaxPriority: 4, Any: []string{"High temperature on sensors"}, Re: regexp.MustCompile(
		`High temperature on sensors with bit set`)},
	// A transceiver module unplugged (events.c, port_module): "Port
	// module event: module N, Cable unplugged" (info). Non-fatal, as
	// NVSentinel's module_unplugged: a cable pulled, on purpose or not;
	// it comes with the netdev's "Link down", which alone feeds the flap
	// rule (an unplug is one down, not two).
	{Name: "mlx5-module-unplugged", Class: ClassNonFatal, MaxPriority: 6, Any: []string{"Cable unplugged"}, Re: regexp.MustCompile(
		`Port module event: module [0-9]+, Cable unplugged`)},
	// PCIe AER uncorrectable errors (drivers/pci/pcie/aer.c):
	// aer_print_error's "PCIe Bus Error: severity=Uncorrected
	// (Non-Fatal)|Uncorrectable (Fatal), ..." on the NIC's own function
	// (err; "CXL Bus Error" since 6.12), and the root port's "AER:
	// [Multiple ]Uncorrected (Non-Fatal) error received: <NIC address>"
	// ("... error message received from" since 6.10) at info, which
	// names the NIC only in its text. Corrected errors are left out:
	// the link corrected them, and they come at warning or info in
	// bursts. Fatal: an uncorrectable error lost a transaction.
	{Name: "pcie-aer", Class: ClassFatal, MaxPriority: 6, Any: []string{"Bus Error: severity=Uncorrect", "AER: "}, Re: regexp.MustCompile(
		`(PCIe|CXL) Bus Error: severity=Uncorrect|AER: (Multiple )?Uncorrect(ed|able) \((Non-)?Fatal\) error`)},
	// Link down of an RDMA netdev, at info: mlx5e_update_carrier's "Link
	// down" (drivers/net/ethernet/mellanox/mlx5/core/en_main.c) and the
	// "NIC Link is Down" of Intel's (e1000e, ixgbe, i40e, ice) and
	// Broadcom's (bnxt_en) drivers; "Link is Down" covers the drivers
	// that log it without "NIC". Non-fatal: one down is a cable pulled on
	// purpose; the flap rule ([health] flap_downs within flap_window,
	// PortFlapping) counts them per port.
	{Name: "link-down", Class: ClassNonFatal, MaxPriority: 6, Netdev: true, Down: true, Any: []string{"Link is ", "Link down"}, Re: regexp.MustCompile(
		`\b(NIC )?Link is [Dd]own\b|\bLink down\b`)},
	// Any other fatal or catastrophic report about an RDMA device
	// ("infiniband mlx5_0: ... fatal", an IB_EVENT_DEVICE_FATAL, mlx4's
	// "catastrophic error"; as a word, in lower, capitalised or upper
	// case), at warning or worse. Fatal.
	{Name: "rdma-fatal", Class: ClassFatal, MaxPriority: 4, Any: []string{"atal", "ATAL", "atastrophic", "ATASTROPHIC"}, Re: regexp.MustCompile(
		`\b([Ff]atal|FATAL|[Cc]atastrophic|CATASTROPHIC)\b`)},
}

// PatternSoftLockup is the fault of a soft lockup whose report shows a
// CPU stuck in mlx5e's NAPI poll (Follower.softLockup): fatal, on every
// device of mlx5_core (NVSentinel's mlx5_napi_soft_lockup).
const PatternSoftLockup = "mlx5-soft-lockup"

// ClassOf returns the class of the fault pattern name: ClassFatal for
// PatternErr, PatternSoftLockup and names the catalog does not know.
func ClassOf(name string) string {
	for i := range Catalog {
		if Catalog[i].Name == name {
			return Catalog[i].Class
		}
	}
	return ClassFatal
}

// A Device is an RDMA device as the matcher knows it: what the kernel
// names it by in the records it writes about it.
type Device struct {
	// Name is the RDMA device ("mlx5_0", "rxe0").
	Name string
	// PCI is its PCI function ("0000:03:00.0"), "" for software devices.
	PCI string
	// Netdevs are its ports' netdevs ("ens1f0np0", "ib0").
	Netdevs []string
	// Ifindexes are the netdevs' interface indexes, for records whose
	// DEVICE is "n<ifindex>"; optional (0 or missing: not matched by
	// index).
	Ifindexes []int
	// Virtual[i] reports whether Netdevs[i] has no parent device (a
	// veth, a bond, a bridge): netdev_printk writes the messages of such
	// a netdev as "<name>: ..." without a DEVICE property. Optional
	// (missing: false).
	Virtual []bool
	// Driver is the PCI function's driver ("mlx5_core"), "" when unknown
	// or for software devices: a soft lockup in a driver's code names
	// the driver, not a device (PatternSoftLockup).
	Driver string
}

// DevicesOf returns what the matcher needs of the inventory's devices:
// each one's name, its PCI function (Parent; "" for software devices) and
// its driver from sysfs, its ports' netdevs with their interface indexes
// from sysfs (0 where there is none: a netdev that went away) and whether
// each has a parent device.
func DevicesOf(devs []apitype.Device) []Device {
	out := make([]Device, 0, len(devs))
	for _, d := range devs {
		nd := Device{Name: d.Name, PCI: d.Parent, Driver: pciDriver(d.Parent)}
		for _, p := range d.Ports {
			if p.Netdev != "" && !slices.Contains(nd.Netdevs, p.Netdev) {
				i := ifindex(p.Netdev)
				nd.Netdevs = append(nd.Netdevs, p.Netdev)
				nd.Ifindexes = append(nd.Ifindexes, i)
				nd.Virtual = append(nd.Virtual, i > 0 && !hasParent(p.Netdev))
			}
		}
		out = append(out, nd)
	}
	return out
}

// sysClassNet is where ifindex reads interface indexes, sysBusPCI where
// pciDriver reads drivers.
const (
	sysClassNet = "/sys/class/net"
	sysBusPCI   = "/sys/bus/pci/devices"
)

// pciDriver returns the driver bound to the PCI function addr ("" when
// none, or when sysfs does not say).
func pciDriver(addr string) string {
	if !safeNetdev(addr) {
		return ""
	}
	l, err := os.Readlink(sysBusPCI + "/" + addr + "/driver")
	if err != nil {
		return ""
	}
	return path.Base(l)
}

// safeNetdev reports whether netdev can be a path element of sysClassNet.
func safeNetdev(netdev string) bool {
	return !strings.ContainsRune(netdev, '/') && netdev != "." && netdev != ".." && netdev != ""
}

// ifindex returns the interface index of netdev, 0 when sysfs does not
// say.
func ifindex(netdev string) int {
	if !safeNetdev(netdev) {
		return 0
	}
	b, err := os.ReadFile(sysClassNet + "/" + netdev + "/ifindex")
	if err != nil {
		return 0
	}
	i, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || i < 0 {
		return 0
	}
	return i
}

// hasParent reports whether netdev has a parent device in sysfs (its
// "device" link: a PCI function, a virtio device), which netdev_printk
// names in a DEVICE property. It says true when sysfs cannot tell, so
// that a bare "<netdev>: " prefix is not trusted on a guess.
func hasParent(netdev string) bool {
	if !safeNetdev(netdev) {
		return true
	}
	_, err := os.Lstat(sysClassNet + "/" + netdev + "/device")
	return !errors.Is(err, fs.ErrNotExist)
}

// An index finds the device a record is about.
type index struct {
	names   map[string]string // RDMA device names
	pci     map[string]string // PCI functions
	netdevs map[string]string // every netdev of a device
	ifindex map[int]string
	// netName and ifName give a netdev's name, as a string of the index
	// (a record's bytes are no string to keep), by name and by index.
	netName map[string]string
	ifName  map[int]string
	// drivers are the devices of each PCI driver (Device.Driver).
	drivers map[string][]string
	// soft are the names of software devices (no PCI function: rxe),
	// whose ibdev_printk messages are "<name>: ..." without a DEVICE
	// property, and bare the netdevs that have no parent device
	// (Device.Virtual). softWords adds the software devices' netdevs, for
	// the text of rdma_rxe's own messages.
	soft, bare, softWords map[string]string
}

func newIndex(devs []Device) *index {
	ix := &index{names: map[string]string{}, pci: map[string]string{}, netdevs: map[string]string{},
		ifindex: map[int]string{}, soft: map[string]string{}, bare: map[string]string{}, softWords: map[string]string{},
		netName: map[string]string{}, ifName: map[int]string{}, drivers: map[string][]string{}}
	for _, d := range devs {
		if d.Name == "" {
			continue
		}
		ix.names[d.Name] = d.Name
		if d.Driver != "" && d.PCI != "" {
			ix.drivers[d.Driver] = append(ix.drivers[d.Driver], d.Name)
		}
		if d.PCI != "" {
			ix.pci[d.PCI] = d.Name
		} else {
			ix.soft[d.Name] = d.Name
			ix.softWords[d.Name] = d.Name
		}
		for i, n := range d.Netdevs {
			if n == "" {
				continue
			}
			ix.netdevs[n] = d.Name
			ix.netName[n] = n
			if i < len(d.Ifindexes) && d.Ifindexes[i] > 0 {
				ix.ifindex[d.Ifindexes[i]] = d.Name
				ix.ifName[d.Ifindexes[i]] = n
			}
			if i < len(d.Virtual) && d.Virtual[i] {
				ix.bare[n] = d.Name
			}
			if d.PCI == "" {
				ix.softWords[n] = d.Name
			}
		}
	}
	return ix
}

// identify returns the device r is about, the netdev of that device it is
// about ("" when none), and whether only the start of the message says so
// (bare: r has no DEVICE property). It goes by what the kernel itself
// attaches or formats, never by a name anywhere in the text: a process
// name, a path or a mount option that a user chose can be anywhere in a
// kernel message ("rxe0[1234]: segfault at 0 ...", "tmpfs: Unknown
// parameter 'mlx5_0'"), and would otherwise make a fault of the user's
// text (docs/HEALTH.md, "Kernel faults").
//
// With a DEVICE property (dev_printk and its wrappers attach it; no writer
// of /dev/kmsg can) the record is about that device when it is one of
// ours: the RDMA device (+infiniband:), its PCI function (+pci:) or a
// netdev (n<ifindex>). The message then starts as the kernel formats it
// for that device: "<driver> <name>: " (dev_printk), "<driver> <name>
// <netdev>: " (netdev_printk of a netdev with a parent) or "<driver>
// <name> <ibdev>: " (ibdev_printk of a device with a parent), so the
// third word names the netdev or RDMA device even when the parent (an
// Intel NIC under rxe) is not an RDMA device's. A PCIe port's AER report
// names the NIC in its fixed text (aerSource).
//
// Without one, only the prefixes that the kernel writes without it count
// (bareDevice).
func (ix *index) identify(r *Record) (device, netdev string, bare bool) {
	if len(r.Device) == 0 {
		device, netdev = ix.bareDevice(r.Message)
		return device, netdev, device != ""
	}
	device, netdev = ix.byField(r.Device)
	if netdev != "" {
		return device, netdev, false
	}
	sub, name, _ := bytes.Cut(r.Device[min(1, len(r.Device)):], []byte{':'})
	if r.Device[0] != '+' {
		sub, name = nil, nil
	}
	if w := thirdWord(r.Message, name); w != nil {
		if d, ok := ix.netdevs[string(w)]; ok && (device == "" || device == d) {
			return d, ix.netName[string(w)], false
		}
		if d, ok := ix.names[string(w)]; ok && device == "" {
			return d, "", false
		}
	}
	if device == "" && string(sub) == "pci" {
		device = ix.aerSource(r.Message, name)
	}
	return device, "", false
}

// byField resolves a DEVICE value: "+infiniband:<dev>", "+pci:<addr>",
// "+net:<name>" or "n<ifindex>", to a device and, for a netdev, its name.
func (ix *index) byField(v []byte) (device, netdev string) {
	if len(v) == 0 {
		return "", ""
	}
	if v[0] == 'n' {
		i, err := strconv.Atoi(string(v[1:]))
		if err != nil {
			return "", ""
		}
		return ix.ifindex[i], ix.ifName[i]
	}
	if v[0] != '+' {
		return "", ""
	}
	sub, name, ok := bytes.Cut(v[1:], []byte{':'})
	if !ok {
		return "", ""
	}
	switch string(sub) {
	case "infiniband":
		return ix.names[string(name)], ""
	case "pci":
		return ix.pci[string(name)], ""
	case "net":
		return ix.netdevs[string(name)], ix.netName[string(name)]
	}
	return "", ""
}

// thirdWord returns w of a message that starts "<driver> <name> <w>: " or
// "<driver> <name> <w> (<state>): " (netdev_printk adds the state of a
// netdev that is not registered: "(unregistering)"), nil when it does
// not: the form netdev_printk and ibdev_printk give the messages of a
// netdev or an RDMA device whose parent is the device <name>.
func thirdWord(msg, name []byte) []byte {
	sp := bytes.IndexByte(msg, ' ')
	if sp <= 0 || len(name) == 0 {
		return nil
	}
	rest, ok := bytes.CutPrefix(msg[sp+1:], name)
	if !ok {
		return nil
	}
	if rest, ok = bytes.CutPrefix(rest, []byte{' '}); !ok {
		return nil
	}
	return wordBeforeColon(rest, true)
}

// wordBeforeColon returns w of a text that starts "<w>: " (or is "<w>:"),
// or, with state, "<w> (<state>): "; nil otherwise. Netdev names have no
// space, ':' or '/' (dev_valid_name), nor have RDMA device names.
func wordBeforeColon(b []byte, state bool) []byte {
	end := bytes.IndexAny(b, " :")
	if end <= 0 {
		return nil
	}
	w, tail := b[:end], b[end:]
	if bytes.HasPrefix(tail, []byte(": ")) || len(tail) == 1 {
		return w
	}
	if state && bytes.HasPrefix(tail, []byte(" (")) {
		if c := bytes.IndexByte(tail, ')'); c > 0 && bytes.HasPrefix(tail[c+1:], []byte(": ")) &&
			bytes.IndexAny(tail[2:c], " :") < 0 {
			return w
		}
	}
	return nil
}

// bareDevice returns the device a record without a DEVICE property is
// about by the prefixes drivers write without one:
//
//   - "<ibdev>: " of a software RDMA device (ibdev_printk of a device
//     without a parent: rxe's rxe_err_dev), and "<netdev>: " of a netdev
//     without a parent (netdev_printk: a veth, a bond under rxe);
//   - "infiniband <ibdev>: ", "<driver> <pci>: " and "<driver> <pci>
//     <netdev>: ", dev_printk's and netdev_printk's own forms, which the
//     kernel writes with a DEVICE property (a record that lost it, or a
//     test's line);
//   - "rdma_rxe: " (rxe's pr_fmt), whose text names the software device
//     or its netdev ("rdma_rxe: already configured on eth0").
//
// The caller counts such a record only at err or worse: a user can put
// text at the start of an info or warning line ("<comm>[<pid>]: segfault
// at ..." with a process named "eth1: Link down"), and so could make a
// bare prefix of any of these.
func (ix *index) bareDevice(msg []byte) (device, netdev string) {
	if rest, ok := bytes.CutPrefix(msg, []byte("infiniband ")); ok {
		if w := wordBeforeColon(rest, false); w != nil {
			return ix.names[string(w)], ""
		}
		return "", ""
	}
	if rest, ok := bytes.CutPrefix(msg, []byte("rdma_rxe: ")); ok {
		return ix.rxeText(rest), ""
	}
	if w := wordBeforeColon(msg, true); w != nil {
		if d, ok := ix.soft[string(w)]; ok {
			return d, ""
		}
		if d, ok := ix.bare[string(w)]; ok {
			return d, ix.netName[string(w)]
		}
		return "", ""
	}
	// "<driver> <pci>: " or "<driver> <pci> <netdev>: " (a PCI address
	// has colons of its own).
	sp := bytes.IndexByte(msg, ' ')
	if sp <= 0 {
		return "", ""
	}
	tok := msg[sp+1:]
	if end := bytes.IndexByte(tok, ' '); end >= 0 {
		tok = tok[:end]
	}
	if addr, ok := bytes.CutSuffix(tok, []byte{':'}); ok {
		return ix.pci[string(addr)], "" // "<driver> <pci>: "
	}
	d, ok := ix.pci[string(tok)]
	if !ok {
		return "", ""
	}
	if w := thirdWord(msg, tok); w != nil {
		if ix.netdevs[string(w)] == d {
			return d, ix.netName[string(w)]
		}
		if ix.names[string(w)] == d {
			return d, ""
		}
	}
	return "", ""
}

// rxeText returns the software device that the text of an rdma_rxe
// message names by its name or one of its netdevs, as a whole word (of
// letters, digits, '_', '-' and '.', trimmed of a final '.' or '-'), so
// that "eth1" is not found in "eth10" or "eth1.100".
func (ix *index) rxeText(msg []byte) string {
	for i := 0; i < len(msg); {
		if !wordByte(msg[i]) {
			i++
			continue
		}
		j := i
		for j < len(msg) && wordByte(msg[j]) {
			j++
		}
		w := bytes.TrimRight(msg[i:j], ".-")
		i = j
		if d, ok := ix.softWords[string(w)]; ok {
			return d
		}
	}
	return ""
}

func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '.'
}

// AER's fixed texts before the address of the function that reported an
// error (drivers/pci/pcie/aer.c, aer_print_source/aer_print_port_info):
// "AER: [Multiple ]<severity> error message received from <domain:bus:
// dev.fn>" since 6.10, "... error received: <domain:bus:dev.fn>" from 4.19
// and "... error received: id=<bus<<8|devfn, hex>" before.
var (
	aerPrefix   = []byte(": AER: ")
	aerFrom     = []byte(" error message received from ")
	aerReceived = []byte(" error received: ")
	aerIDPrefix = []byte("id=")
	hexDigits   = "0123456789abcdef"
)

// aerSource returns the device whose PCI function a PCIe port's AER
// report names: the record's DEVICE is the port (port), and its message
// is "<driver> <port>: AER: ... received ... <address>" in the kernel's
// fixed format. The address is the one the port's error source register
// held, which no user chooses.
func (ix *index) aerSource(msg, port []byte) string {
	sp := bytes.IndexByte(msg, ' ')
	if sp <= 0 || len(port) == 0 {
		return ""
	}
	rest, ok := bytes.CutPrefix(msg[sp+1:], port)
	if !ok {
		return ""
	}
	if rest, ok = bytes.CutPrefix(rest, aerPrefix); !ok {
		return ""
	}
	var addr []byte
	if i := bytes.Index(rest, aerFrom); i >= 0 {
		addr = rest[i+len(aerFrom):]
	} else if i := bytes.Index(rest, aerReceived); i >= 0 {
		addr = rest[i+len(aerReceived):]
	} else {
		return ""
	}
	if end := bytes.IndexByte(addr, ' '); end >= 0 {
		addr = addr[:end]
	}
	id, ok := bytes.CutPrefix(addr, aerIDPrefix)
	if !ok {
		return ix.pci[string(addr)]
	}
	// id=0300 is bus 03, device 00, function 0 in the port's domain.
	dom, _, ok := bytes.Cut(port, []byte{':'})
	if !ok || len(id) != 4 || len(dom) > 8 {
		return ""
	}
	v, err := strconv.ParseUint(string(id), 16, 16)
	if err != nil {
		return ""
	}
	var buf [24]byte
	b := append(buf[:0], dom...)
	b = append(b, ':', hexDigits[v>>12&0xf], hexDigits[v>>8&0xf], ':',
		hexDigits[v>>7&1], hexDigits[v>>3&0xf], '.', hexDigits[v&7])
	return ix.pci[string(b)]
}

// A hit is what a record is, once matched: the device and, for a
// per-netdev pattern, the netdev it is about, and the pattern with its
// class and whether it is a link down.
type hit struct {
	device, netdev string
	pattern, class string
	down           bool
}

// trusted reports whether r is the kernel's own record (a line written to
// /dev/kmsg from userspace has a facility other than kern; userspace says
// whether those count, for tests).
func trusted(r *Record, userspace bool) bool {
	return r.Facility == facilityKern || r.Facility == facilityUser && userspace
}

// match returns what r is, a fault or noise (h.class ClassNoise: no
// fault); ok is false when it is none: a record that is not the kernel's
// (trusted), of severity debug, that is about no device, about one only
// by its prefix and less severe than err, or that matches no pattern at
// its severity.
func (ix *index) match(r *Record, userspace bool) (h hit, ok bool) {
	if !trusted(r, userspace) || r.Priority > maxPriority {
		return hit{}, false
	}
	device, netdev, bare := ix.identify(r)
	if device == "" || bare && r.Priority > errPriority {
		return hit{}, false
	}
	p, ok := classify(r, netdev != "")
	if !ok {
		return hit{}, false
	}
	h = hit{device: device, pattern: PatternErr, class: ClassFatal}
	if p != nil {
		h.pattern, h.class, h.down = p.Name, p.Class, p.Down
		if p.Netdev {
			h.netdev = netdev
		}
	}
	return h, true
}

// maxPriority is the least severe priority any pattern applies at (info).
const maxPriority = 6

// classify returns the pattern r is once it names a device (nil and true:
// PatternErr), or false when it is none: the first catalogued pattern
// that applies at r's priority and matches, else PatternErr at err or
// worse.
func classify(r *Record, netdev bool) (*Pattern, bool) {
	for i := range Catalog {
		p := &Catalog[i]
		if r.Priority > p.MaxPriority || p.Netdev && !netdev {
			continue
		}
		if p.prefilter(r.Message) && p.Re.Match(r.Message) {
			return p, true
		}
	}
	return nil, r.Priority <= errPriority
}

// The soft lockup report (kernel/watchdog.c, watchdog_timer_fn): pr_emerg's
// "watchdog: BUG: soft lockup - CPU#N stuck for Ns! [<comm>:<pid>]" ("NMI
// watchdog: " before 4.13), then the stuck CPU's registers and stack, a
// record a line at the default level, without DEVICE: x86's "RIP:
// 0010:<symbol>+0x../0x.. [<module>]" and " <symbol>+0x../0x..
// [<module>]" for a reliable frame (" ? <symbol>" for a guess, which does
// not count), arm64's "pc : <symbol>...". A frame of mlx5e's NAPI poll
// ("mlx5e_napi_poll", "mlx5e_poll_rx_cq", ...) in the records after the
// header (lockupLookahead) makes the fault. Both are anchored at the start
// of the message, where a user's text (a process name, at most 15 bytes,
// followed by "[<pid>]") cannot make them.
var (
	lockupHeader = regexp.MustCompile(`^(NMI )?watchdog: BUG: soft lockup - CPU#[0-9]+ stuck for [0-9]+s! \[`)
	lockupFrame  = regexp.MustCompile(`^( |RIP: [0-9a-f]{4}:|pc : )mlx5e_(napi_poll|poll_[a-z_]+)\+0x[0-9a-f]+/0x[0-9a-f]+ \[mlx5_core[\] ]`)
)

// lockupDriver is the driver whose devices a soft lockup in its poll
// loop is a fault of, and lockupModule the literal every frame of it has.
const (
	lockupDriver = "mlx5_core"
	lockupModule = "[mlx5_core"
)

// lockupLookahead bounds the records after a soft lockup header that are
// searched for the poll frame: the report's registers, modules and stack
// are some 30 to 80 records.
const lockupLookahead = 160

// isLockupHeader and isLockupFrame report whether r, a record of the
// kernel's, starts a soft lockup report or is a frame of mlx5e's poll.
func isLockupHeader(r *Record) bool {
	return r.Priority <= errPriority && len(r.Device) == 0 && bytes.Contains(r.Message, []byte("soft lockup - CPU#")) &&
		lockupHeader.Match(r.Message)
}

func isLockupFrame(r *Record) bool {
	return len(r.Device) == 0 && bytes.Contains(r.Message, []byte(lockupModule)) && lockupFrame.Match(r.Message)
}
