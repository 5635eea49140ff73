package inventory

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
)

// pciAddr matches a PCI function's sysfs name, domain:bus:device.function
// ("0000:03:00.0"); the host bridges above the root ports ("pci0000:00")
// and everything else in /sys/devices do not.
var pciAddr = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// pcieLink reads the PCIe link of the PCI function behind the RDMA device
// at dir (/sys/class/infiniband/<dev>), or nil when it has none: a
// software device (rxe has a "parent" file naming its netdev, and its
// device link, when there is one, leads to that netdev's device, whose
// link is not the RDMA device's), a device not on PCI, or a function
// without PCIe link attributes (conventional PCI).
//
// A virtual function's own link registers are reserved (sysfs shows
// "Unknown" and 0): its traffic crosses its physical function's link, so
// that one is read. The path maximum is the smallest of the function's
// maxima and those of every PCI function above it in the resolved sysfs
// path (switch ports, the root port): the link cannot train faster than
// its slot, and a Gen5 card in a Gen4 slot is expected at Gen4.
func pcieLink(dir string) *apitype.PCIeLink {
	if _, err := os.Lstat(filepath.Join(dir, "parent")); err == nil {
		return nil
	}
	fn, err := filepath.EvalSymlinks(filepath.Join(dir, "device"))
	if err != nil || !pciAddr.MatchString(filepath.Base(fn)) {
		return nil
	}
	if pf, err := filepath.EvalSymlinks(filepath.Join(fn, "physfn")); err == nil && pciAddr.MatchString(filepath.Base(pf)) {
		fn = pf
	}
	maxSpeed, speedOK := readLinkSpeed(fn, "max_link_speed")
	maxWidth, widthOK := readLinkWidth(fn, "max_link_width")
	if !speedOK && !widthOK {
		return nil
	}
	l := &apitype.PCIeLink{Address: filepath.Base(fn), MaxSpeed: maxSpeed, MaxWidth: maxWidth,
		PathMaxSpeed: maxSpeed, PathMaxWidth: maxWidth}
	l.Speed, _ = readLinkSpeed(fn, "current_link_speed")
	l.Width, _ = readLinkWidth(fn, "current_link_width")
	// The bridge that lowered the speed is named before the one that
	// lowered the width: a slot of an older generation is the common
	// case, and one name must do.
	var speedLimit, widthLimit string
	for up := filepath.Dir(fn); pciAddr.MatchString(filepath.Base(up)); up = filepath.Dir(up) {
		if s, ok := readLinkSpeed(up, "max_link_speed"); ok && s > 0 && (l.PathMaxSpeed == 0 || s < l.PathMaxSpeed) {
			l.PathMaxSpeed, speedLimit = s, filepath.Base(up)
		}
		if w, ok := readLinkWidth(up, "max_link_width"); ok && w > 0 && (l.PathMaxWidth == 0 || w < l.PathMaxWidth) {
			l.PathMaxWidth, widthLimit = w, filepath.Base(up)
		}
	}
	l.Limit = speedLimit
	if l.Limit == "" {
		l.Limit = widthLimit
	}
	return l
}

// readLinkSpeed reads a link speed attribute ("16.0 GT/s PCIe", "8 GT/s",
// "2.5 GT/s"; "Unknown" and anything else is 0) in GT/s. ok reports
// whether the file exists.
func readLinkSpeed(dir, name string) (gts float64, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	return parseLinkSpeed(string(b)), true
}

func parseLinkSpeed(s string) float64 {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "GT/s" {
		return 0
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v <= 0 {
		return 0
	}
	return v
}

// readLinkWidth reads a link width attribute ("16"; 0 unknown). ok
// reports whether the file exists.
func readLinkWidth(dir, name string) (width int, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0, false
	}
	return parseLinkWidth(string(b)), true
}

func parseLinkWidth(s string) int {
	// Kernels print the number; "x16", as lspci writes it, is read too.
	v, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(s), "x"))
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// rateWidth returns the link width of a port's rate string: "4X" of
// "100 Gb/sec (4X EDR)", "" when it names none.
func rateWidth(rate string) string {
	i := strings.IndexByte(rate, '(')
	if i < 0 {
		return ""
	}
	f := strings.Fields(strings.TrimSuffix(rate[i+1:], ")"))
	if len(f) == 0 {
		return ""
	}
	w := strings.TrimSuffix(f[0], ")")
	if n, err := strconv.Atoi(strings.TrimSuffix(w, "X")); err != nil || n <= 0 || !strings.HasSuffix(w, "X") {
		return ""
	}
	return w
}

// netdevSpeed reads /sys/class/net/<netdev>/speed in Mb/s: 0 when it is
// unknown (-1 while the link is down; the read fails on some drivers).
func (r Reader) netdevSpeed(netdev string) int {
	if netdev == "" || strings.ContainsAny(netdev, "/\x00") || netdev == "." || netdev == ".." {
		return 0
	}
	v, err := strconv.Atoi(readString(r.path("sys/class/net", netdev, "speed")))
	if err != nil || v <= 0 {
		return 0
	}
	return v
}
