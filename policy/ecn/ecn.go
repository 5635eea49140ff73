// Package ecn observes and applies DCQCN, the congestion control of RoCE v2,
// per priority: whether the notification point (NP: the receiver, which
// answers ECN-marked packets with CNPs) and the reaction point (RP: the
// sender, which slows down on CNPs) are enabled on each of the 8 priorities.
//
// mlx5 (ConnectX-4 and later, with MLNX_OFED or a kernel whose mlx5 exposes
// it) keeps them in sysfs, one file per priority holding 0 or 1:
//
//	/sys/class/net/<netdev>/ecn/roce_np/enable/<prio>
//	/sys/class/net/<netdev>/ecn/roce_rp/enable/<prio>
//
// Other drivers have no ecn directory: Observe and Apply return an error
// matching errors.ErrUnsupported for them. Writing needs root
// (CAP_NET_ADMIN does not suffice for sysfs; rdmad runs as root). The files
// are never opened through a symlink: the netdev's directory is found
// through /sys/class/net (whose entries are the kernel's symlinks into
// /sys/devices), and every component below it is opened with O_NOFOLLOW.
//
// Only a real mlx5 NIC proves this layout; the tests use a fixture tree.
package ecn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Priorities is the number of priorities (0-7) ECN is enabled on.
const Priorities = 8

// Points of DCQCN, as the sysfs directories name them.
const (
	NP = "roce_np" // notification point
	RP = "roce_rp" // reaction point
)

// State is what is enabled on one netdev: the priorities, ascending, on
// which the notification point and the reaction point are enabled.
type State struct {
	NP []int
	RP []int
}

// Want is what a policy wants: nil leaves a point unmanaged, an empty
// slice disables it on every priority.
type Want struct {
	NP []int
	RP []int
}

// Options configure New.
type Options struct {
	// Root holds sys/ ("/" normally), as inventory.Reader's Root; ""
	// means "/".
	Root string
}

// A Client reads and writes the ecn sysfs files below its root.
type Client struct{ root string }

// New returns a Client. It does not touch the file system.
func New(opts Options) *Client {
	root := opts.Root
	if root == "" {
		root = "/"
	}
	return &Client{root: root}
}

// Dir returns the ecn directory of netdev, for messages.
func (c *Client) Dir(netdev string) string {
	return filepath.Join(c.root, "sys", "class", "net", netdev, "ecn")
}

// An unsupportedError says that a netdev has no ecn directory.
type unsupportedError struct{ netdev, dir string }

func (e *unsupportedError) Error() string {
	return fmt.Sprintf("ecn: %s has no %s: its driver does not expose DCQCN in sysfs (mlx5 RoCE netdevs do); ECN cannot be managed on it", e.netdev, e.dir)
}

func (e *unsupportedError) Is(target error) bool { return target == errors.ErrUnsupported }

// IsUnsupported reports whether err says the netdev has no ecn directory.
func IsUnsupported(err error) bool { return errors.Is(err, errors.ErrUnsupported) }

// Observe returns the priorities on which the notification and reaction
// points of netdev are enabled.
func (c *Client) Observe(netdev string) (State, error) {
	var s State
	err := c.withECN(netdev, func(ecn int) error {
		var err error
		if s.NP, err = c.readPoint(ecn, netdev, NP); err != nil {
			return err
		}
		s.RP, err = c.readPoint(ecn, netdev, RP)
		return err
	})
	return s, err
}

// Apply makes the managed points of netdev enabled on exactly the wanted
// priorities, writing only the files whose value differs. It returns the
// files it wrote (relative to the ecn directory, e.g. "roce_np/enable/3").
func (c *Client) Apply(netdev string, want Want) ([]string, error) {
	var wrote []string
	err := c.withECN(netdev, func(ecn int) error {
		for _, pt := range []struct {
			name string
			prio []int
		}{{NP, want.NP}, {RP, want.RP}} {
			if pt.prio == nil {
				continue
			}
			for _, p := range pt.prio {
				if p < 0 || p >= Priorities {
					return fmt.Errorf("%s: priority %d is out of range 0-7", pt.name, p)
				}
			}
			dir, err := openDir(ecn, filepath.Join(pt.name, "enable"))
			if err != nil {
				return fmt.Errorf("open %s: %w%s", filepath.Join(c.Dir(netdev), pt.name, "enable"), err, hint(err))
			}
			for p := 0; p < Priorities; p++ {
				rel := filepath.Join(pt.name, "enable", strconv.Itoa(p))
				on, err := readFlag(dir, p)
				if err != nil {
					unix.Close(dir)
					return fmt.Errorf("read %s: %w%s", filepath.Join(c.Dir(netdev), rel), err, hint(err))
				}
				if on == slices.Contains(pt.prio, p) {
					continue
				}
				v := "0"
				if !on {
					v = "1"
				}
				if err := writeFlag(dir, p, v); err != nil {
					unix.Close(dir)
					return fmt.Errorf("write %s to %s: %w%s", v, filepath.Join(c.Dir(netdev), rel), err, hint(err))
				}
				wrote = append(wrote, rel)
			}
			unix.Close(dir)
		}
		return nil
	})
	return wrote, err
}

