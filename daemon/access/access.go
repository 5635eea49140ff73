// Package access is rdmad's one table of who may do what. The Unix socket
// API (daemon/api) and the D-Bus service (daemon/bus) name the operation a
// request asks for and let Decide answer, so that the two transports can
// never disagree (docs/API.md and docs/DBUS.md, "Access").
//
// The levels follow the trust model of docs/SECURITY.md: root, rdmad's own user and
// the admin group may do everything; the socket group may read state,
// metrics and the watch stream and never more; anyone else gets nothing
// beyond what the D-Bus bus policy lets everybody read.
//
// The package decides from credentials a transport obtained from the kernel
// or the bus at connect time. It never looks a process up by pid: a pid can
// be reused by another process between the connect and the look-up.
package access

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// A Level is what an operation requires.
type Level int

const (
	// Read is reading the daemon's state: the socket group's level.
	Read Level = iota + 1
	// Admin is changing state or making the node act (reload, apply,
	// probe now): root's, rdmad's own user's and the admin group's level.
	Admin
)

func (l Level) String() string {
	switch l {
	case Read:
		return "read"
	case Admin:
		return "admin"
	}
	return "level(" + strconv.Itoa(int(l)) + ")"
}

// An Op is one operation a client can ask for, on either transport.
type Op string

// The operations. Add a new one here, with its level in table, before a
// transport serves it: Decide refuses an operation it does not know.
const (
	// Status reads the state snapshot (GET /v1/status).
	Status Op = "status"
	// Health reads the health verdict (GET /v1/health, D-Bus Health).
	Health Op = "health"
	// Watch streams state changes (GET /v1/watch).
	Watch Op = "watch"
	// Metrics reads the Prometheus metrics (GET /metrics on the socket).
	Metrics Op = "metrics"
	// PolicyDiff computes what a policy pass would change; it changes
	// nothing (GET /v1/policy/diff).
	PolicyDiff Op = "policy-diff"
	// Reload loads the configuration again (POST /v1/reload, D-Bus Reload).
	Reload Op = "reload"
	// PolicyApply runs a policy pass now (POST /v1/policy/apply, D-Bus
	// Apply).
	PolicyApply Op = "policy-apply"
	// Probe probes a peer now (POST /v1/probe, D-Bus Probe). It is admin
	// level: it makes the node send traffic on the fabric on demand.
	Probe Op = "probe"
	// Bandwidth runs an RC bandwidth test to a peer (POST /v1/bw, D-Bus
	// Bandwidth). It is admin level: it fills the link to the peer for up
	// to 30 s.
	Bandwidth Op = "bandwidth"
	// Doctor runs the troubleshooting table on the node (GET /v1/doctor,
	// D-Bus Doctor). It changes nothing; it reads sysfs, /proc and the
	// state, and waits for the counter interval (bounded).
	Doctor Op = "doctor"
	// Resources reads the RDMA objects the kernel tracks per process and
	// device (GET /v1/resources, D-Bus Resources): a read of RDMA netlink
	// on request, one at a time.
	Resources Op = "resources"
	// Properties reads D-Bus properties, introspects and lists objects.
	// On the bus, the bus policy lets every local user do it
	// (docs/SECURITY.md: any other local user gets "on D-Bus only what the
	// bus policy lets everyone read"); rdmad does not check it again, so
	// its level here documents the daemon's view for a transport that
	// would.
	Properties Op = "properties"
)

// table is the whole access table. docs/API.md and docs/DBUS.md show it;
// the tests of this package keep them in step.
var table = map[Op]Level{
	Status:      Read,
	Health:      Read,
	Watch:       Read,
	Metrics:     Read,
	PolicyDiff:  Read,
	Doctor:      Read,
	Resources:   Read,
	Properties:  Read,
	Reload:      Admin,
	PolicyApply: Admin,
	Probe:       Admin,
	Bandwidth:   Admin,
}

// LevelOf returns the level op requires; ok is false for an unknown op.
func LevelOf(op Op) (l Level, ok bool) {
	l, ok = table[op]
	return l, ok
}

// Ops returns every operation, sorted by name.
func Ops() []Op {
	ops := make([]Op, 0, len(table))
	for op := range table {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i] < ops[j] })
	return ops
}

// NoGID stands for "no primary group known" in Caller.GID. (gid_t)-1 is
// never a real group on Linux (chown uses it for "leave unchanged"), so it
// cannot match a configured group. Transports that learn only a list of
// groups (D-Bus) use it rather than 0, which is root's group.
const NoGID = ^uint32(0)

// A Caller is who asks, as the kernel (SO_PEERCRED, SO_PEERGROUPS) or the
// bus (GetConnectionCredentials) reported it.
type Caller struct {
	UID uint32
	// GID is the primary group, NoGID when the transport does not tell.
	GID uint32
	// Groups are the supplementary groups; nil when the transport gave
	// none, and then only UID and GID count.
	Groups []uint32
	// Known is false when the transport could not tell who the caller is;
	// such a caller may do nothing.
	Known bool
}

