package ecn

// Writing under systemd. rdmad.service has ProtectKernelTunables=yes, so
// /sys is read-only in rdmad's mount namespace and a write to an ecn file
// fails with EROFS. ReadWritePaths= cannot open the files to rdmad itself:
// it needs concrete paths when the unit starts, the real directory behind
// /sys/class/net/<netdev> is host-specific, and netdevs come and go; and
// ReadWritePaths=/sys/devices would open every device attribute (PCI
// remove, driver knobs) to root in the sandbox. So the writes move to a
// template unit, rdmad-ecn@<netdev>.service, started when they are needed:
// its ReadWritePaths=-/sys/class/net/%I/ecn is resolved by systemd when
// that instance starts, after the netdev exists, and opens exactly that
// netdev's ecn directory. rdmad puts what to write in a want file,
// WantDir/<netdev> (root's, 0600, in a directory only root writes); the
// unit runs `rdmad --write-ecn <netdev>`, which is WriteWanted. See
// docs/SECURITY.md, "ECN under systemd".

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/safefile"
)

// WantDir is where rdmad leaves want files for rdmad-ecn@.service: below
// rdmad.service's RuntimeDirectory=, which only root writes.
const WantDir = "/run/rdmad/ecn"

// maxWant bounds a want file: two lines of eight priorities each fit in
// 40 bytes.
const maxWant = 64

// ValidNetdev refuses a name that cannot be a netdev's, or that would mean
// something else as a path component or a unit instance: only
// [A-Za-z0-9_.:-], at most 15 bytes (IFNAMSIZ-1), not "." or "..".
func ValidNetdev(name string) error {
	if name == "" || len(name) > 15 || name == "." || name == ".." {
		return fmt.Errorf("ecn: invalid netdev name %q: want 1 to 15 of A-Z a-z 0-9 _ . : -, not . or ..", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-') {
			return fmt.Errorf("ecn: invalid netdev name %q: byte %#02x at %d is not one of A-Z a-z 0-9 _ . : -", name, c, i)
		}
	}
	return nil
}

// UnitName returns the instance of rdmad-ecn@.service for netdev, its name
// escaped as systemd-escape does (a "-" is \x2d, a leading "." \x2e), so
// that %I in the unit is netdev again. netdev must be ValidNetdev.
func UnitName(netdev string) string {
	var b strings.Builder
	b.WriteString("rdmad-ecn@")
	for i := 0; i < len(netdev); i++ {
		c := netdev[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ':' || (c == '.' && i > 0) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteString(".service")
	return b.String()
}

// FormatWant renders w as a want file: one line per managed point,
// "np=<priorities>" or "rp=<priorities>", as Format writes them.
func FormatWant(w Want) []byte {
	var b strings.Builder
	if w.NP != nil {
		fmt.Fprintf(&b, "np=%s\n", Format(w.NP))
	}
	if w.RP != nil {
		fmt.Fprintf(&b, "rp=%s\n", Format(w.RP))
	}
	return []byte(b.String())
}

// ParseWant parses a want file strictly: each line "np=" or "rp=" once,
// then "none" or distinct ascending priorities 0-7 separated by commas,
// each line ending in a newline, nothing else; at least one point.
func ParseWant(b []byte) (Want, error) {
	var w Want
	if len(b) > maxWant {
		return w, fmt.Errorf("want file: %d bytes, more than %d", len(b), maxWant)
	}
	s := string(b)
	if !strings.HasSuffix(s, "\n") {
		return w, errors.New("want file: does not end in a newline (truncated?)")
	}
	for i, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		key, val, ok := strings.Cut(line, "=")
		var dst *[]int
		switch {
		case ok && key == "np":
			dst = &w.NP
		case ok && key == "rp":
			dst = &w.RP
		default:
			return Want{}, fmt.Errorf("want file line %d: %q is not np=... or rp=...", i+1, line)
		}
		if *dst != nil {
			return Want{}, fmt.Errorf("want file line %d: %s given twice", i+1, key)
		}
		prio, err := parsePriorities(val)
		if err != nil {
			return Want{}, fmt.Errorf("want file line %d: %s: %w", i+1, key, err)
		}
		*dst = prio
	}
	if w.NP == nil && w.RP == nil {
		return Want{}, errors.New("want file: names neither np nor rp")
	}
	return w, nil
}

func parsePriorities(s string) ([]int, error) {
	if s == "none" {
		return []int{}, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if len(f) != 1 || f[0] < '0' || f[0] > '7' {
			return nil, fmt.Errorf("%q is not a priority 0-7 (want \"none\" or e.g. \"3,4\")", f)
		}
		p := int(f[0] - '0')
		if len(out) > 0 && p <= out[len(out)-1] {
			return nil, fmt.Errorf("priorities %q are not distinct and ascending", s)
		}
		out = append(out, p)
	}
	return out, nil
}

// WriteWantFile puts w in dir/netdev for the unit to read: dir is created
// 0700 if missing and must be root's (or the caller's) and not writable by
// group or others; the file is replaced atomically, mode 0600, never
// written through a symlink.
func WriteWantFile(dir, netdev string, w Want) error {
	if err := ValidNetdev(netdev); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("ecn: create %s: %w", dir, err)
	}
	if err := checkDir(dir); err != nil {
		return err
	}
	if err := safefile.WriteAtomic(filepath.Join(dir, netdev), FormatWant(w), 0o600); err != nil {
		return fmt.Errorf("ecn: write %s: %w", filepath.Join(dir, netdev), err)
	}
	return nil
}

