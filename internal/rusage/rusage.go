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
// (voluntary context switches): each is a wakeup later, so the benchmarks
// report its rate as wakeups/s. Voluntary switches rather than all of
// them: an involuntary switch is a thread preempted while it could run
// (the machine's other load, not a wakeup rdmad asked for), and
// schedstat's run count (/proc/self/task/*/schedstat) counts both.
// getrusage rather than /proc/self/task/*/status: it sums every thread the
// process had, also those that exited during the measurement.
func Sleeps() int64 { return self().Nvcsw }

func self() unix.Rusage {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru
}
