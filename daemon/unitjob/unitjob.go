// Package unitjob starts a systemd unit over the system bus and waits for
// its job to finish, as `systemctl start` does: Subscribe (systemd sends
// job signals only to subscribed clients), StartUnit with mode "replace",
// then the JobRemoved signal of the job it returned, whose result says
// whether the unit ran ("done") or not. rdmad uses it for
// rdmad-ecn@<netdev>.service, whose ExecStart does the work, so a oneshot
// unit's job ends when its process exited.
package unitjob

import (
	"context"
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/internal/busconn"
)

const (
	dest    = "org.freedesktop.systemd1"
	path    = dbus.ObjectPath("/org/freedesktop/systemd1")
	manager = "org.freedesktop.systemd1.Manager"
	// busName and busPath are the bus daemon's own: the sender it stamps
	// on its messages, which no client can send as.
	busName = "org.freedesktop.DBus"
	busPath = dbus.ObjectPath("/org/freedesktop/DBus")
)

// ErrNoBus is wrapped by Start's error when the system bus could not be
// reached at all (not installed, not started yet at boot): no job exists,
// so trying again later is harmless.
var ErrNoBus = errors.New("system bus unreachable")

// A Failed job: the unit was started and its job ended with Result
// ("failed", "timeout", "dependency", ...).
type Failed struct {
	Unit   string
	Result string
}

func (e *Failed) Error() string {
	return fmt.Sprintf("%s: job result %q (see journalctl -u %s)", e.Unit, e.Result, e.Unit)
}

// Start starts unit and waits until its job is removed or ctx ends. It
// opens a connection of its own to the system bus (DBUS_SYSTEM_BUS_ADDRESS
// if set) and closes it before returning: it runs rarely (once per change
// of what the unit is to do), and so never shares the D-Bus service's
// connection, which restarts on its own schedule.
func Start(ctx context.Context, unit string) error {
	conn, err := connect(ctx)
	if err != nil {
		return fmt.Errorf("start %s: connect to the system bus: %w (%w)", unit, err, ErrNoBus)
	}
	defer conn.Close()
	// Subscribe to JobRemoved before StartUnit, so the signal of a job
	// that ends before StartUnit's reply arrives is not missed.
	if err := conn.AddMatchSignalContext(ctx, dbus.WithMatchObjectPath(path), dbus.WithMatchInterface(manager), dbus.WithMatchMember("JobRemoved")); err != nil {
		return fmt.Errorf("start %s: add match for JobRemoved: %w", unit, err)
	}
	// Only systemd's JobRemoved says how the job ended: any client of the
	// bus may send a signal of the same path, member and body, to every
	// subscriber or to this connection alone (issue #41: a forged "done"
	// or "failed" for an apply that did not happen). The bus stamps each
	// message with its sender's unique name, so a job result counts only
	// from the unique name that owns org.freedesktop.systemd1, followed
	// through NameOwnerChanged, which counts only from the bus itself.
	if err := conn.AddMatchSignalContext(ctx, dbus.WithMatchSender(busName), dbus.WithMatchObjectPath(busPath),
		dbus.WithMatchInterface(busName), dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, dest)); err != nil {
		return fmt.Errorf("start %s: add match for NameOwnerChanged: %w", unit, err)
	}
	sigs := make(chan *dbus.Signal, 64)
	conn.Signal(sigs)
	defer conn.RemoveSignal(sigs)
	var owner string
	if err := conn.BusObject().CallWithContext(ctx, busName+".GetNameOwner", 0, dest).Store(&owner); err != nil {
		return fmt.Errorf("start %s: find the owner of %s (is systemd PID 1?): %w", unit, dest, err)
	}
	obj := conn.Object(dest, path)
	if err := obj.CallWithContext(ctx, manager+".Subscribe", 0).Err; err != nil {
		return fmt.Errorf("start %s: %s.Subscribe: %w", unit, manager, err)
	}
	var job dbus.ObjectPath
	if err := obj.CallWithContext(ctx, manager+".StartUnit", 0, unit, "replace").Store(&job); err != nil {
		return fmt.Errorf("start %s: %s.StartUnit: %w", unit, manager, err)
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("start %s: job %s did not finish: %w", unit, job, context.Cause(ctx))
		case s, ok := <-sigs:
			if !ok {
				return fmt.Errorf("start %s: the bus connection closed while job %s ran", unit, job)
			}
			if s.Sender == busName && s.Path == busPath && s.Name == busName+".NameOwnerChanged" && len(s.Body) == 3 {
				if name, _ := s.Body[0].(string); name == dest {
					owner, _ = s.Body[2].(string)
				}
				continue
			}
			if s.Sender != owner || owner == "" || s.Name != manager+".JobRemoved" || s.Path != path || len(s.Body) != 4 {
				continue
			}
			if p, _ := s.Body[1].(dbus.ObjectPath); p != job {
				continue
			}
			result, _ := s.Body[3].(string)
			if result != "done" {
				return &Failed{Unit: unit, Result: result}
			}
			return nil
		}
	}
}

// connect opens a private connection to the system bus, bounded by ctx.
func connect(ctx context.Context) (*dbus.Conn, error) {
	addr, err := busconn.SystemBusAddress()
	if err != nil {
		return nil, err
	}
	// Through the guard: anyone may send this connection a signal (the
	// JobRemoved it waits for is broadcast), and one godbus cannot decode
	// would otherwise close it mid-job.
	return busconn.Connect(ctx, addr, nil, dbus.WithContext(ctx))
}