// InGroup reports whether c has gid as its primary or a supplementary group.
func (c Caller) InGroup(gid uint32) bool {
	if !c.Known || gid == NoGID {
		return false
	}
	if c.GID == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// String names the caller by uid ("uid 1000"); Groups lists its groups.
func (c Caller) String() string {
	if !c.Known {
		return "a caller whose credentials are unknown"
	}
	return "uid " + strconv.FormatUint(uint64(c.UID), 10)
}

// groupList is the caller's groups for messages: "groups 1000,27", or
// "no groups".
func (c Caller) groupList() string {
	var gs []string
	if c.GID != NoGID {
		gs = append(gs, strconv.FormatUint(uint64(c.GID), 10))
	}
	for _, g := range c.Groups {
		if g != c.GID {
			gs = append(gs, strconv.FormatUint(uint64(g), 10))
		}
	}
	if len(gs) == 0 {
		return "no groups"
	}
	return "groups " + strings.Join(gs, ",")
}

// A Group is an optional gid. The zero Group is no group, so that the zero
// Roles admits only root: a zero gid would be root's group.
type Group struct {
	gid uint32
	set bool
}

// GID returns the Group gid; GID(NoGID) is no group.
func GID(gid uint32) Group {
	if gid == NoGID {
		return Group{}
	}
	return Group{gid: gid, set: true}
}

// Get returns the gid and whether there is one.
func (g Group) Get() (uint32, bool) { return g.gid, g.set }

func (g Group) String() string {
	if !g.set {
		return "none"
	}
	return "gid " + strconv.FormatUint(uint64(g.gid), 10)
}

// Roles are what Decide applies besides the table: the table is fixed, who is
// in which group is not. The zero Roles admits only root.
type Roles struct {
	// SelfUID is rdmad's effective uid. Its own user may do everything
	// (so that `make run` works without root); under systemd it is 0.
	SelfUID uint32
	// ReadGID is the socket group ([daemon] socket_group): Read level.
	ReadGID Group
	// AdminGID is [daemon] admin_group: Admin level, which includes Read.
	AdminGID Group
}

// LevelFor returns the highest level c has under p, 0 when none.
func (p Roles) LevelFor(c Caller) Level {
	if !c.Known {
		return 0
	}
	if c.UID == 0 || c.UID == p.SelfUID {
		return Admin
	}
	if g, ok := p.AdminGID.Get(); ok && c.InGroup(g) {
		return Admin
	}
	if g, ok := p.ReadGID.Get(); ok && c.InGroup(g) {
		return Read
	}
	return 0
}

// Allowed reports whether Decide would let c do op.
func (p Roles) Allowed(c Caller, op Op) bool { return p.Decide(c, op) == nil }

// Decide returns nil when c may do op under p, and a *Denied otherwise.
func (p Roles) Decide(c Caller, op Op) error {
	need, ok := LevelOf(op)
	if !ok {
		// A transport asked for an operation nobody put in the table:
		// refuse rather than guess, whoever asks.
		return &Denied{Caller: c, Op: op, Need: 0, Roles: p}
	}
	if p.LevelFor(c) >= need {
		return nil
	}
	return &Denied{Caller: c, Op: op, Need: need, Roles: p}
}

// Denied is Decide's refusal. Its text names the caller, the operation and
// what to do about it.
type Denied struct {
	Caller Caller
	Op     Op
	// Need is the level Op requires; 0 for an operation not in the table.
	Need  Level
	Roles Roles
	// Target names the operation in the message instead of Op, as the
	// transport's user knows it (e.g. "/v1/reload", "Reload"). Optional.
	Target string
}

func (d *Denied) Error() string {
	what := string(d.Op)
	if d.Target != "" {
		what = d.Target
	}
	who := d.Caller.String()
	if !d.Caller.Known {
		return fmt.Sprintf("%s may not do anything (%s): rdmad could not learn who is asking (no peer credentials); connect over the Unix socket or the system bus directly, not through a proxy", who, what)
	}
	switch d.Need {
	case Read:
		return fmt.Sprintf("%s may not read rdmad's state (%s): that needs the socket group ([daemon] socket_group, %s) or the admin group ([daemon] admin_group, %s), and the caller has %s; ask an admin to add you to the socket group or use sudo",
			who, what, d.Roles.ReadGID, d.Roles.AdminGID, d.Caller.groupList())
	case Admin:
		verb := "change rdmad's state"
		if d.Op == Probe {
			verb = "make rdmad probe now"
		}
		if d.Op == Bandwidth {
			verb = "make rdmad run a bandwidth test"
		}
		return fmt.Sprintf("%s may not %s (%s): that needs root or the admin group ([daemon] admin_group, %s), and the caller has %s; run it with sudo or ask an admin to add you to the admin group",
			who, verb, what, d.Roles.AdminGID, d.Caller.groupList())
	}
	return fmt.Sprintf("%s may not do %s: it is not in rdmad's access table; this is a bug in rdmad, please report it", who, what)
}

type callerKey struct{}

// WithCaller returns ctx carrying c, the caller a transport checked: the
// backend's bounds per caller (the doctor runs) read it with CallerFrom,
// whichever transport the call came by.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller WithCaller stored in ctx; ok is false when
// there is none.
func CallerFrom(ctx context.Context) (c Caller, ok bool) {
	c, ok = ctx.Value(callerKey{}).(Caller)
	return c, ok
}
