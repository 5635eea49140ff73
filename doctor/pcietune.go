package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// pciFuncName matches a PCI function's sysfs name ("0000:03:00.0"); the
// host bridges above the root ports ("pci0000:00") do not.
var pciFuncName = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// PCI vendors and classes of GPUs.
const (
	pciVendorNVIDIA = 0x10de
	pciClassDisplay = 0x03 // base class: 0x0300 VGA, 0x0302 3D controller
)

// minReadReq is the Max_Read_Request_Size below which an RDMA NIC loses
// bandwidth on reads from host memory (sends, RDMA READ responses): every
// request costs a completion round trip, and small ones leave the link
// idle between them. NVIDIA's tuning guides set ConnectX to 4096.
const minReadReq = 4096

// A pciNIC is the PCI function behind one or more RDMA devices.
type pciNIC struct {
	names []string
	// dir is the function's resolved sysfs directory
	// (.../devices/pci0000:00/0000:00:01.0/0000:03:00.0).
	dir, addr string
}

func (n pciNIC) String() string { return fmt.Sprintf("%s (%s)", strings.Join(n.names, ", "), n.addr) }

// pciNICs returns the PCI functions of the RDMA devices, a VF's as its
// PF (a VF's Device Control read-request field is reserved and the PF's
// rules), in device order. Software devices (rxe, siw) have none.
func pciNICs(e *Env) ([]pciNIC, *Result) {
	devs, r := devicesOrSkip(e)
	if r != nil {
		return nil, r
	}
	var out []pciNIC
	at := map[string]int{}
	for _, d := range devs {
		dir := e.sys("class", "infiniband", d.Name)
		if _, err := os.Lstat(filepath.Join(dir, "parent")); err == nil {
			continue
		}
		fn, err := filepath.EvalSymlinks(filepath.Join(dir, "device"))
		if err != nil || !pciFuncName.MatchString(filepath.Base(fn)) {
			continue
		}
		if pf, err := filepath.EvalSymlinks(filepath.Join(fn, "physfn")); err == nil && pciFuncName.MatchString(filepath.Base(pf)) {
			fn = pf
		}
		if i, ok := at[fn]; ok {
			out[i].names = append(out[i].names, d.Name)
			continue
		}
		at[fn] = len(out)
		out = append(out, pciNIC{names: []string{d.Name}, dir: fn, addr: filepath.Base(fn)})
	}
	return out, nil
}

// gpus returns the resolved sysfs directories of the NVIDIA display and
// 3D controllers on PCI.
func (e *Env) gpus() []string {
	dir := e.sys("bus", "pci", "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name())
		if readHex(filepath.Join(p, "vendor")) != pciVendorNVIDIA || readHex(filepath.Join(p, "class"))>>16 != pciClassDisplay {
			continue
		}
		if fn, err := filepath.EvalSymlinks(p); err == nil {
			out = append(out, fn)
		}
	}
	return out
}

// upstream returns the PCI functions above fn in its sysfs path, nearest
// first: switch ports, then the root port.
func upstream(fn string) []string {
	var out []string
	for up := filepath.Dir(fn); pciFuncName.MatchString(filepath.Base(up)); up = filepath.Dir(up) {
		out = append(out, up)
	}
	return out
}

// checkMaxReadReq fails for each RDMA NIC whose Max_Read_Request_Size is
// below minReadReq (sichek's check_pcie_mrr): firmware and BIOSes often
// leave it at 512, which caps what the NIC reads from host memory well
// below its line rate on 200G and faster links.
func checkMaxReadReq(e *Env) Result {
	nics, r := pciNICs(e)
	if r != nil {
		return *r
	}
	var c collector
	for _, n := range nics {
		cfg, err := readConfig(n.dir)
		var mrr int
		if err == nil {
			mrr, err = cfg.maxReadReq()
		}
		switch {
		case err != nil:
			c.add(Skip, fmt.Sprintf("%s: could not run: %v", n, err), "")
		case mrr == 0:
			c.add(OK, n.String()+": no PCIe capability (conventional PCI): nothing to tune", "")
		case mrr < minReadReq:
			c.add(Fail, fmt.Sprintf("%s: MaxReadReq %d bytes, below %d: the NIC's reads from host memory (sends, RDMA READ responses) run below line rate", n, mrr, minReadReq),
				fmt.Sprintf("set it to 4096: `setpci -s %s CAP_EXP+8.w=5000:7000` (as root; lspci -vvv -s %s shows DevCtl MaxReadReq), and make it last: "+
					"a oneshot unit that runs it at boot, or the BIOS's PCIe Max Read Request setting where it has one", n.addr, n.addr))
		default:
			c.add(OK, fmt.Sprintf("%s: MaxReadReq %d bytes", n, mrr), "")
		}
	}
	return c.result("no RDMA device on PCI (software devices only)")
}

