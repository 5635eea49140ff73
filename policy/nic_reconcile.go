package policy

import (
	"errors"
	"fmt"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/policy/firmware"
	"github.com/rdmad/rdmad/policy/nicq"
	"github.com/rdmad/rdmad/policy/rdmanl"
)

// checkNIC compares one group of nd's ethtool queue parameters (rings,
// channels, coalesce) with what the policy wants and sets those that
// differ. A driver without the group, or without a wanted parameter, is
// unsupported: reported once and not asked again until the link is
// replaced or the configuration reloaded, like a netdev without DCB.
func (r *Reconciler) checkNIC(g *nicq.Group, nd string, ifindex int, want nicq.Values, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: g.Format(want)}
	key := targetKey(g.Kind, nd)
	if idx, ok := r.nicUnsupported[key]; ok && idx == ifindex {
		if prev, ok := r.targets[key]; ok {
			return prev.t, nil
		}
	}
	if r.nicq == nil {
		return noClient(t, r.nicqErr, "ethtool netlink", nicq.IsUnsupported), nil
	}
	unsupported := func(err error) (apitype.Target, []apitype.Change) {
		r.nicUnsupported[key] = ifindex
		t.State, t.Error = apitype.Unsupported, fmt.Sprintf("%s; %s cannot be managed on %s", err, g.What, nd)
		if t.Actual == "" {
			t.Actual = "unsupported"
		}
		return t, nil
	}
	st, err := r.nicq.Get(g, nd)
	if nicq.IsUnsupported(err) {
		return unsupported(err)
	}
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = g.Actual(want, st)
	diff, err := nicq.Plan(g, nd, want, st)
	if nicq.IsUnsupported(err) {
		return unsupported(err)
	}
	if err != nil {
		return failed(t, err), nil
	}
	if diff == nil {
		t.State = apitype.InSync
		return t, nil
	}
	from := nicq.Values{}
	for name := range diff {
		from[name] = st.Values[name]
	}
	var applyErr error
	t, cs := settle(t, []apitype.Change{{From: g.Format(from), To: g.Format(diff)}}, enforce, func() error {
		applyErr = r.nicq.Set(g, nd, diff)
		return applyErr
	})
	if nicq.IsUnsupported(applyErr) {
		return unsupported(applyErr)
	}
	return t, cs
}

// checkFirmware compares device's firmware version with the policy's
// constraint. rdmad never flashes firmware, so a mismatch is drifted in
// every mode, and its change is always a report.
func (r *Reconciler) checkFirmware(device, want string) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: want}
	c, err := firmware.Parse(want)
	if err != nil {
		return failed(t, err), nil // validated at load; here for a Rule built elsewhere
	}
	have, err := firmware.Read(r.sysRoot, device)
	if errors.Is(err, firmware.ErrUnknown) {
		t.State, t.Actual, t.Error = apitype.Unsupported, "unknown", err.Error()
		return t, nil
	}
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = have
	v, err := firmware.ParseVersion(have)
	if err != nil {
		t.State, t.Error = apitype.TargetError, fmt.Sprintf("firmware: %s reports version %q, which is not a dotted version: cannot compare it with %q", device, have, want)
		return t, nil
	}
	if c.Allows(v) {
		t.State = apitype.InSync
		return t, nil
	}
	t.State = apitype.Drifted
	t.Error = fmt.Sprintf("%s runs firmware %s, the policy expects %s; rdmad does not flash firmware: update it with the vendor's tool (mlxfwmanager, mstflint)", device, have, want)
	return t, []apitype.Change{{From: have, To: want}}
}

func onOff(b bool) string {
	if b {
		return "adaptive_moderation=on"
	}
	return "adaptive_moderation=off"
}

// checkDIM compares device's adaptive moderation, from this pass's dump
// of the RDMA devices (devs, or the error dumping them), with what the
// policy wants, and sets it. A kernel without the RDMA core or without
// the DIM attribute is unsupported.
func (r *Reconciler) checkDIM(device string, want bool, devs map[string]rdmanl.Device, dumpErr error, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: onOff(want)}
	if r.rdma == nil {
		return noClient(t, r.rdmaErr, "RDMA netlink", rdmanl.IsUnsupported), nil
	}
	if dumpErr != nil {
		return failed(t, dumpErr), nil
	}
	d, ok := devs[device]
	if !ok {
		return failed(t, fmt.Errorf("rdmanl: %s is not among the kernel's RDMA devices", device)), nil
	}
	if !d.HasDIM {
		t.State, t.Actual = apitype.Unsupported, "unsupported"
		t.Error = fmt.Sprintf("the kernel does not report adaptive moderation of %s (RDMA_NLDEV_ATTR_DEV_DIM, Linux 5.10 and later)", device)
		return t, nil
	}
	t.Actual = onOff(d.DIM)
	if d.DIM == want {
		t.State = apitype.InSync
		return t, nil
	}
	return settle(t, []apitype.Change{{From: t.Actual, To: t.Desired}}, enforce, func() error { return r.rdma.SetDIM(d, want) })
}

// checkNetnsMode compares the RDMA subsystem's network namespace mode with
// [rdma] netns_mode and sets it. The kernel changes it only while no
// network namespace but the initial one exists (EBUSY otherwise): an
// error that says so, tried again at every full pass.
func (r *Reconciler) checkNetnsMode(want string, enforce bool) (apitype.Target, []apitype.Change) {
	t := apitype.Target{Desired: want}
	if r.rdma == nil {
		return noClient(t, r.rdmaErr, "RDMA netlink", rdmanl.IsUnsupported), nil
	}
	have, err := r.rdma.NetnsMode()
	if rdmanl.IsUnsupported(err) {
		t.State, t.Actual, t.Error = apitype.Unsupported, "unsupported", err.Error()
		return t, nil
	}
	if err != nil {
		return failed(t, err), nil
	}
	t.Actual = have
	if have == want {
		t.State = apitype.InSync
		return t, nil
	}
	return settle(t, []apitype.Change{{From: have, To: want}}, enforce, func() error { return r.rdma.SetNetnsMode(want) })
}

// noClient is target t when the kernel interface its setting goes through
// (what: ethtool netlink, RDMA netlink) could not be opened, err saying why
// (nil: not opened at all): unsupported when the kernel lacks it, an error
// otherwise.
func noClient(t apitype.Target, err error, what string, unsupported func(error) bool) apitype.Target {
	if err == nil {
		err = errors.New(what + " is unavailable")
	}
	if unsupported(err) {
		t.State, t.Actual, t.Error = apitype.Unsupported, "no "+what, err.Error()
		return t
	}
	return failed(t, err)
}
