package kmsg

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
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

// A Pattern is one known kind of NIC fault message.
type Pattern struct {
	// Name is the KernelFault.Pattern it yields: stable, lower case.
	Name string
	// MaxPriority is the least severe priority it applies at: some
	// drivers log real faults at warning (4) or info (6).
	MaxPriority int
	// Netdev: the record must name one of the device's netdevs (a link
	// message about another netdev of the same PCI function, such as a
	// switchdev representor, is not the RDMA port's).
	Netdev bool
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
// (the first that matches names the fault; a record that matches none is a
// fault only at err or worse, as PatternErr). Every entry is matched only
// against records that are about an RDMA device, its PCI function or its
// netdev (index.identify). The texts are the drivers' own, as of Linux 6.x; the comments
// say where each comes from. docs/HEALTH.md, "Kernel faults" lists them for
// operators.
var Catalog = []Pattern{
	// mlx5 health poller and its health buffer dump
	// (drivers/net/ethernet/mellanox/mlx5/core/health.c): poll_health's
	// "device's health compromised - reached miss count" (err);
	// print_health_info's "Health issue observed, <syndrome>,
	// severity(N) ..." and "synd 0x8: unrecoverable hardware error",
	// logged at the severity the firmware declares (warning for a high
	// temperature), and "PCI slot is unavailable";
	// mlx5_health_try_recover's "health recovery flow aborted" and
	// "health recovery failed" (err).
	{Name: "mlx5-health", MaxPriority: 4, Any: []string{"ealth ", "PCI slot", "synd 0x"}, Re: regexp.MustCompile(
		`health compromised|Health issue observed|PCI slot is unavailable|health recovery (flow aborted|failed)|\bsynd 0x[0-9a-f]+: `)},
	// mlx5 fatal errors (health.c): poll_health's "Fatal error %u
	// detected" (a fatal sensor: PCI or firmware) and the fw_fatal
	// reporter's "Driver is in error state. Unloading" (err).
	{Name: "mlx5-fw-fatal", MaxPriority: 4, Any: []string{"Fatal error ", "Driver is in error state"}, Re: regexp.MustCompile(
		`Fatal error [0-9]+ detected|Driver is in error state`)},
	// mlx5 firmware command timeouts (drivers/net/ethernet/mellanox/
	// mlx5/core/cmd.c): wait_func's and cb_timeout_handler's "<CMD>(0x..)
	// timeout. Will cause a leak of a command resource",
	// wait_func_handle_exec_timeout's "No done completion" and
	// mlx5_cmd_comp_handler's "Command completion arrived after timeout",
	// all mlx5_core_warn (warning).
	{Name: "mlx5-cmd-timeout", MaxPriority: 4, Any: []string{"Will cause a leak", "No done completion", "arrived after timeout"}, Re: regexp.MustCompile(
		`timeout\. Will cause a leak of a command resource|No done completion|Command completion arrived after timeout`)},
	// mlx5 failed firmware commands (cmd.c, mlx5_cmd_out_err /
	// mlx5_cmd_check): "<CMD>(0x..) op_mod(0x..) failed, status <s>(0x..),
	// syndrome (0x..)" (err, rate limited; commands of user contexts only
	// at debug).
	{Name: "mlx5-cmd-failed", MaxPriority: errPriority, Any: []string{"), syndrome (0x"}, Re: regexp.MustCompile(
		`failed, status [^,]*\(0x[0-9a-f]+\), syndrome \(0x[0-9a-f]+\)`)},
	// PCIe AER uncorrectable errors (drivers/pci/pcie/aer.c):
	// aer_print_error's "PCIe Bus Error: severity=Uncorrected
	// (Non-Fatal)|Uncorrectable (Fatal), ..." on the NIC's own function
	// (err; "CXL Bus Error" since 6.12), and the root port's "AER:
	// [Multiple ]Uncorrected (Non-Fatal) error received: <NIC address>"
	// ("... error message received from" since 6.10) at info, which
	// names the NIC only in its text. Corrected errors are left out:
	// the link corrected them, and they come at warning or info in
	// bursts.
	{Name: "pcie-aer", MaxPriority: 6, Any: []string{"Bus Error: severity=Uncorrect", "AER: "}, Re: regexp.MustCompile(
		`(PCIe|CXL) Bus Error: severity=Uncorrect|AER: (Multiple )?Uncorrect(ed|able) \((Non-)?Fatal\) error`)},
	// Link down of an RDMA netdev, at info: mlx5e_update_carrier's "Link
	// down" (drivers/net/ethernet/mellanox/mlx5/core/en_main.c) and the
	// "NIC Link is Down" of Intel's (e1000e, ixgbe, i40e, ice) and
	// Broadcom's (bnxt_en) drivers; "Link is Down" covers the drivers
	// that log it without "NIC".
	{Name: "link-down", MaxPriority: 6, Netdev: true, Any: []string{"Link is ", "Link down"}, Re: regexp.MustCompile(
		`\b(NIC )?Link is [Dd]own\b|\bLink down\b`)},
	// Any other fatal or catastrophic report about an RDMA device
	// ("infiniband mlx5_0: ... fatal", an IB_EVENT_DEVICE_FATAL, mlx4's
	// "catastrophic error"; as a word, in lower, capitalised or upper
	// case), at warning or worse.
	{Name: "rdma-fatal", MaxPriority: 4, Any: []string{"atal", "ATAL", "atastrophic", "ATASTROPHIC"}, Re: regexp.MustCompile(
		`\b([Ff]atal|FATAL|[Cc]atastrophic|CATASTROPHIC)\b`)},
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
}

// DevicesOf returns what the matcher needs of the inventory's devices:
// each one's name, its PCI function (Parent; "" for software devices),
// its ports' netdevs with their interface indexes from sysfs (0 where
// there is none: a netdev that went away) and whether each has a parent
// device.
func DevicesOf(devs []apitype.Device) []Device {
	out := make([]Device, 0, len(devs))
	for _, d := range devs {
		nd := Device{Name: d.Name, PCI: d.Parent}
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

// sysClassNet is where ifindex reads interface indexes.
const sysClassNet = "/sys/class/net"

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
	// soft are the names of software devices (no PCI function: rxe),
	// whose ibdev_printk messages are "<name>: ..." without a DEVICE
	// property, and bare the netdevs that have no parent device
	// (Device.Virtual). softWords adds the software devices' netdevs, for
	// the text of rdma_rxe's own messages.
	soft, bare, softWords map[string]string
}

func newIndex(devs []Device) *index {
	ix := &index{names: map[string]string{}, pci: map[string]string{}, netdevs: map[string]string{},
		ifindex: map[int]string{}, soft: map[string]string{}, bare: map[string]string{}, softWords: map[string]string{}}
	for _, d := range devs {
		if d.Name == "" {
			continue
		}
		ix.names[d.Name] = d.Name
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
			if i < len(d.Ifindexes) && d.Ifindexes[i] > 0 {
				ix.ifindex[d.Ifindexes[i]] = d.Name
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

// identify returns the device r is about, whether r is about one of that
// device's netdevs, and whether only the start of the message says so
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
func (ix *index) identify(r *Record) (device string, netdev, bare bool) {
	if len(r.Device) == 0 {
		device, netdev = ix.bareDevice(r.Message)
		return device, netdev, device != ""
	}
	device, netdev = ix.byField(r.Device)
	if netdev {
		return device, true, false
	}
	sub, name, _ := bytes.Cut(r.Device[min(1, len(r.Device)):], []byte{':'})
	if r.Device[0] != '+' {
		sub, name = nil, nil
	}
	if w := thirdWord(r.Message, name); w != nil {
		if d, ok := ix.netdevs[string(w)]; ok && (device == "" || device == d) {
			return d, true, false
		}
		if d, ok := ix.names[string(w)]; ok && device == "" {
			return d, false, false
		}
	}
	if device == "" && string(sub) == "pci" {
		device = ix.aerSource(r.Message, name)
	}
	return device, false, false
}

// byField resolves a DEVICE value: "+infiniband:<dev>", "+pci:<addr>",
// "+net:<name>" or "n<ifindex>".
func (ix *index) byField(v []byte) (string, bool) {
	if len(v) == 0 {
		return "", false
	}
	if v[0] == 'n' {
		i, err := strconv.Atoi(string(v[1:]))
		if err != nil {
			return "", false
		}
		d := ix.ifindex[i]
		return d, d != ""
	}
	if v[0] != '+' {
		return "", false
	}
	sub, name, ok := bytes.Cut(v[1:], []byte{':'})
	if !ok {
		return "", false
	}
	switch string(sub) {
	case "infiniband":
		return ix.names[string(name)], false
	case "pci":
		return ix.pci[string(name)], false
	case "net":
		d := ix.netdevs[string(name)]
		return d, d != ""
	}
	return "", false
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
func (ix *index) bareDevice(msg []byte) (device string, netdev bool) {
	if rest, ok := bytes.CutPrefix(msg, []byte("infiniband ")); ok {
		if w := wordBeforeColon(rest, false); w != nil {
			return ix.names[string(w)], false
		}
		return "", false
	}
	if rest, ok := bytes.CutPrefix(msg, []byte("rdma_rxe: ")); ok {
		return ix.rxeText(rest), false
	}
	if w := wordBeforeColon(msg, true); w != nil {
		if d, ok := ix.soft[string(w)]; ok {
			return d, false
		}
		if d, ok := ix.bare[string(w)]; ok {
			return d, true
		}
		return "", false
	}
	// "<driver> <pci>: " or "<driver> <pci> <netdev>: " (a PCI address
	// has colons of its own).
	sp := bytes.IndexByte(msg, ' ')
	if sp <= 0 {
		return "", false
	}
	tok := msg[sp+1:]
	if end := bytes.IndexByte(tok, ' '); end >= 0 {
		tok = tok[:end]
	}
	if addr, ok := bytes.CutSuffix(tok, []byte{':'}); ok {
		return ix.pci[string(addr)], false // "<driver> <pci>: "
	}
	d, ok := ix.pci[string(tok)]
	if !ok {
		return "", false
	}
	if w := thirdWord(msg, tok); w != nil {
		if ix.netdevs[string(w)] == d {
			return d, true
		}
		if ix.names[string(w)] == d {
			return d, false
		}
	}
	return "", false
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

// match returns the device and pattern r is a fault of; ok is false when
// it is none: a record that is not the kernel's (a line written to
// /dev/kmsg from userspace has a facility other than kern; userspace says
// whether those count, for tests), of severity debug, that is about no
// device, about one only by its prefix and less severe than err, or that
// matches no pattern at its severity.
func (ix *index) match(r *Record, userspace bool) (device, pattern string, ok bool) {
	if r.Facility != facilityKern && (r.Facility != facilityUser || !userspace) || r.Priority > maxPriority {
		return "", "", false
	}
	device, netdev, bare := ix.identify(r)
	if device == "" || bare && r.Priority > errPriority {
		return "", "", false
	}
	pattern, ok = classify(r, netdev)
	return device, pattern, ok
}

// maxPriority is the least severe priority any pattern applies at (info).
const maxPriority = 6

// classify returns the pattern r is a fault of once it names a device, or
// "" when it is none: the first catalogued pattern that applies at r's
// priority and matches, else PatternErr at err or worse.
func classify(r *Record, netdev bool) (string, bool) {
	for i := range Catalog {
		p := &Catalog[i]
		if r.Priority > p.MaxPriority || p.Netdev && !netdev {
			continue
		}
		if p.prefilter(r.Message) && p.Re.Match(r.Message) {
			return p.Name, true
		}
	}
	if r.Priority <= errPriority {
		return PatternErr, true
	}
	return "", false
}
