package memlock

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/safefile"
	"github.com/rdmad/rdmad/internal/size"
)

// DefaultLimitsPath is where rdmad writes its pam_limits drop-in.
const DefaultLimitsPath = "/etc/security/limits.d/90-rdmad.conf"

// limitsHeader starts every file rdmad writes; RemoveLimits only removes
// files that start with it, and rdmad only overwrites such files. The
// package scripts (packaging/scripts) test for its first line, "# Managed
// by rdmad", before they remove the file: keep the two in step.
// The header names the configuration file rdmad runs with (header); the
// one of DefaultConfigPath is limitsHeader. A file is rdmad's if its first
// line starts with limitsMark, whatever file it names.
const limitsHeader = limitsMark + "/etc/rdmad/rdmad.toml.\n" + limitsHeader2

const (
	limitsMark    = "# Managed by rdmad: written from the memlock settings in "
	limitsHeader2 = "# Do not edit; rdmad overwrites this file. Change the configuration and run `rdmactl reload`.\n"
)

// DefaultConfigPath is the configuration file the header names when the
// caller names none (RenderLimits, WriteLimits).
const DefaultConfigPath = "/etc/rdmad/rdmad.toml"

// header is the header of a file written from the configuration at
// config. A name that would break the comment (a newline, a control
// character) is not written: only "rdmad.toml".
func header(config string) string {
	if config == "" {
		config = DefaultConfigPath
	}
	for _, r := range config {
		if r < 0x20 || r == 0x7f {
			config = "rdmad.toml"
			break
		}
	}
	return limitsMark + config + ".\n" + limitsHeader2
}

// maxLimitsFile bounds what rdmad reads of an existing file at the limits
// path: its own files are a few hundred bytes, anything larger is not
// rdmad's.
const maxLimitsFile = 64 << 10

// ErrNotOurs says that the file at the limits path was not written by rdmad
// (no rdmad header, or not a regular file): rdmad neither overwrites nor
// removes it.
var ErrNotOurs = errors.New("not written by rdmad")

// A Rule is one pam_limits memlock rule.
type Rule struct {
	// Domain is whom the rule applies to, in limits.conf(5) syntax (see
	// CheckDomain): "*" for everyone, "@rdma" for a group, a user name, or
	// a uid/gid range.
	Domain string
	// Soft and Hard are the limits; sizes are rounded up to KiB, the unit
	// limits.conf uses for memlock.
	Soft, Hard Size
}

// RenderLimits returns the drop-in content for rules, in order. It refuses
// any domain CheckDomain refuses, so that one rule is always exactly two
// lines, whoever calls it with whatever.
func RenderLimits(rules []Rule) ([]byte, error) { return RenderLimitsFrom(DefaultConfigPath, rules) }

// RenderLimitsFrom is RenderLimits for a file whose header names the
// configuration file config (the one rdmad runs with).
func RenderLimitsFrom(config string, rules []Rule) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(header(config))
	for _, r := range rules {
		if err := CheckDomain(r.Domain); err != nil {
			return nil, fmt.Errorf("memlock: limits rule: %w", err)
		}
		if r.Soft > r.Hard {
			return nil, fmt.Errorf("memlock: limits rule for %q: soft limit %s above hard limit %s (pam_limits would refuse logins)", r.Domain, r.Soft, r.Hard)
		}
		fmt.Fprintf(&b, "%s\tsoft\tmemlock\t%s\n", r.Domain, limitsValue(r.Soft))
		fmt.Fprintf(&b, "%s\thard\tmemlock\t%s\n", r.Domain, limitsValue(r.Hard))
	}
	return b.Bytes(), nil
}

// maxName is the longest user or group name rdmad writes (useradd's limit
// on most systems, and utmp's).
const maxName = 32

