package health

import (
	"reflect"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// A Memo decides the verdict of every published snapshot, and gives the
// last one again when nothing Evaluate reads changed since: a publish of
// the peers' figures alone (every second at 1,000 peers) changes none of
// it, and a verdict costs some 50 allocations. The snapshot's slices and
// maps are compared by identity: a published snapshot is never changed,
// and an update replaces what it changes (state.Store). A condition that
// reads more of the snapshot must add it to sameInputs.
type Memo struct {
	last  *apitype.Snapshot // what the last verdict was decided on
	in    Input
	flaps map[string]FlapState
	out   apitype.Health
}

// Evaluate returns Evaluate's verdict of in, with in.Flaps read from
// flaps (nil: none tracked) at in.Now.
func (m *Memo) Evaluate(in Input, flaps *Flaps) apitype.Health {
	if m.last != nil && m.sameInputs(in, flaps) {
		m.last = in.Snap
		return m.out
	}
	if flaps != nil {
		in.Flaps = flaps.State(in.Now)
	}
	m.last, m.in, m.flaps, m.out = in.Snap, in, in.Flaps, Evaluate(in)
	return m.out
}

// sameInputs reports whether in gives the verdict the last one gave:
// every field Evaluate reads is the one it read then, the flaps are in
// the same state, and the verdict before is the last one (so every
// condition's Since is the one it was).
func (m *Memo) sameInputs(in Input, flaps *Flaps) bool {
	a, b := in.Snap, m.last
	return in.Local == m.in.Local && sameSlice(in.Prev.Conditions, m.out.Conditions) && in.Prev.Status == m.out.Status &&
		sameSlice(in.Expect.Ignore, m.in.Expect.Ignore) && sameMap(in.Expect.MinRateGbps, m.in.Expect.MinRateGbps) &&
		in.Expect.MinLoopbackGbps == m.in.Expect.MinLoopbackGbps && in.Expect.MinLoopbackShare == m.in.Expect.MinLoopbackShare &&
		in.Expect.Count == m.in.Expect.Count && in.Expect.Ports == m.in.Expect.Ports && sameSlice(in.Expect.Devices, m.in.Expect.Devices) &&
		sameSlice(a.FunctionsWithoutDevice, b.FunctionsWithoutDevice) &&
		a.Bandwidth == b.Bandwidth &&
		(flaps == nil) == (m.flaps == nil) && (flaps == nil || flaps.same(m.flaps, in.Now)) &&
		sameMap(a.Components, b.Components) && a.Config.Error == b.Config.Error && a.Config.Generation == b.Config.Generation &&
		sameSlice(a.Devices, b.Devices) && sameSlice(a.KernelFaults, b.KernelFaults) && sameSlice(a.Loopback, b.Loopback) &&
		sameSlice(a.MRPool, b.MRPool) && sameSlice(a.Policy.Policies, b.Policy.Policies) && sameSlice(a.RefusedFiles, b.RefusedFiles) &&
		(len(a.Peers.Peers) == 0) == (len(b.Peers.Peers) == 0) && samePeerPorts(a.Peers.Ports, b.Peers.Ports)
}

// same reports whether State(now) would be prev, without making it.
func (f *Flaps) same(prev map[string]FlapState, now time.Time) bool {
	if len(prev) != len(f.ports) {
		return false
	}
	for k, p := range f.ports {
		if old, ok := prev[k]; !ok || old != f.state(p, now) {
			return false
		}
	}
	return true
}

func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func sameMap[V any](a, b map[string]V) bool {
	return len(a) == len(b) && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// samePeerPorts compares what the peers condition reads of the ports
// (their faults): the peer manager makes the list anew for each state.
func samePeerPorts(a, b []apitype.PeerPort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].LocalFault != b[i].LocalFault {
			return false
		}
	}
	return true
}
