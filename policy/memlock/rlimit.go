package memlock

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/memlimit"
)

// A Limit is a soft/hard RLIMIT_MEMLOCK pair (internal/memlimit, the one
// reader of the limit, which the doctor uses too).
type Limit = memlimit.Limit

// Observe returns the process's RLIMIT_MEMLOCK.
func Observe() (Limit, error) {
	l, err := memlimit.Own()
	if err != nil {
		return Limit{}, fmt.Errorf("memlock: %w", err)
	}
	return l, nil
}

// Set sets the process's RLIMIT_MEMLOCK to exactly l. Raising the hard limit
// needs CAP_SYS_RESOURCE; the error then says what to change.
func Set(l Limit) error {
	if l.Soft > l.Hard {
		return fmt.Errorf("memlock: set RLIMIT_MEMLOCK to %v: soft limit above hard limit: %w", l, unix.EINVAL)
	}
	cur, err := Observe()
	if err != nil {
		return err
	}
	r := unix.Rlimit{Cur: uint64(l.Soft), Max: uint64(l.Hard)}
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &r, nil); err != nil {
		return setError(fmt.Sprintf("set RLIMIT_MEMLOCK to %v", l), cur, err)
	}
	return nil
}

// Raise makes the soft RLIMIT_MEMLOCK at least want, raising the hard limit
// too if needed. It never lowers a limit. It returns the limit in effect
// afterwards.
func Raise(want Size) (Limit, error) {
	cur, err := Observe()
	if err != nil {
		return Limit{}, err
	}
	if cur.Soft >= want {
		return cur, nil
	}
	next := Limit{Soft: want, Hard: max(cur.Hard, want)}
	r := unix.Rlimit{Cur: uint64(next.Soft), Max: uint64(next.Hard)}
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &r, nil); err != nil {
		return cur, setError(fmt.Sprintf("raise RLIMIT_MEMLOCK to %s", want), cur, err)
	}
	return next, nil
}

// setError explains a failed prlimit. EPERM means the hard limit would grow
// without CAP_SYS_RESOURCE: under systemd the fix is the unit's
// LimitMEMLOCK=, which sets both limits before rdmad starts.
func setError(op string, cur Limit, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("memlock: %s: the hard limit is %s and rdmad lacks CAP_SYS_RESOURCE to raise it: %w; "+
			"raise LimitMEMLOCK= in rdmad.service (e.g. `systemctl edit rdmad` with [Service] LimitMEMLOCK=infinity) "+
			"or lower memlock in rdmad.toml", op, cur.Hard, err)
	}
	return fmt.Errorf("memlock: %s (currently %v): %w", op, cur, err)
}
