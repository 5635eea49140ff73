package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// madPort is one port's entry of /sys/class/infiniband_mad: the kernel's
// umadN (management datagrams: ibstat, ibnetdiscover, opensm, UCX's
// InfiniBand address resolution) and issmN (the port's IsSM bit, which a
// subnet manager sets while it runs) of ib_umad.
type madPort struct{ umad, issm string }

// madPorts maps "dev/port" to its umad and issm names; ok reports
// whether /sys/class/infiniband_mad exists (ib_umad is loaded).
func (e *Env) madPorts() (map[string]madPort, bool) {
	dir := e.sys("class", "infiniband_mad")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	m := map[string]madPort{}
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasPrefix(name, "umad") && !strings.HasPrefix(name, "issm") {
			continue // abi_version
		}
		dev := readTrim(filepath.Join(dir, name, "ibdev"))
		port := readTrim(filepath.Join(dir, name, "port"))
		if dev == "" || port == "" {
			continue
		}
		k := dev + "/" + port
		mp := m[k]
		if strings.HasPrefix(name, "umad") {
			mp.umad = name
		} else {
			mp.issm = name
		}
		m[k] = mp
	}
	return m, true
}

// charDev judges the node /dev/infiniband/<name>: "" when it is a
// character device the caller can open, else what is wrong with it and
// the fix. udev makes the nodes of the kernel's devices; a container
// sees only those passed to it.
func (e *Env) charDev(name, subsystem string) (verdict, msg, fix string) {
	path := e.dev("infiniband", name)
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return Fail, "/dev/infiniband/" + name + " is missing although the kernel has it",
			"let udev create it (udevadm trigger --subsystem-match=" + subsystem + "); in a container, pass /dev/infiniband through"
	case fi.Mode()&os.ModeCharDevice == 0:
		return Fail, "/dev/infiniband/" + name + " is not a character device",
			"remove it and let udev recreate it (udevadm trigger --subsystem-match=" + subsystem + ")"
	case unix.Access(path, unix.R_OK|unix.W_OK) != nil:
		return Warn, fmt.Sprintf("/dev/infiniband/%s exists but you (uid %d) cannot open it", name, os.Getuid()),
			"run it as root or check the udev rules of rdma-core (umad and issm are root's by default, rdma_cm is everyone's)"
	}
	return "", "/dev/infiniband/" + name, ""
}

// checkUmad checks, for every InfiniBand port, the umad and issm nodes of
// ib_umad: without umad no management tool (ibstat, ibnetdiscover,
// perfquery), no subnet manager on this node and no UCX InfiniBand
// transport works; without issm opensm cannot announce itself. A RoCE
// port has them too, but nothing of RoCE needs them.
func checkUmad(e *Env) Result {
	devs, r := devicesOrSkip(e)
	if r != nil {
		return *r
	}
	mad, loaded := e.madPorts()
	var c collector
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer != "InfiniBand" {
				continue
			}
			k := d.Name + "/" + strconv.Itoa(p.Port)
			mp := mad[k]
			if !loaded || mp.umad == "" {
				c.add(Fail, k+" has no umad device (no entry in /sys/class/infiniband_mad): ibstat, opensm and UCX cannot reach the port",
					"modprobe ib_umad (and add it to /etc/modules-load.d/ so that it loads at boot)")
				continue
			}
			var bad []string
			for _, n := range []string{mp.umad, mp.issm} {
				if n == "" {
					continue
				}
				if v, msg, fix := e.charDev(n, "infiniband_mad"); v != "" {
					c.add(v, k+": "+msg, fix)
					bad = append(bad, n)
				}
			}
			if mp.issm == "" {
				c.add(Warn, k+" has "+mp.umad+" but no issm device: a subnet manager cannot run on this port", "reload ib_umad (modprobe -r ib_umad && modprobe ib_umad)")
				continue
			}
			if len(bad) == 0 {
				c.add(OK, fmt.Sprintf("%s: /dev/infiniband/%s, /dev/infiniband/%s", k, mp.umad, mp.issm), "")
			}
		}
	}
	return c.result("no InfiniBand ports (umad and issm serve InfiniBand's management tools and subnet manager)")
}

// checkRDMACM checks /dev/infiniband/rdma_cm, rdma_ucm's node: every
// program that connects through RDMA-CM (rdma_connect, NCCL and UCX over
// RoCE, NVMe-oF and SMB Direct tools, rping, ib_write_bw -R) opens it.
func checkRDMACM(e *Env) Result {
	if _, r := devicesOrSkip(e); r != nil {
		return *r
	}
	if _, err := os.Stat(e.sys("class", "misc", "rdma_cm")); err != nil {
		return Result{Verdict: Fail, Message: "no rdma_cm device (no /sys/class/misc/rdma_cm): programs that connect through RDMA-CM (rdma_cm, NCCL and UCX over RoCE, rping) fail",
			Fix: "modprobe rdma_ucm (and add it to /etc/modules-load.d/ so that it loads at boot)"}
	}
	if v, msg, fix := e.charDev("rdma_cm", "misc"); v != "" {
		return Result{Verdict: v, Message: msg, Fix: fix}
	}
	return Result{Verdict: OK, Message: "/dev/infiniband/rdma_cm"}
}
