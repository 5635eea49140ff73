// Package bus serves rdmad's state on the D-Bus system bus as
// org.rdmad.Agent1: properties with PropertiesChanged, one child object per
// RDMA device under an ObjectManager, signals for link, policy and peer
// state changes, and the methods Reload, Apply and Probe for root and the
// admin group (the access table of daemon/access).
// docs/DBUS.md is its reference.
//
// The service reads published snapshots (daemon/state) in its own
// goroutine and never blocks the daemon: when the bus is slow it emits the
// difference to the latest snapshot, skipping the ones in between. When the
// bus is absent or the name is taken, rdmad runs on without D-Bus, reports
// the error as a component's health and tries again with backoff.
package bus

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/busconn"
)

// Options configure Run.
type Options struct {
	// Store is read for snapshots; Changed drives the signals. Required.
	Store state.Reader
	// Backend serves the methods: the operations of the service contract
	// (daemon/service), as the Unix socket API serves them. An operation
	// it cannot do answers an error wrapping errors.ErrUnsupported, which
	// the caller gets as ErrNotSupported. Required.
	Backend service.Backend
	// Fresh, when set, is called before a getter of the agent's peer
	// figures (Peers, PeerFigures, GetAll of the interface) serves them:
	// the daemon's peer manager builds figures only when a reader asks
	// (issue #29 item 2). It returns once Store holds figures no older
	// than the manager's publish period, or within a bound of its own.
	Fresh func(ctx context.Context)
	// Roles returns the access roles in force (daemon/access, the same
	// as the socket API's); it is asked on every method call, so a reload
	// takes effect at once. Nil admits root only.
	Roles func() access.Roles
	// Logger logs connects, losses and refused calls; nil discards.
	Logger *slog.Logger
	// Report receives the component's health: apitype.OK once the name is
	// owned, apitype.Error or apitype.Unavailable with the reason otherwise.
	// It is called from Run's goroutine and must not block for long. Nil
	// reports nothing.
	Report func(st string, err error)
	// MinBackoff and MaxBackoff bound the wait between connection
	// attempts (defaults 1s and 30s).
	MinBackoff, MaxBackoff time.Duration
	// ProbeTimeout bounds one Probe call (default DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// Counters, when set, counts the refused calls (for the metrics).
	Counters *Counters
}

// DefaultProbeTimeout bounds a Probe call when Options.ProbeTimeout is
// zero. A one-shot probe normally answers within 1 s plus two [probe]
// peer_timeout; the bound stays below the 25 s that D-Bus clients (libdbus,
// sd-bus, busctl) wait for a reply by default, so that the caller reads
// rdmad's error rather than a NoReply.
const DefaultProbeTimeout = 20 * time.Second

// connectTimeout bounds connecting, authenticating and requesting the name.
const connectTimeout = 10 * time.Second

// minViewGap bounds how often the service builds a view and its signals:
// whatever publishes (a loopback probe every 10 ms, a storm of policy
// passes, the peers), the bus costs at most ten views a second, and the
// newest snapshot is always the one built next. A view of 10,000 peers
// takes about 2 ms (BenchmarkPeersPublish10000).
const minViewGap = 100 * time.Millisecond