// RemoveWantFile removes dir/netdev once the unit ran; a missing file is
// fine.
func RemoveWantFile(dir, netdev string) error {
	if err := ValidNetdev(netdev); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, netdev)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("ecn: remove %s: %w", filepath.Join(dir, netdev), err)
	}
	return nil
}

// trustedOwner reports whether uid may own a want file or its directory:
// root, or the effective user of this process (the tests; under systemd
// both rdmad and the unit are root, so that is root only).
func trustedOwner(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// checkDir refuses a want directory that is a symlink, or that others
// than root could put a file in.
func checkDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("ecn: want directory %s: %w", dir, err)
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fmt.Errorf("ecn: want directory %s is a symlink; rdmad creates it as a directory: remove it", dir)
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("ecn: want directory %s is not a directory", dir)
	case !trustedOwner(st.Uid) || st.Mode&0o022 != 0:
		return fmt.Errorf("ecn: want directory %s is owned by uid %d with mode %04o; only root may write it (rdmad creates it 0700): remove it", dir, st.Uid, st.Mode&0o7777)
	}
	return nil
}

// ReadWantFile reads dir/netdev as WriteWantFile left it: the directory
// and the file root's and not writable by group or others, the file
// regular, not a symlink, at most 64 bytes, and ParseWant's format.
func ReadWantFile(dir, netdev string) (Want, error) {
	if err := ValidNetdev(netdev); err != nil {
		return Want{}, err
	}
	if err := checkDir(dir); err != nil {
		return Want{}, err
	}
	path := filepath.Join(dir, netdev)
	b, fi, err := safefile.Read(path, safefile.Options{Max: maxWant, NoFollow: true})
	if err != nil {
		return Want{}, fmt.Errorf("ecn: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Want{}, fmt.Errorf("ecn: %s: no owner in its fstat", path)
	}
	if !trustedOwner(st.Uid) || st.Mode&0o022 != 0 {
		return Want{}, fmt.Errorf("ecn: %s is owned by uid %d with mode %04o; a want file is root's and not writable by others (rdmad writes it 0600): refused", path, st.Uid, st.Mode&0o7777)
	}
	w, err := ParseWant(b)
	if err != nil {
		return Want{}, fmt.Errorf("ecn: %s: %w", path, err)
	}
	return w, nil
}

// WriteWanted is `rdmad --write-ecn netdev`: it reads what to write from
// dir/netdev (ReadWantFile), writes the ecn files of netdev below the
// client's root that differ (Apply), reads them back and returns a line
// for the journal. Only the ecn files of that netdev are touched; an error
// says which step failed.
func (c *Client) WriteWanted(dir, netdev string) (string, error) {
	if err := ValidNetdev(netdev); err != nil {
		return "", err
	}
	w, err := ReadWantFile(dir, netdev)
	if err != nil {
		return "", err
	}
	np, rp := w.NP != nil, w.RP != nil
	desired := State{NP: w.NP, RP: w.RP}.String(np, rp)
	wrote, err := c.Apply(netdev, w)
	if err != nil {
		return "", err
	}
	got, err := c.Observe(netdev)
	if err != nil {
		return "", fmt.Errorf("read back: %w", err)
	}
	if actual := got.String(np, rp); actual != desired {
		return "", fmt.Errorf("ecn: %s: wrote %s but reads back %s (the driver refused a value?)", netdev, desired, actual)
	}
	if len(wrote) == 0 {
		return fmt.Sprintf("ecn %s: already %s", netdev, desired), nil
	}
	slices.Sort(wrote)
	return fmt.Sprintf("ecn %s: now %s (wrote %d files: %s)", netdev, desired, len(wrote), strings.Join(wrote, " ")), nil
}

// ErrNotStarted marks an error of a unit start that created no job (the
// system bus is not there yet, at boot): the reconciler tries again at its
// next pass instead of waiting for a change, since nothing ran and nothing
// reached the journal.
var ErrNotStarted = errors.New("the unit could not be started")

// IsReadOnly reports whether err is a write refused because the file
// system is mounted read-only: rdmad's sandbox (ProtectKernelTunables=).
func IsReadOnly(err error) bool { return errors.Is(err, unix.EROFS) }
