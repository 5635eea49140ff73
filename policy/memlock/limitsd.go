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

	"github.com/rdmad/rdmad/internal/size"
)

// DefaultLimitsPath is where rdmad writes its pam_limits drop-in.
const DefaultLimitsPath = "/etc/security/limits.d/90-rdmad.conf"

// limitsHeader starts every file rdmad writes; RemoveLimits only removes
// files that start with it.
const limitsHeader = "# Managed by rdmad: written from the memlock settings in /etc/rdmad/rdmad.toml.\n" +
	"# Do not edit; rdmad overwrites this file. Change rdmad.toml and run `rdmactl reload`.\n"

// A Rule is one pam_limits memlock rule.
type Rule struct {
	// Domain is whom the rule applies to, in limits.conf(5) syntax: "*"
	// for everyone, "@rdma" for a group, or a user name.
	Domain string
	// Soft and Hard are the limits; sizes are rounded up to KiB, the unit
	// limits.conf uses for memlock.
	Soft, Hard Size
}

// RenderLimits returns the drop-in content for rules, in order.
func RenderLimits(rules []Rule) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(limitsHeader)
	for _, r := range rules {
		if err := validDomain(r.Domain); err != nil {
			return nil, err
		}
		if r.Soft > r.Hard {
			return nil, fmt.Errorf("memlock: limits rule for %q: soft limit %s above hard limit %s (pam_limits would refuse logins)", r.Domain, r.Soft, r.Hard)
		}
		fmt.Fprintf(&b, "%s\tsoft\tmemlock\t%s\n", r.Domain, limitsValue(r.Soft))
		fmt.Fprintf(&b, "%s\thard\tmemlock\t%s\n", r.Domain, limitsValue(r.Hard))
	}
	return b.Bytes(), nil
}

func validDomain(d string) error {
	if d == "" {
		return errors.New(`memlock: limits rule: empty domain; use "*", "@group" or a user name`)
	}
	if strings.ContainsAny(d, " \t\r\n#") {
		return fmt.Errorf("memlock: limits rule: domain %q contains whitespace or '#'", d)
	}
	return nil
}

func limitsValue(s Size) string {
	if s == Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(uint64((s+size.KiB-1)/size.KiB), 10)
}

// WriteLimits writes the drop-in for rules to path if its content differs,
// and reports whether it changed the file. The file is replaced atomically
// (temporary file, fsync, rename), so a PAM session never reads half a
// file.
func WriteLimits(path string, rules []Rule) (changed bool, err error) {
	content, err := RenderLimits(rules)
	if err != nil {
		return false, err
	}
	old, err := os.ReadFile(path)
	if err == nil && bytes.Equal(old, content) {
		return false, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("memlock: read %s: %w", path, err)
	}
	if err := writeAtomic(path, content, 0o644); err != nil {
		return false, err
	}
	return true, nil
}

func writeAtomic(path string, content []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("memlock: write %s: %w (does %s exist? it comes with libpam-modules)", path, err, dir)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(content); err != nil {
		return fmt.Errorf("memlock: write %s: %w", f.Name(), err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("memlock: chmod %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("memlock: sync %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("memlock: close %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("memlock: replace %s: %w", path, err)
	}
	// Make the rename durable.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// RemoveLimits removes the drop-in at path if rdmad wrote it (it starts with
// rdmad's header) and reports whether it removed it. A file an admin wrote
// is left alone and reported as an error.
func RemoveLimits(path string) (removed bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("memlock: read %s: %w", path, err)
	}
	if !bytes.HasPrefix(b, []byte(limitsHeader)) {
		return false, fmt.Errorf("memlock: remove %s: not written by rdmad (no rdmad header); remove it by hand if it should go", path)
	}
	if err := os.Remove(path); err != nil {
		return false, fmt.Errorf("memlock: remove %s: %w", path, err)
	}
	return true, nil
}
