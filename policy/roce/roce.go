// Package roce observes and applies the RoCE defaults that RDMA-CM uses for
// connections whose application does not choose them: the default ToS
// (DSCP<<2 | ECN, which selects the traffic class and thus the PFC priority)
// and the default RoCE mode (v1 or v2).
//
// They live in configfs, /sys/kernel/config/rdma_cm/<dev>/ports/<port>/
// default_roce_tos and default_roce_mode. The <dev> directory (a configfs
// group) must be created with mkdir before the files exist. The kernel keeps
// the values on its cma device, not on the group (cma_configfs.c stores them
// with cma_set_default_roce_tos/cma_set_default_gid_type; removing the group
// only drops the configfs view), so this package removes a group again if it
// created it, as mlnx-tools' cma_roce_tos does. The values are lost when the
// device goes away (driver reload, VF re-creation, `rdma link del`): that is
// why rdmad reapplies them on every infiniband uevent.
package roce

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultRoot is where configfs is mounted.
const DefaultRoot = "/sys/kernel/config"

// A Mode is a RoCE mode as the kernel spells it in default_roce_mode.
type Mode string

// The modes the kernel accepts (ib_cache_gid_type_str).
const (
	ModeV1 Mode = "IB/RoCE v1"
	ModeV2 Mode = "RoCE v2"
)

// ParseMode accepts the kernel's spellings and the short forms "v1", "v2",
// "roce v1", case-insensitively.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "v1", "roce v1", "rocev1", "ib/roce v1":
		return ModeV1, nil
	case "v2", "roce v2", "rocev2":
		return ModeV2, nil
	}
	return "", fmt.Errorf("roce: unknown RoCE mode %q; use \"RoCE v2\" (or \"v2\") or \"IB/RoCE v1\" (or \"v1\")", s)
}

// Settings are the RDMA-CM defaults of one port.
type Settings struct {
	ToS  uint8
	Mode Mode
}

// Options configure New.
type Options struct {
	// Root is the configfs mount point; "" means DefaultRoot.
	Root string
	// Mount mounts configfs at Root when it is not mounted yet. It is
	// implied when Root is "".
	Mount bool
}

// A Client reads and writes rdma_cm configfs attributes.
type Client struct {
	root  string
	mount bool
}

// New returns a Client. It does not touch the file system yet.
func New(opts Options) *Client {
	c := &Client{root: opts.Root, mount: opts.Mount}
	if c.root == "" {
		c.root, c.mount = DefaultRoot, true
	}
	return c
}

// Observe returns the RDMA-CM defaults of port on dev.
func (c *Client) Observe(dev string, port int) (Settings, error) {
	var s Settings
	err := c.withPort("observe", dev, port, func(dir string) error {
		tos, err := readAttr(dir, "default_roce_tos")
		if err != nil {
			return err
		}
		n, err := strconv.ParseUint(tos, 0, 8)
		if err != nil {
			return fmt.Errorf("parse default_roce_tos %q: %w", tos, err)
		}
		mode, err := readAttr(dir, "default_roce_mode")
		if err != nil {
			return err
		}
		s = Settings{ToS: uint8(n), Mode: Mode(mode)}
		return nil
	})
	return s, err
}

// Apply sets the RDMA-CM defaults of port on dev, writing only the
// attributes that differ.
func (c *Client) Apply(dev string, port int, want Settings) error {
	if want.Mode != ModeV1 && want.Mode != ModeV2 {
		return fmt.Errorf("roce: apply on %s port %d: invalid mode %q; use ParseMode", dev, port, want.Mode)
	}
	return c.withPort("apply", dev, port, func(dir string) error {
		tos, err := readAttr(dir, "default_roce_tos")
		if err != nil {
			return err
		}
		if tos != strconv.Itoa(int(want.ToS)) {
			if err := writeAttr(dir, "default_roce_tos", strconv.Itoa(int(want.ToS))); err != nil {
				return err
			}
		}
		mode, err := readAttr(dir, "default_roce_mode")
		if err != nil {
			return err
		}
		if Mode(mode) != want.Mode {
			if err := writeAttr(dir, "default_roce_mode", string(want.Mode)); err != nil {
				if errors.Is(err, unix.EINVAL) {
					return fmt.Errorf("%w (the port does not support %s; Soft-RoCE and most current NICs only do RoCE v2)", err, want.Mode)
				}
				return err
			}
		}
		return nil
	})
}