// CheckDomain reports whether d is a limits.conf(5) domain that applies to
// a memlock rule, and says what to write instead when it is not. Allowed:
//
//	"*"                    everyone
//	"name"                 a user
//	"@name"                the members of a group
//	"min:max" "min:" ":max"  a uid range (both ends included)
//	"@min:max" "@min:" "@:max" a gid range
//
// Names use the POSIX portable filename characters [A-Za-z0-9._-] and do
// not start with '-', at most 32 of them. "%group" is refused: pam_limits
// applies it to maxlogins only and would ignore it for memlock. Anything
// else, and in particular whitespace, '#' and control characters, which
// pam_limits would read as more fields, a comment or a new line, is
// refused: a domain is always one field of one line.
func CheckDomain(d string) error {
	if d == "" {
		return errors.New(`empty domain; use "*", "@group", a user name or a uid range such as "1000:"`)
	}
	if d == "*" {
		return nil
	}
	if strings.HasPrefix(d, "%") {
		return fmt.Errorf("%s: pam_limits applies %%group domains to maxlogins only, not to memlock; use \"@%s\" for a group", quote(d), safeTail(d[1:]))
	}
	body := strings.TrimPrefix(d, "@")
	what := "user"
	if body != d {
		what = "group"
	}
	if strings.Contains(body, ":") {
		return checkRange(d, body, what)
	}
	if msg := checkName(body); msg != "" {
		return fmt.Errorf("%s is not a limits.conf domain: the %s name %s; use \"*\", \"@group\", a user name or a uid range such as \"1000:\"", quote(d), what, msg)
	}
	return nil
}

func checkName(n string) string {
	switch {
	case n == "":
		return "is empty"
	case len(n) > maxName:
		return fmt.Sprintf("is longer than %d characters", maxName)
	case n[0] == '-':
		return "starts with '-'"
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("has %q at byte %d (names use A-Z a-z 0-9 . _ -)", c, i)
		}
	}
	return ""
}

// checkRange checks "min:max", "min:" or ":max" (uids, or gids after '@').
func checkRange(d, body, what string) error {
	id := "uid"
	if what == "group" {
		id = "gid"
	}
	lo, hi, _ := strings.Cut(body, ":")
	bad := func(why string) error {
		return fmt.Errorf("%s is not a limits.conf %s range: %s; write min:max, min: or :max with decimal %ss, e.g. \"1000:1999\"", quote(d), id, why, id)
	}
	if lo == "" && hi == "" {
		return bad("both ends are empty")
	}
	var l, h uint64
	for _, p := range []struct {
		s string
		v *uint64
	}{{lo, &l}, {hi, &h}} {
		if p.s == "" {
			continue
		}
		// Digits only: ParseUint alone would accept nothing else, but say
		// so before its error.
		for i := 0; i < len(p.s); i++ {
			if p.s[i] < '0' || p.s[i] > '9' {
				return bad(fmt.Sprintf("%q is not a number", p.s[i]))
			}
		}
		v, err := strconv.ParseUint(p.s, 10, 32)
		if err != nil || v == 1<<32-1 || len(p.s) > 10 {
			return bad("an id is out of range")
		}
		*p.v = v
	}
	if lo != "" && hi != "" && l > h {
		return bad("min is above max")
	}
	return nil
}

// quote shows a domain in an error: quoted with Go escapes (so a control
// character is visible and the message stays one line) and clipped.
func quote(d string) string {
	if len(d) > 64 {
		return strconv.Quote(d[:64]) + "..."
	}
	return strconv.Quote(d)
}

// safeTail is a name to suggest, or "group" when the name itself is bad.
func safeTail(n string) string {
	if checkName(n) == "" {
		return n
	}
	return "group"
}

func limitsValue(s Size) string {
	if s == Unlimited {
		return "unlimited"
	}
	// Rounded up without s+KiB-1, which wraps to 0 near the top of the
	// range (a size just below Unlimited would have become "0").
	v := uint64(s / size.KiB)
	if s%size.KiB != 0 {
		v++
	}
	return strconv.FormatUint(v, 10)
}

// WriteLimits writes the drop-in for rules to path if its content differs,
// and reports whether it changed the file. The file is replaced atomically
// (a new file in the same directory, fsync, rename), so a PAM session never
// reads half a file, and never written through a symlink. A file at path
// that rdmad did not write (no header, not a regular file, a symlink) is
// left alone and is an error wrapping ErrNotOurs: the admin decides.
func WriteLimits(path string, rules []Rule) (changed bool, err error) {
	return WriteLimitsFrom(path, DefaultConfigPath, rules)
}