// hint says what to do about a failed write.
func hint(err error) string {
	switch {
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return " (writing sysfs needs root: run rdmad as root)"
	case errors.Is(err, unix.EROFS):
		return " (sysfs is read-only here, as in rdmad.service's sandbox, where rdmad-ecn@.service writes it)"
	case errors.Is(err, unix.ELOOP):
		return " (it is a symlink, which rdmad never writes through: remove it)"
	}
	return ""
}

// withECN opens the ecn directory of netdev and runs f on it.
func (c *Client) withECN(netdev string, f func(ecn int) error) error {
	if netdev == "" || netdev == "." || netdev == ".." || strings.ContainsAny(netdev, "/\x00") {
		return fmt.Errorf("ecn: invalid netdev name %q", netdev)
	}
	ndPath := filepath.Join(c.root, "sys", "class", "net", netdev)
	// /sys/class/net/<netdev> is the kernel's symlink into /sys/devices:
	// the one symlink followed.
	nd, err := unix.Open(ndPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("ecn: %s does not exist (the netdev is gone): %w", ndPath, unix.ENODEV)
	}
	if err != nil {
		return fmt.Errorf("ecn: open %s: %w", ndPath, err)
	}
	defer unix.Close(nd)
	ecn, err := openDir(nd, "ecn")
	if errors.Is(err, unix.ENOENT) {
		return &unsupportedError{netdev: netdev, dir: c.Dir(netdev)}
	}
	if err != nil {
		return fmt.Errorf("ecn: open %s: %w%s", c.Dir(netdev), err, hint(err))
	}
	defer unix.Close(ecn)
	if err := f(ecn); err != nil {
		return fmt.Errorf("ecn: %s: %w", netdev, err)
	}
	return nil
}

// readPoint returns the priorities enabled in <point>/enable/ of ecn.
func (c *Client) readPoint(ecn int, netdev, point string) ([]int, error) {
	dir, err := openDir(ecn, filepath.Join(point, "enable"))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w%s", filepath.Join(c.Dir(netdev), point, "enable"), err, hint(err))
	}
	defer unix.Close(dir)
	on := []int{}
	for p := 0; p < Priorities; p++ {
		v, err := readFlag(dir, p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w%s", filepath.Join(c.Dir(netdev), point, "enable", strconv.Itoa(p)), err, hint(err))
		}
		if v {
			on = append(on, p)
		}
	}
	return on, nil
}

// openDir opens rel below dir one component at a time, refusing symlinks.
func openDir(dir int, rel string) (int, error) {
	fd := dir
	for _, name := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != dir {
			unix.Close(fd)
		}
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				// O_NOFOLLOW|O_DIRECTORY on a symlink gives ENOTDIR.
				var st unix.Stat_t
				if unix.Fstatat(dir, rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					return -1, unix.ELOOP
				}
			}
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// readFlag reads the file of priority p in dir: "0" or "1".
func readFlag(dir, p int) (bool, error) {
	fd, err := unix.Openat(dir, strconv.Itoa(p), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	f := os.NewFile(uintptr(fd), strconv.Itoa(p))
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return false, err
	} else if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	buf := make([]byte, 16)
	n, err := f.Read(buf)
	if err != nil {
		return false, err
	}
	switch s := strings.TrimSpace(string(buf[:n])); s {
	case "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("holds %q, want 0 or 1", s)
	}
}

// writeFlag writes v to the file of priority p in dir with one write(2),
// as sysfs attributes expect. No O_CREAT: a missing file is an error;
// O_NONBLOCK: a FIFO planted in its place fails (ENXIO) instead of
// blocking the main loop.
func writeFlag(dir, p int, v string) error {
	fd, err := unix.Openat(dir, strconv.Itoa(p), unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), strconv.Itoa(p))
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		}
		return err
	}
	_, werr := f.Write([]byte(v))
	cerr := f.Close()
	if werr != nil {
		return werr
	}
	return cerr
}

// Format renders enabled priorities for status: "3", "3,4" or "none".
func Format(prio []int) string {
	if len(prio) == 0 {
		return "none"
	}
	s := make([]string, len(prio))
	for i, p := range prio {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// String renders the managed points of s for a policy target
// ("np=3 rp=3"); np and rp say which points are managed.
func (s State) String(np, rp bool) string {
	var parts []string
	if np {
		parts = append(parts, "np="+Format(s.NP))
	}
	if rp {
		parts = append(parts, "rp="+Format(s.RP))
	}
	return strings.Join(parts, " ")
}
