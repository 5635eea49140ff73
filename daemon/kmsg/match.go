package kmsg

import (
	"bytes"
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
// against records that name an RDMA device, its PCI function or its
// netdev. The texts are the drivers' own, as of Linux 6.x; the comments
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

// A Device is an RDMA device as the matcher knows it: what a kernel
// message may name it by.
type Device struct {
	// Name is the RDMA device ("mlx5_0", "rxe0").
	Name string
	// PCI is its PCI function ("0000:03:00.0"), "" for software devices.
	PCI string
	// Netdevs are its ports' netdevs ("ens1f0np0", "ib0").
	Netdevs []string
	// Ifindexes are the netdevs' interface indexes, for records whose
	// DEVICE is "n<ifindex>"; optional (0 or missing: matched by name
	// only).
	Ifindexes []int
}

// DevicesOf returns what the matcher needs of the inventory's devices:
// each one's name, its PCI function (Parent; "" for software devices),
// its ports' netdevs and their interface indexes from sysfs (0 where
// there is none: a netdev that went away).
func DevicesOf(devs []apitype.Device) []Device {
	out := make([]Device, 0, len(devs))
	for _, d := range devs {
		nd := Device{Name: d.Name, PCI: d.Parent}
		for _, p := range d.Ports {
			if p.Netdev != "" && !slices.Contains(nd.Netdevs, p.Netdev) {
				nd.Netdevs = append(nd.Netdevs, p.Netdev)
				nd.Ifindexes = append(nd.Ifindexes, ifindex(p.Netdev))
			}
		}
		out = append(out, nd)
	}
	return out
}

// sysClassNet is where ifindex reads interface indexes.
const sysClassNet = "/sys/class/net"

// ifindex returns the interface index of netdev, 0 when sysfs does not
// say.
func ifindex(netdev string) int {
	if strings.ContainsRune(netdev, '/') || netdev == "." || netdev == ".." {
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

// A hit says which device a name belongs to.
type hit struct {
	device string
	netdev bool
}

// An index finds the device a record names.
type index struct {
	words   map[string]hit // device names, PCI addresses, netdevs
	names   map[string]string
	pci     map[string]string
	netdevs map[string]string
	ifindex map[int]string
}

func newIndex(devs []Device) *index {
	ix := &index{words: map[string]hit{}, names: map[string]string{}, pci: map[string]string{},
		netdevs: map[string]string{}, ifindex: map[int]string{}}
	for _, d := range devs {
		if d.Name == "" {
			continue
		}
		ix.names[d.Name] = d.Name
		ix.words[d.Name] = hit{device: d.Name}
		if d.PCI != "" {
			ix.pci[d.PCI] = d.Name
			ix.words[d.PCI] = hit{device: d.Name}
		}
		for i, n := range d.Netdevs {
			if n == "" {
				continue
			}
			ix.netdevs[n] = d.Name
			ix.words[n] = hit{device: d.Name, netdev: true}
			if i < len(d.Ifindexes) && d.Ifindexes[i] > 0 {
				ix.ifindex[d.Ifindexes[i]] = d.Name
			}
		}
	}
	return ix
}

// identify returns the device r is about and whether it names one of
// that device's netdevs: first by the DEVICE field dev_printk adds (the
// kernel's own reference), then by the first name in the text. The text
// is split into words of letters, digits, '_', '-', '.' and ':' with
// leading and trailing punctuation trimmed, so "eth1" is not found in
// "eth10" or "eth1.100" but is in "eth1:" and "(eth1)"; a word with ':'
// that is not a name itself ("mlx5_0:1") is tried part by part.
func (ix *index) identify(r *Record) (device string, netdev bool) {
	device, netdev = ix.byField(r.Device)
	if netdev {
		return device, netdev
	}
	msg := r.Message
	for i := 0; i < len(msg); {
		if !wordByte(msg[i]) {
			i++
			continue
		}
		j := i
		for j < len(msg) && wordByte(msg[j]) {
			j++
		}
		w := trimPunct(msg[i:j])
		i = j
		h, ok := ix.words[string(w)]
		for rest := w; !ok && bytes.IndexByte(rest, ':') >= 0; {
			var part []byte
			part, rest, _ = bytes.Cut(rest, []byte{':'})
			if h, ok = ix.words[string(trimPunct(part))]; !ok && bytes.IndexByte(rest, ':') < 0 {
				h, ok = ix.words[string(trimPunct(rest))]
			}
		}
		if !ok {
			continue
		}
		if device == "" {
			device = h.device
		}
		if h.device == device && h.netdev {
			netdev = true
			break // nothing more to learn
		}
	}
	return device, netdev
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

func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == ':'
}

func trimPunct(w []byte) []byte {
	for len(w) > 0 && (w[0] == '-' || w[0] == '.' || w[0] == ':') {
		w = w[1:]
	}
	for len(w) > 0 && (w[len(w)-1] == '-' || w[len(w)-1] == '.' || w[len(w)-1] == ':') {
		w = w[:len(w)-1]
	}
	return w
}

// match returns the device and pattern r is a fault of; ok is false when
// it is none: a record of another facility than kern and user, of
// severity debug, that names no device, or that matches no pattern at its
// severity.
func (ix *index) match(r *Record) (device, pattern string, ok bool) {
	if r.Facility != facilityKern && r.Facility != facilityUser || r.Priority > maxPriority {
		return "", "", false
	}
	device, netdev := ix.identify(r)
	if device == "" {
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
