// Package cgroupmem reads the memory limit of the calling process's cgroup
// and its ancestors: under systemd, the unit's MemoryMax= (and any slice's
// above it). Registered memory is charged to the cgroup like any other, so a
// memory pool sized past the limit gets the daemon killed by the OOM
// killer, and restarted, and killed again. The MR pool asks here first and
// refuses, with a message naming MemoryMax=, what would not fit.
//
// Both hierarchies are read: cgroup v2 (memory.max, memory.current) and
// the v1 memory controller (memory.limit_in_bytes, memory.usage_in_bytes).
// A process outside any limited cgroup has no limit.
package cgroupmem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// A Limit is the tightest memory limit over a cgroup and its ancestors.
type Limit struct {
	// Limited is false when no cgroup on the path has a limit.
	Limited bool
	// Max is the limit in bytes and Current the usage charged to that same
	// cgroup; Cgroup names it (the path below the hierarchy's root).
	Max, Current uint64
	Cgroup       string
}

// Available is what can still be charged before the limit: Max less Current
// (0 when the cgroup is already at or past it). Meaningless unless Limited.
func (l Limit) Available() uint64 {
	if l.Current >= l.Max {
		return 0
	}
	return l.Max - l.Current
}

// Own reads the limit of the calling process, with the file systems at
// their usual places.
func Own() (Limit, error) { return Read("/proc/self/cgroup", "/sys/fs/cgroup") }

// Read reads the limit of the process whose /proc/PID/cgroup is procCgroup,
// with the cgroup file systems mounted below root (root itself is the v2
// hierarchy on a unified system; on a hybrid or v1 one, v2 is root/unified
// and the memory controller root/memory). The limit with the least room
// left wins, as the kernel charges every ancestor.
func Read(procCgroup, root string) (Limit, error) {
	data, err := os.ReadFile(procCgroup)
	if err != nil {
		return Limit{}, fmt.Errorf("cgroupmem: read %s: %w", procCgroup, err)
	}
	var v2, v1 string
	haveV2, haveV1 := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// hierarchy-ID:controller-list:path
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			v2, haveV2 = f[2], true
		case hasController(f[1], "memory"):
			v1, haveV1 = f[2], true
		}
	}
	var best Limit
	consider := func(l Limit) {
		if l.Limited && (!best.Limited || l.Available() < best.Available()) {
			best = l
		}
	}
	if haveV1 {
		l, err := walk(filepath.Join(root, "memory"), v1, "memory.limit_in_bytes", "memory.usage_in_bytes")
		if err != nil {
			return Limit{}, err
		}
		consider(l)
	}
	if haveV2 {
		base := root
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
			base = filepath.Join(root, "unified") // hybrid: v2 without controllers
		}
		l, err := walk(base, v2, "memory.max", "memory.current")
		if err != nil {
			return Limit{}, err
		}
		consider(l)
	}
	return best, nil
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// walk reads maxFile and curFile in the cgroup at cg below base and in each
// of its ancestors, and returns the one with the least room. A cgroup
// without the files (controller not enabled there, or not mounted) has no
// limit of its own.
func walk(base, cg, maxFile, curFile string) (Limit, error) {
	cg = path.Clean("/" + cg)
	var best Limit
	for {
		dir := filepath.Join(base, filepath.FromSlash(cg))
		max, ok, err := readValue(filepath.Join(dir, maxFile))
		if err != nil {
			return Limit{}, err
		}
		if ok {
			cur, _, err := readValue(filepath.Join(dir, curFile))
			if err != nil {
				return Limit{}, err
			}
			l := Limit{Limited: true, Max: max, Current: cur, Cgroup: cg}
			if !best.Limited || l.Available() < best.Available() {
				best = l
			}
		}
		if cg == "/" {
			return best, nil
		}
		cg = path.Dir(cg)
	}
}

// unlimitedV1 is at or above what the v1 controller reports for "no
// limit" (PAGE_COUNTER_MAX pages, rounded to the page: about 2^63 bytes).
const unlimitedV1 = math.MaxInt64 / 2

// readValue reads one number, "max" (v2's no limit) or a v1 value that
// large, as no limit: ok false. An absent file is no limit too.
func readValue(name string) (v uint64, ok bool, err error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("cgroupmem: read %s: %w", name, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false, nil
	}
	v, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("cgroupmem: %s: %q is not a number of bytes", name, s)
	}
	if v >= unlimitedV1 {
		return 0, false, nil
	}
	return v, true, nil
}