// checkACS fails for each PCIe bridge between an RDMA NIC and an NVIDIA
// GPU below the same switch whose ACS redirects peer-to-peer requests or
// completions (sichek's check_pcie_acs): the switch then sends GPUDirect
// RDMA traffic up to the root complex instead of across, which costs
// most of its bandwidth or, with the IOMMU translating, breaks it. A NIC
// and a GPU below different root ports are not judged: their traffic
// crosses the root complex anyway.
func checkACS(e *Env) Result {
	nics, r := pciNICs(e)
	if r != nil {
		return *r
	}
	gpus := e.gpus()
	if len(gpus) == 0 {
		return skip("no NVIDIA GPU on PCI: ACS matters for GPUDirect between a NIC and a GPU")
	}
	var c collector
	acs := map[string]acsRead{} // the ports read, by directory
	for _, n := range nics {
		nicUp := upstream(n.dir)
		shares := false
		for _, g := range gpus {
			gpuUp := upstream(g)
			lca := ""
			for _, a := range nicUp {
				if contains(gpuUp, a) {
					lca = a
					break
				}
			}
			if lca == "" {
				continue // below different root ports
			}
			// The ports below the shared one carry the peer-to-peer
			// traffic: the switch's downstream ports on both sides.
			var ports []string
			for _, up := range [][]string{nicUp, gpuUp} {
				for _, a := range up {
					if a == lca {
						break
					}
					ports = append(ports, a)
				}
			}
			if len(ports) == 0 {
				continue
			}
			shares = true
			who := fmt.Sprintf("%s and GPU %s below %s", n, filepath.Base(g), filepath.Base(lca))
			var redirect, unread []string
			for _, p := range ports {
				a, ok := acs[p]
				if !ok {
					a = readACS(p)
					acs[p] = a
				}
				switch {
				case a.err != nil:
					unread = append(unread, a.err.Error())
				case a.has && a.ctl&(pciACSRR|pciACSCR) != 0:
					redirect = append(redirect, fmt.Sprintf("%s ACSCtl: %s", filepath.Base(p), acsString(a.ctl)))
				}
			}
			switch {
			case len(redirect) > 0:
				var fixes []string
				for _, p := range redirect {
					addr, _, _ := strings.Cut(p, " ")
					fixes = append(fixes, fmt.Sprintf("setpci -s %s ECAP_ACS+6.w=0000", addr))
				}
				c.add(Fail, fmt.Sprintf("%s: ACS redirects peer-to-peer traffic up to the root complex (%s): GPUDirect RDMA between them crosses the CPU or fails",
					who, strings.Join(redirect, "; ")),
					"disable ACS on the switch's downstream ports: in the BIOS (PCIe ACS control), or at every boot as root: `"+strings.Join(fixes, "; ")+
						"` (the kernel enables ACS when an IOMMU is on; with the IOMMU in translating mode disabling ACS breaks isolation, so use iommu=pt or leave it off on GPU nodes)")
			case len(unread) > 0:
				c.add(Skip, fmt.Sprintf("%s: could not run: %s", who, strings.Join(unread, "; ")), "")
			default:
				c.add(OK, who+": no ACS redirect on the ports between them", "")
			}
		}
		if !shares {
			c.add(OK, n.String()+": shares no PCIe switch with a GPU", "")
		}
	}
	return c.result("no RDMA device on PCI (software devices only)")
}

// acsRead is one bridge's ACS Control register, and whether it has ACS.
type acsRead struct {
	ctl uint16
	has bool
	err error
}

func readACS(dir string) acsRead {
	cfg, err := readConfig(dir)
	if err != nil {
		return acsRead{err: err}
	}
	ctl, has, err := cfg.acsControl()
	return acsRead{ctl: ctl, has: has, err: err}
}

