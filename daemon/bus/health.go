package bus

import (
	"strconv"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/state"
)

// The health verdict on the bus (docs/DBUS.md, docs/HEALTH.md): the agent's
// Health and HealthStatus, each device's own (apitype.Health.ForDevice),
// and the loopback probes of a device's ports (ProbeState, ProbeResults,
// ProbeFailed/ProbeRecovered).

// healthDict is a verdict as a{sv}: keys healthy (b), status (s) and
// conditions (aa{sv}), so that fields can be added without a new
// signature.
func healthDict(h apitype.Health) map[string]dbus.Variant {
	conds := make([]map[string]dbus.Variant, 0, len(h.Conditions))
	for _, c := range h.Conditions {
		objs := c.Objects
		if objs == nil {
			objs = []string{}
		}
		conds = append(conds, map[string]dbus.Variant{
			"type":    dbus.MakeVariant(c.Type),
			"status":  dbus.MakeVariant(c.Status),
			"reason":  dbus.MakeVariant(c.Reason),
			"message": dbus.MakeVariant(validText(c.Message)),
			// microseconds since the Unix epoch, 0 when never set
			"since":   dbus.MakeVariant(unixMicro(c.Since)),
			"objects": dbus.MakeVariant(objs),
		})
	}
	status := h.Status
	if status == "" {
		status = apitype.ConditionUnknown
	}
	return map[string]dbus.Variant{
		"healthy":    dbus.MakeVariant(h.Healthy),
		"status":     dbus.MakeVariant(status),
		"conditions": dbus.MakeVariant(conds),
	}
}

// A ProbeResult is one loopback probe of a device's ports, as ProbeResults
// shows it (D-Bus type (ssbtts), the form docs/DBUS.md announced): the
// probe ("loopback <device>/<port>"), the peer ("" for a loopback probe),
// whether its last round passed, the last WRITE RTT, when it last ran
// (seconds since the Unix epoch) and its error.
type ProbeResult struct {
	Probe   string
	Peer    string
	OK      bool
	LastRTT uint64
	LastRun uint64
	Error   string
}

// probeState is a device's loopback probes in one word: the worst state of
// its ports' probes (failed, unavailable, paused, ok), or "none" when no
// port of it is probed.
func probeState(ls []apitype.LoopbackPort) string {
	if len(ls) == 0 {
		return "none"
	}
	for _, st := range []string{"failed", "unavailable", "paused", "ok"} {
		for _, l := range ls {
			if l.State == st {
				return st
			}
		}
	}
	return ls[0].State
}

// deviceProbes returns the loopback results of dev's ports.
func deviceProbes(s *apitype.Snapshot, dev string) []apitype.LoopbackPort {
	var out []apitype.LoopbackPort
	for _, l := range s.Loopback {
		if l.Device == dev {
			out = append(out, l)
		}
	}
	return out
}

func probeName(l apitype.LoopbackPort) string {
	return "loopback " + l.Device + "/" + strconv.Itoa(l.Port)
}

func probeResults(ls []apitype.LoopbackPort) []ProbeResult {
	out := make([]ProbeResult, 0, len(ls))
	for _, l := range ls {
		var run uint64
		if !l.UpdatedAt.IsZero() && l.UpdatedAt.Unix() > 0 {
			run = uint64(l.UpdatedAt.Unix())
		}
		out = append(out, ProbeResult{Probe: probeName(l), OK: l.State == "ok", LastRTT: uint64(max(l.Write.LastRTT, 0)),
			LastRun: run, Error: validText(l.LastError)})
	}
	return out
}

// healthDeviceProps adds the health and probe properties of device d of s.
func healthDeviceProps(p map[string]dbus.Variant, s *apitype.Snapshot, d apitype.Device) {
	h := s.Health.ForDevice(d.Name)
	if s.Health.Status == "" {
		h = apitype.Health{}
	}
	ls := deviceProbes(s, d.Name)
	p["HealthStatus"] = dbus.MakeVariant(orUnknown(h.Status))
	p["Health"] = dbus.MakeVariant(healthDict(h))
	p["ProbeState"] = dbus.MakeVariant(probeState(ls))
	p["ProbeResults"] = dbus.MakeVariant(probeResults(ls))
}

func orUnknown(s string) string {
	if s == "" {
		return apitype.ConditionUnknown
	}
	return s
}

// probeChanges returns ProbeFailed for every loopback probe that failed
// and ProbeRecovered for every one that passes again, on the agent object
// with the device's path first (docs/DBUS.md).
func probeChanges(old, cur *apitype.Snapshot) []signal {
	before := make(map[string]apitype.LoopbackPort, len(old.Loopback))
	for _, l := range old.Loopback {
		before[probeName(l)] = l
	}
	var sigs []signal
	for _, l := range cur.Loopback {
		prev, seen := before[probeName(l)]
		switch {
		case l.State == "failed" && (!seen || prev.State != "failed"):
			sigs = append(sigs, signal{Path, Interface + ".ProbeFailed",
				[]any{DevicePath(l.Device), probeName(l), "", validText(l.LastError)}})
		case l.State == "ok" && seen && prev.State == "failed":
			sigs = append(sigs, signal{Path, Interface + ".ProbeRecovered", []any{DevicePath(l.Device), probeName(l), ""}})
		}
	}
	return sigs
}

// healthChanges returns HealthChanged for every condition whose status or
// objects changed (state.Compare decides, as for the watch stream).
func healthChanges(d state.Diff) []signal {
	var sigs []signal
	for _, c := range d.Health {
		objs := c.Cond.Objects
		if objs == nil {
			objs = []string{}
		}
		sigs = append(sigs, signal{Path, Interface + ".HealthChanged",
			[]any{c.Type, c.From, c.To, c.Cond.Reason, validText(c.Cond.Message), objs}})
	}
	return sigs
}

// validText is s as D-Bus can carry it: a string that is not valid UTF-8
// fails the marshalling of the whole message (one such byte would break
// GetAll for every client), so bad sequences become U+FFFD.
func validText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func unixMicro(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}