// Run serves org.rdmad.Agent1 on the system bus (DBUS_SYSTEM_BUS_ADDRESS, or
// the standard socket) until ctx is done, then releases the name, closes the
// connection and returns nil. A missing bus, a taken name or a lost
// connection is reported through o.Report and retried with backoff; it
// never makes Run return. Run returns an error only for invalid Options.
func Run(ctx context.Context, o Options) error {
	if o.Store == nil || o.Backend == nil {
		return errors.New("dbus: Run needs Options.Store and Options.Backend")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Report == nil {
		o.Report = func(string, error) {}
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(30*time.Second, o.MinBackoff)
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	s := &server{o: o, h: newHandler(o.Backend, o.Logger)}
	s.h.freshen, s.h.load = o.Fresh, o.Store.Load
	if o.Roles != nil {
		s.h.roles = o.Roles
	}
	s.h.probeTimeout = o.ProbeTimeout
	if o.Counters != nil {
		s.h.gate.counters = o.Counters
	}
	wait := o.MinBackoff
	var lastErr string
	for {
		owned, err := s.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if owned {
			// The name was ours for a while: the next failure starts the
			// backoff from the bottom again.
			wait = o.MinBackoff
		}
		st := apitype.Error
		if errors.Is(err, fs.ErrNotExist) {
			st = apitype.Unavailable
		}
		o.Report(st, err)
		if err.Error() != lastErr {
			o.Logger.Warn("D-Bus unavailable; rdmad runs without it and retries", "err", err, "retry", wait)
			lastErr = err.Error()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(wait*2, o.MaxBackoff)
	}
}

// A server is Run's state across sessions.
type server struct {
	o Options
	h *handler
}

// session connects once and serves until the connection or the name is
// lost or ctx is done. owned reports whether it held the name.
func (s *server) session(ctx context.Context) (owned bool, err error) {
	// A machine without a system bus is told apart before the view is
	// built: the retries there (every 30 s at most) build nothing.
	addr, err := busconn.SystemBusAddress()
	if err != nil {
		return false, connectError(err)
	}
	// The objects are served from the moment the connection exists, so
	// they are exported before RequestName: a client that sees the name
	// appear finds them.
	cur := newView(s.o.Store.Load())
	s.h.cur.Store(cur)

	// godbus runs each method call on a goroutine of its own: the
	// session waits, last, for the calls that reach the backend, which
	// see their context cancelled with the connection.
	defer s.h.calls.Drain()
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(connectTimeout, cancel)
	conn, err := s.connect(connCtx, addr)
	if err != nil {
		timer.Stop()
		return false, connectError(err)
	}
	defer conn.Close()
	// NameLost and NameAcquired come unicast from the bus; the channel is
	// bounded and read below.
	sigs := make(chan *dbus.Signal, 16)
	conn.Signal(sigs)

	reply, err := conn.RequestName(Name, dbus.NameFlagDoNotQueue)
	timer.Stop()
	if err != nil {
		var de dbus.Error
		if errors.As(err, &de) && de.Name == ErrAccessDenied {
			return false, fmt.Errorf("dbus: request name %s: %w; install org.rdmad.Agent1.conf in /usr/share/dbus-1/system.d/ and run rdmad as root", Name, err)
		}
		return false, fmt.Errorf("dbus: request name %s: %w", Name, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		return false, fmt.Errorf("dbus: request name %s: %s: another rdmad (or another program) owns it; find it with: busctl status %s", Name, reply, Name)
	}
	s.o.Report(apitype.OK, nil)
	s.o.Logger.Info("D-Bus name acquired", "name", Name, "unique", conn.Names()[0])
	// No ReleaseName on the way out: cancelling ctx closes the connection
	// (WithContext), and the bus drops the name of a closed connection at
	// once.

	var built time.Time
	for {
		changed := s.o.Store.Changed()
		// Publish the latest snapshot and emit the difference to the last
		// one published. Snapshots published while this ran are coalesced
		// into the next round.
		if snap := s.o.Store.Load(); snap != cur.snap {
			next := newView(snap)
			built = time.Now()
			s.h.cur.Store(next)
			for _, sig := range changes(cur, next) {
				if err := conn.Emit(sig.path, sig.name, sig.body...); err != nil {
					return true, fmt.Errorf("dbus: emit %s on %s: %w", sig.name, sig.path, err)
				}
			}
			cur = next
		}
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-conn.Context().Done():
			return true, errBusLost
		case sig, ok := <-sigs:
			if !ok {
				return true, errBusLost
			}
			if nameLost(sig) {
				return true, fmt.Errorf("dbus: lost the name %s", Name)
			}
		case <-changed:
			if wait := minViewGap - time.Since(built); wait > 0 {
				select {
				case <-ctx.Done():
					return true, ctx.Err()
				case <-conn.Context().Done():
					return true, errBusLost
				case <-time.After(wait):
				}
			}
		}
	}
}

// busName is the sender the bus daemon stamps on its own messages. No
// client can send as it: the bus sets every message's sender to the
// sending connection's unique name (":1.42").
const busName = "org.freedesktop.DBus"

// nameLost reports whether sig is the bus daemon's NameLost for rdmad's
// name. Any client may send rdmad a unicast signal of the same path,
// member and body (issue #41: a loop of them made rdmad give up its name
// and report itself degraded); only the sender tells the bus's own apart.
func nameLost(sig *dbus.Signal) bool {
	return sig.Sender == busName && sig.Path == "/org/freedesktop/DBus" &&
		sig.Name == "org.freedesktop.DBus.NameLost" && len(sig.Body) == 1 && sig.Body[0] == Name
}

var errBusLost = errors.New("dbus: connection to the system bus lost; is dbus.service running?")

// connectError makes err say what an admin can do about it.
func connectError(err error) error {
	addr := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS")
	if addr == "" {
		addr = "unix:path=" + busconn.SystemBusSocket
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("dbus: connect to the system bus at %s: %w; is dbus installed and dbus.service running?", addr, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("dbus: connect to the system bus at %s: %w; start dbus.service", addr, err)
	}
	return fmt.Errorf("dbus: connect to the system bus at %s: %w", addr, err)
}

// connect is dbus.Connect through internal/busconn's guard: a message
// godbus cannot decode is dropped (and counted) instead of closing the
// connection.
func (s *server) connect(ctx context.Context, addr string) (*dbus.Conn, error) {
	return busconn.Connect(ctx, addr, s.h.gate.dropped, dbus.WithHandler(s.h), dbus.WithContext(ctx))
}
