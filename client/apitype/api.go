package apitype

import (
	"encoding/json"
	"fmt"
	"time"
)

// DefaultSocket is where rdmad serves its local API unless [daemon] socket
// says otherwise; clients also honour RDMAD_SOCKET.
const DefaultSocket = "/run/rdmad/rdmad.sock"

// Component names: the keys of Snapshot.Components.
const (
	ComponentConfig    = "config"    // the configuration files
	ComponentInventory = "inventory" // sysfs device inventory
	ComponentAPI       = "api"       // the Unix socket
	ComponentDBus      = "dbus"      // the system bus name and objects
	ComponentMetrics   = "metrics"   // the optional TCP metrics listener
	ComponentVerbs     = "verbs"     // libibverbs and the loopback probes
	ComponentMRPool    = "mrpool"    // the memory registration pool
	ComponentPeers     = "peers"     // peer probes and the control endpoint
	// The loopback probe apart from the verbs it runs on (disabled with
	// [probe] loopback = false), and the watch on the configuration
	// files (in error, edits need SIGHUP or rdmactl reload).
	ComponentLoopback    = "loopback-probe"
	ComponentConfigWatch = "config-watch"
	// The kernel event sources; the periodic resync covers their objects
	// while one is in error.
	ComponentEventsRtnetlink = "events-rtnetlink"
	ComponentEventsUevent    = "events-uevent"
	// ComponentKernelLog follows the kernel log for faults of RDMA
	// devices (docs/HEALTH.md, "Kernel faults").
	ComponentKernelLog = "kernel-log"
)

// ApplyResult is the answer of POST /v1/policy/apply.
type ApplyResult struct {
	// Changes lists the differences the pass found (and, for policies in
	// enforce mode, applied).
	Changes []Change `json:"changes"`
	// Policy is the policy state after the pass.
	Policy PolicyState `json:"policy"`
}

// DiffResult is the answer of GET /v1/policy/diff.
type DiffResult struct {
	Changes []Change `json:"changes"`
	// Policies names the declared [[policy]] blocks, and Unmatched those of
	// them that match no netdev or RDMA device on this node: they change
	// nothing here, which "no changes" alone would hide.
	Policies  []string `json:"policies"`
	Unmatched []string `json:"unmatched"`
	// Overridden lists the settings a later policy takes over (see
	// PolicyState.Overridden).
	Overridden []Override `json:"overridden"`
}

// DiffPolicies returns the names of the declared [[policy]] blocks in ps
// and of those without a target (matching nothing on the node). The
// [memlock] section shows in the policy state as a policy named memlock
// with its target; it is not a [[policy]].
func DiffPolicies(ps []PolicyStatus) (declared, unmatched []string) {
	declared, unmatched = []string{}, []string{}
	for _, p := range ps {
		if p.Name == "memlock" && len(p.Targets) > 0 {
			continue
		}
		declared = append(declared, p.Name)
		if len(p.Targets) == 0 {
			unmatched = append(unmatched, p.Name)
		}
	}
	return declared, unmatched
}

// ReloadResult is the answer of POST /v1/reload.
type ReloadResult struct {
	// OK reports whether the configuration loaded.
	OK         bool   `json:"ok"`
	Generation uint64 `json:"generation"`
	Error      string `json:"error,omitempty"`
	// RestartNeeded lists the keys of the configuration just loaded
	// ("daemon.socket", ...) whose new value takes effect only when rdmad
	// restarts; rdmad runs on with the old value until then (see
	// Config.PendingRestart). Empty when the load was rejected. Never null
	// in JSON.
	RestartNeeded []string `json:"restart_needed"`
}

// MarshalJSON writes ReloadResult with restart_needed as [] rather than
// null.
func (r ReloadResult) MarshalJSON() ([]byte, error) {
	type plain ReloadResult // no methods: no recursion
	return json.Marshal(plain(withLists(r)))
}

// ErrorBody is the JSON body of every 4xx and 5xx answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// The watch stream (GET /v1/watch): one Event per line.

// Event types.
const (
	// EventHello is the first line of every stream; Seq is the snapshot the
	// stream starts after.
	EventHello = "hello"
	// EventLink is a change of a port's state or physical state, or a port that
	// appeared ("absent" -> ...) or disappeared (... -> "absent").
	EventLink = "link"
	// EventPolicy is a change of a policy target's state.
	EventPolicy = "policy"
	// EventConfig is a change of the configuration generation or load error.
	EventConfig = "config"
	// EventComponent is a change of a component's state or error.
	EventComponent = "component"
	// EventPeer is a change of a probed peer's state (unknown, up,
	// degraded, down); To is "absent" for a peer no longer probed.
	// Message is the reason it is not up.
	EventPeer = "peer"
	// EventHealth is a change of a health condition's status or of the
	// objects it names (GET /v1/health); Object is the condition's type,
	// Message its message.
	EventHealth = "health"
	// EventDaemon is a change of rdmad's own state (running, degraded, ...).
	EventDaemon = "daemon"
	// EventDropped is the last line to a client that could not keep up.
	EventDropped = "dropped"
	// EventBye is the last line when rdmad stops.
	EventBye = "bye"
	// EventHeartbeat is sent after a quiet spell (Options.Heartbeat): it says
	// the stream is alive and changes nothing; Seq is the last event's.
	// Clients skip it (the typed client does); clients that print unknown
	// types still work.
	EventHeartbeat = "heartbeat"
)

// Absent is From or To of a Link event for a port that appeared or vanished.
const Absent = "absent"

// An Event is one line of the stream.
type Event struct {
	// Seq is the snapshot (GET /v1/status seq) that showed the change. A
	// gap in Seq between events is normal: snapshots that changed nothing
	// watched produce no events, and changes that reverted between two
	// snapshots the hub saw are not seen.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Object names what changed: "mlx5_0/1" (link), "fabric/mtu/ens1f0"
	// (policy: policy/kind/object), a component's name, "config" or
	// "rdmad".
	Object string `json:"object,omitempty"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	// Message explains the change, or why the stream ends.
	Message string `json:"message,omitempty"`
}

// String formats e for people, as `rdmactl watch` prints it.
func (e Event) String() string {
	ts := e.Time.Local().Format("15:04:05.000")
	switch e.Type {
	case EventHello, EventDropped, EventBye, EventHeartbeat:
		return fmt.Sprintf("%s %-9s seq %d: %s", ts, e.Type, e.Seq, e.Message)
	}
	s := fmt.Sprintf("%s %-9s %s: %s -> %s", ts, e.Type, e.Object, dash(e.From), dash(e.To))
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Doctor verdicts, from best to worst.
const (
	VerdictSkip = "skip" // the check does not apply, or could not run
	VerdictOK   = "ok"
	VerdictWarn = "warn"
	VerdictFail = "fail"
)

// A DoctorReport is the answer of GET /v1/doctor and what `rdmactl doctor
// --json` prints: the troubleshooting table (docs/API.md, "Doctor") as rdmad ran
// it on the node, followed by the checks the client ran in the caller's
// own session.
type DoctorReport struct {
	// Worst is the worst verdict of Checks.
	Worst  string        `json:"worst"`
	Checks []DoctorCheck `json:"checks"`
}

// A DoctorCheck is one row of a DoctorReport.
type DoctorCheck struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Verdict string `json:"verdict"`
	// Message says what was found, naming the objects.
	Message string `json:"message"`
	// Fix says what to do about a warn or fail.
	Fix string `json:"fix,omitempty"`
}
