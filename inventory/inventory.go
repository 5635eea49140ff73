// Package inventory reads the node's RDMA devices, ports, GIDs and counters
// from sysfs.
//
// Everything is read through a configurable root so that tests run on fake
// sysfs trees (testdata/) and the VM suite checks the same code against the
// kernel's real tree. A node without /sys/class/infiniband simply has no
// RDMA devices: that is a state, not an error.
package inventory

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// A Reader reads the inventory below Root (normally "/").
type Reader struct {
	Root string
	// IPoIBDevice, when set, names the RDMA device of an IPoIB netdev (the
	// daemon passes rdmamap's, which matches the netdev's hardware address
	// against the node GUID). Unset, sysfs's device links decide: the
	// netdev's device/infiniband/<dev> and its dev_port. Both read only
	// sysfs; the hook keeps this package free of netlink, so that clients
	// (rdmactl doctor with rdmad down) can read the inventory too.
	IPoIBDevice func(netdev string) (string, error)
}

// Read returns every RDMA device, sorted by name. A missing
// /sys/class/infiniband yields no devices and no error.
func (r Reader) Read() ([]apitype.Device, error) {
	classDir := r.path("sys/class/infiniband")
	ents, err := os.ReadDir(classDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inventory: list %s: %w", classDir, err)
	}
	uverbs := r.uverbs()
	var devs []apitype.Device
	for _, e := range ents {
		d, err := r.device(e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while we looked; the next event says so
		}
		if err != nil {
			return nil, err
		}
		d.Uverbs = uverbs[d.Name]
		devs = append(devs, d)
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Name < devs[j].Name })
	return devs, nil
}

func (r Reader) path(p ...string) string {
	root := r.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, p...)...)
}

func (r Reader) device(name string) (apitype.Device, error) {
	dir := r.path("sys/class/infiniband", name)
	if _, err := os.Stat(dir); err != nil {
		return apitype.Device{}, err
	}
	d := apitype.Device{
		Name:         name,
		NodeType:     afterColon(readString(dir, "node_type")),
		NodeGUID:     readString(dir, "node_guid"),
		SysImageGUID: readString(dir, "sys_image_guid"),
		FWVer:        readString(dir, "fw_ver"),
		HCAType:      readString(dir, "hca_type"),
		BoardID:      readString(dir, "board_id"),
	}
	if target, err := os.Readlink(filepath.Join(dir, "device")); err == nil {
		d.Parent = filepath.Base(target)
	}
	d.PCI = devicePCI(dir)
	d.PCIe = pcieLink(dir)
	pents, err := os.ReadDir(filepath.Join(dir, "ports"))
	if err != nil {
		return apitype.Device{}, fmt.Errorf("inventory: list ports of %s: %w", name, err)
	}
	for _, pe := range pents {
		n, err := strconv.Atoi(pe.Name())
		if err != nil {
			continue
		}
		d.Ports = append(d.Ports, r.port(name, filepath.Join(dir, "ports", pe.Name()), n))
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Port < d.Ports[j].Port })
	return d, nil
}

func (r Reader) port(dev, dir string, n int) apitype.Port {
	p := apitype.Port{
		Port:      n,
		State:     afterColon(readString(dir, "state")),
		PhysState: afterColon(readString(dir, "phys_state")),
		LinkLayer: readString(dir, "link_layer"),
		Rate:      readString(dir, "rate"),
	}
	if f := strings.Fields(p.Rate); len(f) > 0 {
		p.RateGbps, _ = strconv.ParseFloat(f[0], 64)
	}
	p.Width = rateWidth(p.Rate)
	if p.LinkLayer == "InfiniBand" {
		p.LID = readHex(dir, "lid")
		p.SMLID = readHex(dir, "sm_lid")
	}
	p.GIDs = readGIDs(dir, p.LinkLayer)
	for _, g := range p.GIDs {
		if g.Netdev != "" {
			p.Netdev = g.Netdev
			break
		}
	}
	if p.Netdev == "" && p.LinkLayer == "InfiniBand" {
		p.Netdev = r.ipoib(dev, n)
	}
	if p.LinkLayer == "Ethernet" {
		p.NetdevSpeedMbps = r.netdevSpeed(p.Netdev)
	}
	p.Counters = readCounters(filepath.Join(dir, "counters"))
	p.HWCounters = readCounters(filepath.Join(dir, "hw_counters"))
	return p
}

