// Package rusage reads this process's resource usage (getrusage(2)), as
// the benchmarks report it: CPU time, and how often its threads slept.
package rusage

import (
	"time"

	"golang.org/x/sys/unix"
)

// CPU returns the user+system CPU time the process used so far.
func CPU() time.Duration {
	ru := self()
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Sleeps returns how often the process's threads went to sleep so far
// (voluntary context switches): each is a wakeup later.
func Sleeps() int64 { return self().Nvcsw }

func self() unix.Rusage {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru
}
