package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/rdmanl"
)

// This file holds the per-port settings of [policy.rdma]: optional
// hardware counters and the QP counter mode, over RDMA netlink.

func countersString(names []string) string {
	if len(names) == 0 {
		return "optional_counters=none"
	}
	return "optional_counters=" + strings.Join(names, ",")
}

// rdmaPort finds p's RDMA device in this pass's dump (devs, or the error
// dumping them), or says why it cannot be managed.
func (r *Reconciler) rdmaPort(t apitype.Target, p Port, devs map[string]rdmanl.Device, dumpErr error) (rdmanl.Device, apitype.Target, bool) {
	if r.rdma == nil {
		return rdmanl.Device{}, noClient(t, r.rdmaErr, "RDMA netlink", rdmanl.IsUnsupported), false
	}
	if dumpErr != nil {
		return rdmanl.Device{}, failed(t, dumpErr), false
	}
	d, ok := devs[p.Device]
	if !ok {
		return rdmanl.Device{}, failed(t, fmt.Errorf("rdmanl: %s is not among the kernel's RDMA devices", p.Device)), false
	}
	return d, t, true
}

// rdmaSteady returns the target of key as the last pass left it when the
// kernel said it cannot do it for this incarnation of the device (index):
// reported once, not asked again until the device comes back or the
// configuration is reloaded.
func (r *Reconciler) rdmaSteady(key string, index uint32) (apitype.Target, bool) {
	if idx, ok := r.rdmaUnsupported[key]; ok && idx == index {
		if prev, ok := r.targets[key]; ok {
			return prev.t, true
		}
	}
	return apitype.Target{}, false
}

// rdmaRefused marks t unsupported with the kernel's answer, and remembers
// it for rdmaSteady.
func (r *Reconciler) rdmaRefused(t apitype.Target, key string, index uint32, err error, what string, p Port) apitype.Target {
	if r.rdmaUnsupported == nil {
		r.rdmaUnsupported = map[string]uint32{}
	}
	r.rdmaUnsupported[key] = index
	t.State, t.Error = apitype.Unsupported, fmt.Sprintf("%s; %s cannot be managed on %s", err, what, p)
	if t.Actual == "" {
		t.Actual = "unsupported"
	}
	return t
}

// checkCounters compares the optional counters enabled on p with the ones
// the policy wants (sorted; every other optional counter off) and sets
// them. A port whose driver offers no optional counters (rxe), or not one
// the policy names, or a kernel without the commands (before Linux 5.18),
// is unsupported.
func (r *Reconciler) checkCounters(p Port, want []string, devs map[string]rdmanl.Device, dumpErr error, enforce bool) (apitype.Target, []apitype.Change) {
	want = slices.Sorted(slices.Values(want))
	t := apitype.Target{Desired: countersString(want)}
	key := targetKey("optional_counters", p.String())
	d, t, ok := r.rdmaPort(t, p, devs, dumpErr)
	if !ok {
		return t, nil
	}
	if prev, ok := r.rdmaSteady(key, d.Index); ok {
		return prev, nil
	}
	const what = "optional counters"
	cs, err := r.rdma.Counters(d, uint32(p.Port))
	if rdmanl.IsUnsupported(err) {
		return r.rdmaRefused(t, key, d.Index, err, what, p), nil
	}
	if err != nil {
		return failed(t, err), nil
	}
	have := rdmanl.EnabledOptional(cs)
	t.Actual = countersString(have)
	indexes, err := rdmanl.OptionalIndexes(cs, want)
	if err != nil {
		return r.rdmaRefused(t, key, d.Index, err, what, p), nil
	}
	if slices.Equal(have, want) {
		t.State = apitype.InSync
		return t, nil
	}
	var applyErr error
	t, changes := settle(t, []apitype.Change{{From: t.Actual, To: t.Desired}}, enforce, func() error {
		applyErr = r.rdma.SetOptionalCounters(d, uint32(p.Port), indexes)
		return applyErr
	})
	if rdmanl.IsUnsupported(applyErr) {
		return r.rdmaRefused(t, key, d.Index, applyErr, what, p), nil
	}
	return t, changes
}

// qpCountersInSync reports whether the QP counter mode have satisfies
// want: "off" is any mode but an automatic one (QPs bound by hand are the
// operator's, and the kernel keeps them in "manual").
func qpCountersInSync(want, have string) bool {
	if want == rdmanl.QPCountersOff {
		return have == rdmanl.QPCountersOff || have == rdmanl.QPCountersManual
	}
	return have == want
}

// checkQPCounters compares the QP counter mode of p with the policy's and
// sets it. A kernel or driver that refuses the mode (EOPNOTSUPP: a port
// without hardware counters) is unsupported; EBUSY (QPs bound by hand)
// is an error that names the way out.
func (r *Reconciler) checkQPCounters(p Port, want string, devs map[string]rdmanl.Device, dumpErr error, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: "qp_counters=" + want}
	key := targetKey("qp_counters", p.String())
	d, t, ok := r.rdmaPort(t, p, devs, dumpErr)
	if !ok {
		return t, nil
	}
	if prev, ok := r.rdmaSteady(key, d.Index); ok {
		return prev, nil
	}
	const what = "the QP counter mode"
	have, err := r.rdma.QPCounterMode(d, uint32(p.Port))
	if rdmanl.IsUnsupported(err) {
		return r.rdmaRefused(t, key, d.Index, err, what, p), nil
	}
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = "qp_counters=" + have
	if qpCountersInSync(want, have) {
		t.State = apitype.InSync
		return t, nil
	}
	var applyErr error
	t, changes := settle(t, []apitype.Change{{From: t.Actual, To: t.Desired}}, enforce, func() error {
		applyErr = r.rdma.SetQPCounters(d, uint32(p.Port), want)
		return applyErr
	})
	if rdmanl.IsUnsupported(applyErr) {
		return r.rdmaRefused(t, key, d.Index, applyErr, what, p), nil
	}
	return t, changes
}