// numaNodes counts the NUMA nodes of the node (/sys/devices/system/node),
// 0 when sysfs does not say (a kernel without NUMA).
func (e *Env) numaNodes() int {
	m, _ := filepath.Glob(e.sys("devices", "system", "node", "node[0-9]*"))
	return len(m)
}

// checkNUMA reports the NUMA node of each RDMA NIC and warns when a node
// of several NUMA nodes does not know it (numa_node -1: the firmware's
// ACPI tables give the slot no proximity domain), so that neither the
// driver nor a job launcher can put memory and threads near the NIC.
// rdmad's policy declares no NUMA placement, so there is nothing to
// compare the node with.
func checkNUMA(e *Env) Result {
	nics, r := pciNICs(e)
	if r != nil {
		return *r
	}
	nodes := e.numaNodes()
	var c collector
	for _, n := range nics {
		node, err := readInt(filepath.Join(n.dir, "numa_node"))
		cpus := readTrim(filepath.Join(n.dir, "local_cpulist"))
		switch {
		case err != nil:
			c.add(Skip, fmt.Sprintf("%s: no numa_node in sysfs (%v)", n, err), "")
		case nodes <= 1:
			c.add(OK, n.String()+": one NUMA node on this machine", "")
		case node < 0:
			c.add(Warn, fmt.Sprintf("%s: NUMA node unknown (numa_node -1) on a machine of %d NUMA nodes: the driver's memory and interrupts may land on the far socket", n, nodes),
				"update the BIOS or enable its ACPI SRAT / NUMA settings so that the slot has a proximity domain; until then pin RDMA jobs by hand (numactl --cpunodebind) to the socket the slot hangs off")
		default:
			msg := fmt.Sprintf("%s: NUMA node %d", n, node)
			if cpus != "" {
				msg += " (CPUs " + cpus + ")"
			}
			c.add(OK, msg, "")
		}
	}
	return c.result("no RDMA device on PCI (software devices only)")
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// checkGPUDirect warns when NVIDIA GPUs and RDMA NICs share the node but
// no GPUDirect RDMA module is loaded: nvidia_peermem (the NVIDIA driver's,
// 470 and later) or nv_peer_mem (Mellanox's older one). Without one,
// ibv_reg_mr of GPU memory fails and NCCL, UCX and MPI stage every
// transfer through host memory. Registration through dma-buf (CUDA 11.7
// and the open kernel modules on Linux 5.12 and later) needs neither, but
// a program chooses it, and sysfs cannot tell.
func checkGPUDirect(e *Env) Result {
	nics, r := pciNICs(e)
	if r != nil {
		return *r
	}
	gpus := e.gpus()
	switch {
	case len(gpus) == 0:
		return skip("no NVIDIA GPU on PCI")
	case len(nics) == 0:
		return skip("no RDMA device on PCI (software devices only)")
	}
	names := make([]string, len(gpus))
	for i, g := range gpus {
		names[i] = filepath.Base(g)
	}
	what := fmt.Sprintf("%d NVIDIA GPU(s) (%s)", len(gpus), strings.Join(names, ", "))
	for _, m := range []string{"nvidia_peermem", "nv_peer_mem"} {
		if _, err := os.Stat(e.sys("module", m)); err == nil {
			return Result{Verdict: OK, Message: fmt.Sprintf("%s and %s is loaded: RDMA NICs can register GPU memory", what, m)}
		}
	}
	if _, err := os.Stat(e.sys("module", "nvidia")); err != nil {
		return Result{Verdict: Warn, Message: what + " but the NVIDIA driver is not loaded (no /sys/module/nvidia)",
			Fix: "install and load the NVIDIA driver (modprobe nvidia), then modprobe nvidia_peermem"}
	}
	return Result{Verdict: Warn,
		Message: what + " but neither nvidia_peermem nor nv_peer_mem is loaded: GPUDirect RDMA registration of GPU memory fails unless the programs use dma-buf, which sysfs cannot show",
		Fix:     "modprobe nvidia_peermem, and add it to /etc/modules-load.d/ so that it loads at boot (it comes with the NVIDIA driver, 470 and later)"}
}
