package inventory

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// mellanox is the PCI vendor of ConnectX and BlueField adapters.
const mellanox = "0x15b3"

// everyFunction are the PCI drivers whose RDMA side makes a device for
// every function they bind (mlx5_ib for each mlx5_core function, mlx4_ib
// for mlx4_core's, EFA's driver is its RDMA device). Drivers whose RDMA is
// switched per function are not among them: ice's irdma (devlink
// enable_roce), bnxt_en's bnxt_re.
var everyFunction = map[string]bool{"mlx5_core": true, "mlx4_core": true, "efa": true}

// pciFunctionOf is the PCI function a device's sysfs path lies on: the
// path's last PCI address, so that an auxiliary device (irdma's
// ice.roce.0 below an ice function) is on the function above it. "" when
// the path has none (a virtual device).
func pciFunctionOf(resolved string) string {
	for p := resolved; p != "/" && p != "." && p != ""; p = filepath.Dir(p) {
		if pciAddr.MatchString(filepath.Base(p)) {
			return filepath.Base(p)
		}
	}
	return ""
}

// devicePCI is the PCI function of the RDMA device whose sysfs directory
// is dir, "" for a software device (rxe and siw have a parent file; their
// device link leads to the netdev's function, which is not theirs).
func devicePCI(dir string) string {
	if _, err := os.Lstat(filepath.Join(dir, "parent")); err == nil {
		return ""
	}
	fn, err := filepath.EvalSymlinks(filepath.Join(dir, "device"))
	if err != nil {
		return ""
	}
	return pciFunctionOf(fn)
}

// FunctionsWithoutDevice returns the PCI functions of RDMA adapters that
// have no RDMA device among devs, sorted by address. A function counts
// when it is no virtual function (SR-IOV VFs are a hypervisor's to hand
// out) and
//   - its class is InfiniBand (0x0207): an HCA is nothing else; or
//   - it is bound to a driver that makes an RDMA device for every function
//     (everyFunction) and gave another function of this node its device
//     (mlx5_core with mlx5_0 on the next function: mlx5_ib failed for
//     this one); or
//   - it is a Mellanox network function no driver is bound to (mlx5_core
//     failed to probe it, as after a firmware fault).
//
// A function held by vfio-pci (passed to a VM) or a NIC whose driver makes
// no RDMA device here is not counted. A missing /sys/bus/pci yields none.
func (r Reader) FunctionsWithoutDevice(devs []apitype.Device) []apitype.PCIFunction {
	dir := r.path("sys/bus/pci/devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	type function struct {
		apitype.PCIFunction
		vf bool
	}
	have := map[string]bool{}
	for _, d := range devs {
		if d.PCI != "" {
			have[d.PCI] = true
		}
	}
	var fns []function
	rdmaDrivers := map[string]bool{}
	for _, e := range ents {
		fdir := filepath.Join(dir, e.Name())
		// Only network controllers (class 0x02xxxx: Ethernet, InfiniBand)
		// are read further: a server has hundreds of other functions.
		class := readString(fdir, "class")
		if !strings.HasPrefix(strings.ToLower(class), "0x02") {
			continue
		}
		f := function{PCIFunction: apitype.PCIFunction{Address: e.Name(),
			Vendor: readString(fdir, "vendor"), Device: readString(fdir, "device"), Class: class}}
		if drv, err := os.Readlink(filepath.Join(fdir, "driver")); err == nil {
			f.Driver = filepath.Base(drv)
		}
		if _, err := os.Lstat(filepath.Join(fdir, "physfn")); err == nil {
			f.vf = true
		}
		if have[f.Address] && everyFunction[f.Driver] {
			rdmaDrivers[f.Driver] = true
		}
		fns = append(fns, f)
	}
	var out []apitype.PCIFunction
	for _, f := range fns {
		if have[f.Address] || f.vf {
			continue
		}
		class := strings.ToLower(f.Class)
		network := strings.HasPrefix(class, "0x02")
		switch {
		case strings.HasPrefix(class, "0x0207"):
		case network && f.Driver != "" && rdmaDrivers[f.Driver]:
		case network && f.Driver == "" && strings.EqualFold(f.Vendor, mellanox):
		default:
			continue
		}
		out = append(out, f.PCIFunction)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return slices.Clip(out)
}