// withPort runs f on the port directory of dev, creating the device group
// first if needed and removing it afterwards if it created it.
func (c *Client) withPort(op, dev string, port int, f func(dir string) error) (err error) {
	wrap := func(err error) error {
		return fmt.Errorf("roce: %s RDMA-CM defaults of %s port %d: %w", op, dev, port, err)
	}
	if dev == "" || strings.ContainsAny(dev, "/\x00") || dev == "." || dev == ".." {
		return wrap(fmt.Errorf("invalid device name %q", dev))
	}
	if port < 1 {
		return wrap(fmt.Errorf("invalid port %d: ports count from 1", port))
	}
	cm, err := c.rdmaCM()
	if err != nil {
		return wrap(err)
	}
	group := filepath.Join(cm, dev)
	created := false
	switch err := os.Mkdir(group, 0o755); {
	case err == nil:
		created = true
	case errors.Is(err, fs.ErrExist):
	case errors.Is(err, unix.ENODEV), errors.Is(err, unix.EINVAL):
		// make_cma_dev refuses names it has no cma device for (ENODEV
		// since 5.x, EINVAL before).
		return wrap(fmt.Errorf("rdma_cm knows no RDMA device %q (check `rdma dev`; the device may be gone or not bound to a RoCE netdev): %w", dev, err))
	default:
		return wrap(fmt.Errorf("create configfs group %s: %w", group, err))
	}
	if created {
		defer func() {
			// The values stay on the kernel's cma device; only the view
			// goes.
			if rerr := unix.Rmdir(group); rerr != nil && err == nil {
				err = wrap(fmt.Errorf("remove configfs group %s: %w", group, rerr))
			}
		}()
	}
	dir := filepath.Join(group, "ports", strconv.Itoa(port))
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return wrap(fmt.Errorf("no port %d (ports: %s)", port, listPorts(filepath.Join(group, "ports"))))
	} else if err != nil {
		return wrap(err)
	}
	if err := f(dir); err != nil {
		return wrap(err)
	}
	return nil
}

func listPorts(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return "none"
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// rdmaCM returns the rdma_cm directory, mounting configfs first if allowed
// and needed.
func (c *Client) rdmaCM() (string, error) {
	cm := filepath.Join(c.root, "rdma_cm")
	if _, err := os.Stat(cm); err == nil {
		return cm, nil
	}
	mounted, err := isConfigfsMount(c.root)
	if err != nil {
		return "", err
	}
	if !mounted {
		if !c.mount {
			return "", fmt.Errorf("configfs is not mounted at %s (mount -t configfs none %s)", c.root, c.root)
		}
		if err := unix.Mount("configfs", c.root, "configfs", 0, ""); err != nil {
			return "", fmt.Errorf("mount configfs at %s: %w (is CONFIG_CONFIGFS_FS enabled? rdmad needs CAP_SYS_ADMIN to mount it, or mount it via sys-kernel-config.mount)", c.root, err)
		}
		if _, err := os.Stat(cm); err == nil {
			return cm, nil
		}
	}
	return "", fmt.Errorf("%s does not exist: load the rdma_cm module (modprobe rdma_cm) or list it in /etc/modules-load.d/", cm)
}

// isConfigfsMount reports whether a configfs is mounted at dir.
func isConfigfsMount(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	return mountinfoHas(bufio.NewScanner(f), abs, "configfs")
}

// mountinfoHas reports whether mountinfo lists a file system of fstype at
// mountpoint. Fields (proc(5)): ID parent major:minor root mountpoint
// options [optional...] - fstype source superoptions.
func mountinfoHas(sc *bufio.Scanner, mountpoint, fstype string) (bool, error) {
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || unescapeMount(fields[4]) != mountpoint {
			continue
		}
		for i := 6; i+1 < len(fields); i++ {
			if fields[i] == "-" {
				if fields[i+1] == fstype {
					return true, nil
				}
				break
			}
		}
	}
	return false, sc.Err()
}

// unescapeMount undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readAttr(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeAttr writes value with one write(2), as configfs attributes expect.
// No O_CREATE: a missing attribute is an error, not a new file.
func writeAttr(dir, name, value string) error {
	p := filepath.Join(dir, name)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, werr := f.Write([]byte(value))
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", value, name, werr)
	}
	if cerr != nil {
		return fmt.Errorf("write %q to %s: %w", value, name, cerr)
	}
	return nil
}
