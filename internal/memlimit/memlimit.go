// Package memlimit reads RLIMIT_MEMLOCK, the locked-memory limit memory
// registration is bound by: the process's own (prlimit, for the policy that
// raises it) or any process's from its /proc/PID/limits (for the doctor,
// which checks rdmad's and the caller's). It is the one reader of the limit
// below policy/memlock and doctor, which may not import each other.
package memlimit

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/size"
)

// A Limit is a soft/hard RLIMIT_MEMLOCK pair. The kernel enforces the soft
// limit; an unprivileged process may raise its soft limit up to the hard
// limit, and may lower but not raise its hard limit.
type Limit struct {
	Soft, Hard size.Size
}

func (l Limit) String() string { return fmt.Sprintf("soft %s, hard %s", l.Soft, l.Hard) }

// Own returns the calling process's RLIMIT_MEMLOCK.
func Own() (Limit, error) {
	var r unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, nil, &r); err != nil {
		return Limit{}, fmt.Errorf("read RLIMIT_MEMLOCK: %w", err)
	}
	return Limit{Soft: size.Size(r.Cur), Hard: size.Size(r.Max)}, nil
}

// memlockLine starts the line of RLIMIT_MEMLOCK in /proc/PID/limits.
const memlockLine = "Max locked memory"

// ReadProc reads the RLIMIT_MEMLOCK of a process from path, its
// /proc/PID/limits (or a copy of one): the "Max locked memory" line, in
// bytes or "unlimited".
func ReadProc(path string) (Limit, error) {
	f, err := os.Open(path)
	if err != nil {
		return Limit{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, memlockLine) {
			continue
		}
		fs := strings.Fields(strings.TrimPrefix(line, memlockLine))
		if len(fs) < 2 {
			break
		}
		var l Limit
		if l.Soft, err = parse(fs[0]); err == nil {
			l.Hard, err = parse(fs[1])
		}
		if err != nil {
			return Limit{}, fmt.Errorf("parse %s: %q: %w", path, line, err)
		}
		return l, nil
	}
	if err := sc.Err(); err != nil {
		return Limit{}, fmt.Errorf("read %s: %w", path, err)
	}
	return Limit{}, fmt.Errorf("%s has no %s line", path, memlockLine)
}

// parse reads one field of the line: bytes, or "unlimited".
func parse(s string) (size.Size, error) {
	if s == "unlimited" {
		return size.Unlimited, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return size.Size(v), err
}
