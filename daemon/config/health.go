package config

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Health holds the [health] table: how the verdict (GET /v1/health,
// rdmactl check; docs/HEALTH.md) judges the node.
type Health struct {
	// Ignore lists devices ("mlx5_1") and ports ("mlx5_0/2") the verdict
	// leaves out: an uncabled second port is not a fault.
	Ignore []string `toml:"ignore"`
	// FlapDowns downs of a port within FlapWindow make it flapping; it
	// stays so until FlapQuiet passed without a transition.
	FlapDowns  int      `toml:"flap_downs"`
	FlapWindow Duration `toml:"flap_window"`
	FlapQuiet  Duration `toml:"flap_quiet"`
	// FlapLongDowns downs within FlapLongWindow make a port flapping as
	// well, for as long as the long window holds them (a link that drops
	// every hour); 0 switches the long window off.
	FlapLongDowns  int      `toml:"flap_long_downs"`
	FlapLongWindow Duration `toml:"flap_long_window"`
	// KernelFaultWindow is how long a kernel-log fault of a device counts
	// after its last message.
	KernelFaultWindow Duration `toml:"kernel_fault_window"`
	// KernelLog switches following the kernel log (/dev/kmsg) on or off.
	KernelLog bool `toml:"kernel_log"`
	// MinLoopbackGbps and MinLoopbackShare are the least bandwidth a
	// port's loopback test (rdmactl bw --loopback) must reach: in Gb/s,
	// and as a share of the port's active rate; the higher of the two
	// applies, and 0 declares none. Below it, LoopbackBandwidthLow.
	MinLoopbackGbps  float64 `toml:"min_loopback_gbps"`
	MinLoopbackShare float64 `toml:"min_loopback_share"`
	// Expect declares the RDMA devices the node should have
	// ([health.expect]); a missing one is DeviceMissing.
	Expect HealthExpect `toml:"expect"`
}

// HealthExpect is [health.expect]: what the node should have. Every key is
// optional; what is not declared is not checked.
type HealthExpect struct {
	// Devices is how many RDMA devices the node has, those in [health]
	// ignore not counted: fewer or more is DeviceMissing; 0: not checked.
	Devices int `toml:"devices"`
	// Ports is how many ports each device has; 0: not checked.
	Ports int `toml:"ports"`
	// Rate is the least active rate of each port ("400Gb/s"), judged as
	// [[policy]] min_rate is (LinkDegraded); RateGbps is it parsed.
	Rate     string  `toml:"rate"`
	RateGbps float64 `toml:"-"`
	// Device lists devices that must be present ([[health.expect.device]]),
	// each by name or PCI address, with its rail and its own ports and
	// rate. A drop-in's list replaces the main file's.
	Device []ExpectDevice `toml:"device"`
}

// ExpectDevice is one [[health.expect.device]].
type ExpectDevice struct {
	Name string `toml:"name"` // "mlx5_0", as rdmactl status shows it
	PCI  string `toml:"pci"`  // "0000:17:00.0", as lspci -D shows it
	// Rail labels the device in messages ("rail3": the leaf it cables to).
	Rail     string  `toml:"rail"`
	Ports    int     `toml:"ports"`
	Rate     string  `toml:"rate"`
	RateGbps float64 `toml:"-"`
}

// Expected limits.
const (
	MaxExpectDevices = 1024
	MaxExpectPorts   = 255
)

var (
	// pciAddress is a PCI function as lspci -D and sysfs write it.
	pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	// deviceName is an RDMA device's name as the kernel gives it.
	deviceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	// railName is a rail's label: text for a message, nothing else.
	railName = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,64}$`)
)

// Health defaults (docs/HEALTH.md says why).
const (
	DefaultFlapDowns         = 3
	DefaultFlapWindow        = 10 * time.Minute
	DefaultFlapQuiet         = 10 * time.Minute
	DefaultFlapLongDowns     = 2
	DefaultFlapLongWindow    = 6 * time.Hour
	DefaultKernelFaultWindow = 10 * time.Minute
)

func defaultHealth() Health {
	return Health{FlapDowns: DefaultFlapDowns, FlapWindow: Duration{DefaultFlapWindow}, FlapQuiet: Duration{DefaultFlapQuiet},
		FlapLongDowns: DefaultFlapLongDowns, FlapLongWindow: Duration{DefaultFlapLongWindow},
		KernelFaultWindow: Duration{DefaultKernelFaultWindow}, KernelLog: true}
}

// ignoreEntry is a device name or device/port, as the inventory names them,
// or a PCI function (one DeviceMissing names for having no RDMA device).
var ignoreEntry = regexp.MustCompile(`^([A-Za-z0-9_.-]{1,64}(/[0-9]{1,3})?|[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])$`)

// validateHealth checks [health].
func (c *Config) validateHealth(k *checker) {
	h := &c.Health
	bad := k.bad
	at := func(key string) string { return k.setter("health." + key) }
	for _, e := range h.Ignore {
		if !ignoreEntry.MatchString(e) {
			bad(at("ignore"), "health.ignore", "%q is not a device, port or PCI function; list RDMA device names (\"mlx5_1\") or ports (\"mlx5_0/2\") as rdmactl status shows them, or PCI functions (\"0000:17:00.0\") as lspci -D does", e)
		}
	}
	if h.MinLoopbackGbps < 0 || h.MinLoopbackGbps > 1e5 || h.MinLoopbackGbps != h.MinLoopbackGbps {
		bad(at("min_loopback_gbps"), "health.min_loopback_gbps", "%g is out of range; use 0 (none) to 100000 Gb/s, e.g. 90 for a 100 Gb/s port", h.MinLoopbackGbps)
	}
	if h.MinLoopbackShare < 0 || h.MinLoopbackShare > 1 || h.MinLoopbackShare != h.MinLoopbackShare {
		bad(at("min_loopback_share"), "health.min_loopback_share", "%g is out of range; use 0 (none) to 1, a share of the port's rate, e.g. 0.9", h.MinLoopbackShare)
	}
	if h.FlapDowns < 1 || h.FlapDowns > 1000 {
		bad(at("flap_downs"), "health.flap_downs", "%d is out of range; use 1 to 1000 downs (default %d)", h.FlapDowns, DefaultFlapDowns)
	}
	if h.FlapLongDowns < 0 || h.FlapLongDowns > 1000 {
		bad(at("flap_long_downs"), "health.flap_long_downs", "%d is out of range; use 0 (no long window) to 1000 downs (default %d)", h.FlapLongDowns, DefaultFlapLongDowns)
	}
	if w := h.FlapLongWindow.Duration; h.FlapLongDowns > 0 && w <= h.FlapWindow.Duration && w >= time.Second {
		bad(at("flap_long_window"), "health.flap_long_window", "%s is not longer than flap_window (%s); the long window catches the slow flaps the short one misses: make it longer (default %s) or set flap_long_downs = 0",
			w, h.FlapWindow.Duration, DefaultFlapLongWindow)
	}
	c.validateExpect(k)
	for _, d := range []struct {
		key string
		v   time.Duration
		def time.Duration
	}{{"flap_window", h.FlapWindow.Duration, DefaultFlapWindow}, {"flap_quiet", h.FlapQuiet.Duration, DefaultFlapQuiet},
		{"flap_long_window", h.FlapLongWindow.Duration, DefaultFlapLongWindow},
		{"kernel_fault_window", h.KernelFaultWindow.Duration, DefaultKernelFaultWindow}} {
		if d.v < time.Second || d.v > 7*24*time.Hour {
			bad(at(d.key), "health."+d.key, "%s is out of range; use 1s to 168h (default %s)", d.v, d.def)
		}
	}
}

// validateExpect checks [health.expect].
func (c *Config) validateExpect(k *checker) {
	x := &c.Health.Expect
	bad := k.bad
	at := func(key string) string { return k.setter("health.expect." + key) }
	if x.Devices < 0 || x.Devices > MaxExpectDevices {
		bad(at("devices"), "health.expect.devices", "%d is out of range; use 0 (not checked) to %d, the RDMA devices the node has (rdmactl status lists them)", x.Devices, MaxExpectDevices)
	}
	if x.Ports < 0 || x.Ports > MaxExpectPorts {
		bad(at("ports"), "health.expect.ports", "%d is out of range; use 0 (not checked) to %d ports per device", x.Ports, MaxExpectPorts)
	}
	if x.Rate != "" {
		r, err := ParseRate(x.Rate)
		if err != nil {
			bad(at("rate"), "health.expect.rate", "%v", err)
		}
		x.RateGbps = r
	}
	if len(x.Device) > MaxExpectDevices {
		bad(at("device"), "health.expect.device", "%d devices listed; at most %d", len(x.Device), MaxExpectDevices)
		return
	}
	if x.Devices > 0 && len(x.Device) > x.Devices {
		bad(at("devices"), "health.expect.devices", "%d, but %d [[health.expect.device]] are listed; make devices at least the list's length, or 0 to check the list alone", x.Devices, len(x.Device))
	}
	seen := map[string]int{}
	for i := range x.Device {
		d := &x.Device[i]
		key := fmt.Sprintf("device[%d]", i)
		at := func(sub string) string { return k.setter("health.expect." + key + "." + sub) }
		where := "health.expect." + key
		switch {
		case d.Name == "" && d.PCI == "":
			bad(at("name"), where, "names no device; give name = \"mlx5_0\" (as rdmactl status shows it) or pci = \"0000:17:00.0\" (as lspci -D shows it)")
		case d.Name != "" && d.PCI != "":
			bad(at("pci"), where+".pci", "gives both name %q and pci %q; give one (a name can move to another function after a reboot, a PCI address does not)", d.Name, d.PCI)
		case d.Name != "" && !deviceName.MatchString(d.Name):
			bad(at("name"), where+".name", "%q is not an RDMA device name; write it as rdmactl status shows it (\"mlx5_0\")", d.Name)
		case d.PCI != "" && !pciAddress.MatchString(d.PCI):
			bad(at("pci"), where+".pci", "%q is not a PCI function; write it as lspci -D shows it, in lower case (\"0000:17:00.0\")", d.PCI)
		}
		id := d.Name + d.PCI
		if j, dup := seen[id]; dup && id != "" {
			bad(at("name"), where, "%q is listed twice (device[%d] too); list each device once", id, j)
		}
		seen[id] = i
		if d.Rail != "" && !railName.MatchString(d.Rail) {
			bad(at("rail"), where+".rail", "%q is not a rail label; use up to 64 letters, digits and . _ : / - (\"rail3\")", d.Rail)
		}
		if d.Ports < 0 || d.Ports > MaxExpectPorts {
			bad(at("ports"), where+".ports", "%d is out of range; use 0 (the [health.expect] ports) to %d", d.Ports, MaxExpectPorts)
		}
		if d.Rate != "" {
			r, err := ParseRate(d.Rate)
			if err != nil {
				bad(at("rate"), where+".rate", "%v", err)
			}
			d.RateGbps = r
		}
	}
}

// ParseRate reads a link rate as [[policy]] min_rate writes it: "200Gb/s",
// "200 Gb/s", "200G", "25Gbps", "400" (Gb/s), "800Mb/s". It returns Gb/s.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	unit := 1.0
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"gb/s", 1}, {"gbps", 1}, {"gbit/s", 1}, {"g", 1}, {"mb/s", 1e-3}, {"mbps", 1e-3}, {"m", 1e-3}, {"tb/s", 1e3}, {"t", 1e3}} {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, unit = strings.TrimSpace(n), u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || v > 1e5 {
		return 0, fmt.Errorf("%q is not a link rate; write e.g. \"200Gb/s\" or \"100G\"", s)
	}
	return v * unit, nil
}

// MinRateFor is the rate policy p declares for a port of device dev over
// netdev (0: none), matched as [policy.roce] is: a devices glob matching
// the device or a netdevs glob matching the port's netdev.
func (p Policy) MinRateFor(dev, netdev string) float64 {
	if p.MinRateGbps == 0 {
		return 0
	}
	for _, g := range p.Devices {
		if ok, _ := path.Match(g, dev); ok {
			return p.MinRateGbps
		}
	}
	for _, g := range p.Netdevs {
		if ok, _ := path.Match(g, netdev); ok && netdev != "" {
			return p.MinRateGbps
		}
	}
	return 0
}