// readGIDs reads the populated entries of a port's GID table. Only non-zero
// GIDs have attributes (the kernel answers EINVAL for the others), so those
// are the only files read besides the GIDs themselves.
func readGIDs(dir, linkLayer string) []apitype.GID {
	ents, err := os.ReadDir(filepath.Join(dir, "gids"))
	if err != nil {
		return nil
	}
	gids := []apitype.GID{}
	for _, e := range ents {
		idx, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw := readString(dir, "gids", e.Name())
		addr, ok := parseGID(raw)
		if !ok || addr.IsUnspecified() {
			continue
		}
		g := apitype.GID{Index: idx, GID: addr.String()}
		switch t := readString(dir, "gid_attrs", "types", e.Name()); {
		case linkLayer == "InfiniBand":
			g.Type = "IB"
		case t == "RoCE v2":
			g.Type = "RoCE v2"
		case t == "IB/RoCE v1":
			g.Type = "RoCE v1"
		default:
			g.Type = t
		}
		g.Netdev = readString(dir, "gid_attrs", "ndevs", e.Name())
		gids = append(gids, g)
	}
	sort.Slice(gids, func(i, j int) bool { return gids[i].Index < gids[j].Index })
	return gids
}

// parseGID parses sysfs's "fe80:0000:...:0001" form. IPv4-mapped GIDs
// print as "::ffff:192.0.2.1", the way rdma-core's tools show them.
func parseGID(s string) (netip.Addr, bool) {
	h := strings.ReplaceAll(s, ":", "")
	if len(h) != 32 {
		return netip.Addr{}, false
	}
	var b [16]byte
	for i := range b {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return netip.Addr{}, false
		}
		b[i] = byte(v)
	}
	return netip.AddrFrom16(b), true
}

// ipoib finds the IPoIB netdev of an InfiniBand port: through IPoIBDevice
// when it is set, else by sysfs's device links.
func (r Reader) ipoib(dev string, port int) string {
	netDir := r.path("sys/class/net")
	ents, err := os.ReadDir(netDir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		nd := e.Name()
		if readString(netDir, nd, "type") != "32" { // ARPHRD_INFINIBAND
			continue
		}
		if r.IPoIBDevice != nil {
			if d, err := r.IPoIBDevice(nd); err == nil && d == dev {
				return nd
			}
			continue
		}
		if _, err := os.Stat(filepath.Join(netDir, nd, "device", "infiniband", dev)); err == nil {
			devPort, _ := strconv.Atoi(readString(netDir, nd, "dev_port"))
			if devPort+1 == port {
				return nd
			}
		}
	}
	return ""
}

// uverbs maps device names to their verbs character devices.
func (r Reader) uverbs() map[string]string {
	dir := r.path("sys/class/infiniband_verbs")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "uverbs") {
			continue
		}
		if ib := readString(dir, e.Name(), "ibdev"); ib != "" {
			m[ib] = "/dev/infiniband/" + e.Name()
		}
	}
	return m
}

// readCounters reads every counter file of dir. Counters the device does
// not implement fail to read and are left out.
func readCounters(dir string) map[string]uint64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	m := make(map[string]uint64, len(ents))
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		v, err := strconv.ParseUint(readString(dir, e.Name()), 10, 64)
		if err != nil {
			continue
		}
		m[e.Name()] = v
	}
	return m
}

func readString(p ...string) string {
	b, err := os.ReadFile(filepath.Join(p...))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readHex(p ...string) int {
	v, _ := strconv.ParseInt(strings.TrimPrefix(readString(p...), "0x"), 16, 64)
	return int(v)
}

// afterColon turns sysfs's "4: ACTIVE" into "ACTIVE".
func afterColon(s string) string {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}