// WriteLimitsFrom is WriteLimits for a file whose header names the
// configuration file config (the one rdmad runs with).
func WriteLimitsFrom(path, config string, rules []Rule) (changed bool, err error) {
	content, err := RenderLimitsFrom(config, rules)
	if err != nil {
		return false, err
	}
	old, _, err := readOurs(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, ErrNotOurs):
		return false, fmt.Errorf("memlock: %w; rdmad does not overwrite it: move it away or set [memlock] limits_file to another path", err)
	case err != nil:
		return false, fmt.Errorf("memlock: %w", err)
	case bytes.Equal(old, content):
		return false, nil
	}
	if err := writeAtomic(path, content, 0o644, "it comes with libpam-modules"); err != nil {
		return false, err
	}
	return true, nil
}

// IsOurs reports whether path is a regular file (not a symlink) that
// starts with rdmad's header: one RemoveLimits would remove.
func IsOurs(path string) bool {
	_, _, err := readOurs(path)
	return err == nil
}

// readOurs reads the file at path without following a symlink and returns
// it if it carries rdmad's header; otherwise an error (wrapping
// fs.ErrNotExist when there is none, ErrNotOurs when it is someone
// else's).
func readOurs(path string) ([]byte, fs.FileInfo, error) {
	b, fi, err := safefile.Read(path, safefile.Options{Max: maxLimitsFile, NoFollow: true})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, err
	case errors.Is(err, safefile.ErrSymlink), errors.Is(err, safefile.ErrNotRegular), errors.Is(err, safefile.ErrTooLarge):
		return nil, nil, fmt.Errorf("%w: %w", ErrNotOurs, err)
	case err != nil:
		return nil, nil, fmt.Errorf("read: %w", err)
	case !bytes.HasPrefix(b, []byte(limitsMark)):
		return nil, nil, fmt.Errorf("%s: %w (it lacks rdmad's header)", path, ErrNotOurs)
	}
	return b, fi, nil
}

// writeAtomic puts content at path with safefile.WriteAtomic (nothing is
// written through a symlink). dirHint says where the directory comes from,
// for the error when it is missing.
func writeAtomic(path string, content []byte, perm uint32, dirHint string) error {
	err := safefile.WriteAtomic(path, content, perm)
	var we *safefile.WriteError
	if errors.As(err, &we) && we.Create {
		return fmt.Errorf("memlock: write %s: %w (does %s exist? %s)", path, we.Err, filepath.Dir(path), dirHint)
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		// The old file is whole (the write was to a new file); what
		// the operator needs is where the room is missing.
		return fmt.Errorf("memlock: %w (the file system of %s is full: free space there; rdmad writes %s again at its next pass)", err, filepath.Dir(path), filepath.Base(path))
	}
	if err != nil {
		return fmt.Errorf("memlock: %w", err)
	}
	return nil
}

// syncDir makes a rename or unlink in dir durable.
func syncDir(dir string) { safefile.SyncDir(dir) }

// RemoveLimits removes the drop-in at path if rdmad wrote it (a regular
// file, not a symlink, that starts with rdmad's header) and reports whether
// it removed it. Nothing at path is (false, nil). Anything else at path is
// left alone and is an error wrapping ErrNotOurs.
func RemoveLimits(path string) (removed bool, err error) {
	_, fi, err := readOurs(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("memlock: remove %w; rdmad removes only files it wrote: remove it by hand if it should go", err)
	}
	// Unlink removes whatever the name points to now: make sure that is
	// still the file that was read (same inode, not swapped for an
	// admin's file or a symlink in between).
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("memlock: remove %s: %w", path, err)
	}
	if ino, dev := inodeOf(fi); st.Ino != ino || uint64(st.Dev) != dev {
		return false, fmt.Errorf("memlock: remove %s: %w (it was replaced while rdmad read it); look at it and run `rdmactl reload`", path, ErrNotOurs)
	}
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("memlock: remove %s: %w", path, err)
	}
	syncDir(filepath.Dir(path))
	return true, nil
}

func inodeOf(fi fs.FileInfo) (ino, dev uint64) {
	// os.File.Stat fills a syscall.Stat_t.
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return st.Ino, uint64(st.Dev)
}
