package daemon

import (
	"fmt"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// A notifier speaks the sd_notify protocol. Without NOTIFY_SOCKET (not
// started by systemd) every call is a no-op.
type notifier struct{}

func (notifier) send(lines ...string) error {
	_, err := sd.SdNotify(false, strings.Join(lines, "\n"))
	return err
}

func (n notifier) ready(status string) error {
	return n.send(sd.SdNotifyReady, "STATUS="+status)
}

// reloading tells systemd a reload started; systemd ≥ 253 wants the
// monotonic timestamp with it.
func (n notifier) reloading() error {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	usec := ts.Sec*1_000_000 + ts.Nsec/1000
	return n.send(sd.SdNotifyReloading, fmt.Sprintf("MONOTONIC_USEC=%d", usec))
}

func (n notifier) stopping() error { return n.send(sd.SdNotifyStopping, "STATUS=stopping") }

func (n notifier) watchdog() error { return n.send(sd.SdNotifyWatchdog) }

// watchdogInterval returns how often to ping: half of WATCHDOG_USEC, or 0
// when systemd did not ask for pings.
func watchdogInterval() time.Duration {
	d, err := sd.SdWatchdogEnabled(false)
	if err != nil || d <= 0 {
		return 0
	}
	return d / 2
}
