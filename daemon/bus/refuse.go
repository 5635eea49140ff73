package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/internal/busconn"
	"github.com/rdmad/rdmad/internal/throttle"
)

// The bus policy lets every local user send the guarded methods (a static
// file cannot know the admin group), so anyone can make rdmad refuse: one
// process sent 52,100 Reload calls in 10 s, and a WARN per refusal was
// 1.8 MB/s of log, past journald's per-service rate limit, after which
// journald dropped rdmad's real messages. These bound what that costs.
const (
	// refusalLogEvery lets one refusal line per uid through in this
	// interval, with the count of those held back (refused_unlogged).
	refusalLogEvery = 10 * time.Second
	// callBurst and callRate are each non-admin uid's budget of guarded
	// calls: a burst, then so many a second. Calls past it are refused
	// before the access table or the backend is asked.
	callBurst = 32
	callRate  = 4
	// maxCredCache bounds the senders whose credentials are kept.
	maxCredCache = 4096
)

// Refusal reasons, the label of rdmad_dbus_calls_refused_total.
const (
	RefusedDenied     = "denied"     // the access table refused the caller
	RefusedBudget     = "budget"     // the caller's uid was over its call budget
	RefusedUnverified = "unverified" // the bus could not say who the caller is
	// RefusedUndecodable: a message godbus could not decode, dropped
	// before it reached godbus (internal/busconn).
	RefusedUndecodable = "undecodable"
)

// Counters counts what the D-Bus service refused. The daemon passes one to
// Run and to the metrics (rdmad_dbus_calls_refused_total).
type Counters struct {
	denied, budget, unverified, undecodable atomic.Uint64
}

// Refused returns the refused calls by reason.
func (c *Counters) Refused() map[string]uint64 {
	if c == nil {
		return nil
	}
	return map[string]uint64{RefusedDenied: c.denied.Load(), RefusedBudget: c.budget.Load(), RefusedUnverified: c.unverified.Load(), RefusedUndecodable: c.undecodable.Load()}
}

func (c *Counters) add(reason string) {
	switch reason {
	case RefusedDenied:
		c.denied.Add(1)
	case RefusedBudget:
		c.budget.Add(1)
	case RefusedUnverified:
		c.unverified.Add(1)
	case RefusedUndecodable:
		c.undecodable.Add(1)
	}
}

// A gate is the guarded methods' defence against floods: the credentials
// of each sender asked once, a budget per uid, a refusal log per uid.
type gate struct {
	log      *slog.Logger
	counters *Counters
	lines    *throttle.Log[uint32]
	budget   *throttle.Budget[uint32]

	mu sync.Mutex
	// creds holds each sender's credentials, for one connection to the
	// bus: the bus captured them when the sender connected and they never
	// change, and a unique name is never given twice on one bus, so the
	// answer stays right for as long as it is kept. A new connection
	// (a restarted bus) starts afresh.
	conn  *dbus.Conn
	creds map[string]*credLookup
}

// A credLookup is one sender's GetConnectionCredentials: the calls that
// arrive while it is asked wait for its answer rather than asking again.
type credLookup struct {
	done   chan struct{}
	caller access.Caller
	err    error
}

func newGate(log *slog.Logger) *gate {
	return &gate{log: log, counters: &Counters{}, lines: throttle.NewLog[uint32](refusalLogEvery),
		budget: throttle.NewBudget[uint32](callRate, callBurst), creds: map[string]*credLookup{}}
}

// caller returns who sent c, asking the bus once per sender.
func (g *gate) caller(c call) (access.Caller, error) {
	g.mu.Lock()
	if g.conn != c.conn || len(g.creds) >= maxCredCache {
		g.conn, g.creds = c.conn, map[string]*credLookup{}
	}
	l, ok := g.creds[c.sender]
	if !ok {
		l = &credLookup{done: make(chan struct{})}
		g.creds[c.sender] = l
	}
	g.mu.Unlock()
	if !ok {
		l.caller, l.err = callerOf(c)
		if l.err != nil {
			// A failure is not kept: the next call asks again.
			g.mu.Lock()
			if g.creds[c.sender] == l {
				delete(g.creds, c.sender)
			}
			g.mu.Unlock()
		}
		close(l.done)
		return l.caller, l.err
	}
	var gone <-chan struct{}
	if c.conn != nil {
		gone = c.conn.Context().Done()
	}
	select {
	case <-l.done:
		return l.caller, l.err
	case <-gone:
		return access.Caller{}, errors.New("the connection to the bus closed while the caller's credentials were asked")
	}
}

// take reports whether caller may make one more guarded call now: admins
// always may; others within their uid's budget.
func (g *gate) take(roles access.Roles, caller access.Caller) bool {
	if roles.LevelFor(caller) >= access.Admin {
		return true
	}
	return g.budget.Take(caller.UID, time.Now())
}

// refused counts a refusal and logs it, one line per uid and interval.
func (g *gate) refused(reason, method, sender string, caller access.Caller, err error) {
	g.counters.add(reason)
	uid := caller.UID
	if !caller.Known {
		uid = unknownUID
	}
	ok, held := g.lines.Allow(uid, time.Now())
	if !ok {
		return
	}
	attrs := []any{"reason", reason, "method", method, "sender", sender, "refused_unlogged", held}
	if caller.Known {
		attrs = append(attrs, "uid", caller.UID, "groups", caller.Groups)
	}
	g.log.Warn("D-Bus call refused", append(attrs, "err", err)...)
}

// unknownUID is the refusal log's key for callers the bus could not name,
// undecodableKey the key of the messages the guard dropped.
const (
	unknownUID     = ^uint32(0)
	undecodableKey = ^uint32(0) - 1
)

// dropped counts and logs a message the guard dropped, one line per
// interval with the count held back.
func (g *gate) dropped(info busconn.Dropped) {
	g.counters.add(RefusedUndecodable)
	ok, held := g.lines.Allow(undecodableKey, time.Now())
	if !ok {
		return
	}
	g.log.Warn("D-Bus message dropped: godbus cannot decode it, and would have closed rdmad's connection to the bus",
		"why", info.Why, "bytes", info.Bytes, "sender", info.Sender, "interface", info.Interface, "member", info.Member,
		"signature", info.Signature, "dropped_unlogged", held)
}

type callKey struct{}

// A callInfo is who made a guarded call, for the methods' own log line.
type callInfo struct {
	method, sender string
	caller         access.Caller
}

// logCall logs a guarded call with its arguments (name, value pairs). A
// method with arguments calls it once it has checked them, so that what an
// admin sends reaches the log only when it is valid.
func (h *handler) logCall(ctx context.Context, args ...any) {
	ci, _ := ctx.Value(callKey{}).(callInfo)
	h.log.Info("D-Bus method call", append([]any{"method", ci.method, "sender", ci.sender, "uid", ci.caller.UID}, args...)...)
}
