package health

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

var longCfg = FlapConfig{Downs: 3, Window: 10 * time.Minute, Quiet: 10 * time.Minute, LongDowns: 2, LongWindow: 6 * time.Hour}

const (
	bootA = "1b2c3d4e-0000-4000-8000-00000000000a"
	bootB = "1b2c3d4e-0000-4000-8000-00000000000b"
)

// bounce takes port key down at at and up a second later.
func bounce(f *Flaps, key string, at time.Time) {
	f.Observe(key, false, at)
	f.Observe(key, true, at.Add(time.Second))
}

// TestLongWindowFlap is #39 item 4's Done-when: two downs three hours
// apart make PortFlapping through the long window, and its message says
// which rule fired; the short rule alone (3 in 10 minutes) does not see
// them. It holds while the window holds both downs, and clears the moment
// the first one leaves it (NextChange says when). With flap_long_downs 0
// the same downs make no problem.
func TestLongWindowFlap(t *testing.T) {
	verdict := func(f *Flaps, now time.Time) apitype.Condition {
		return cond(t, Evaluate(Input{Snap: node(), Now: now, Flaps: f.State(now)}), apitype.CondPortFlapping)
	}
	f := NewFlaps(longCfg)
	f.Observe("rxe0/1", true, t0)
	bounce(f, "rxe0/1", t0.Add(time.Hour))
	if c := verdict(f, t0.Add(time.Hour+time.Minute)); c.Status != apitype.ConditionOK {
		t.Fatalf("one down: %+v, want ok", c)
	}
	second := t0.Add(4 * time.Hour) // three hours after the first
	bounce(f, "rxe0/1", second)
	c := verdict(f, second.Add(time.Minute))
	if c.Status != apitype.ConditionProblem || !slices.Equal(c.Objects, []string{"rxe0/1"}) ||
		!strings.Contains(c.Message, "rxe0/1 went down 2 times in 6h (flap_long_window)") {
		t.Fatalf("two downs 3 h apart: %+v, want PortFlapping of rxe0/1 by the long window", c)
	}
	if st := f.Port("rxe0/1", second); !st.Long || st.Downs != 1 || st.LongDowns != 2 || st.Transitions != 4 {
		t.Errorf("state %+v, want flapping by the long window, 1 down in the short one, 2 in the long one", st)
	}
	// It holds past the quiet window (the short rule's) ...
	if c := verdict(f, second.Add(2*time.Hour)); c.Status != apitype.ConditionProblem {
		t.Errorf("2 h after the second down: %+v, want still flapping", c)
	}
	// ... until the first down leaves the 6 h window.
	clear := t0.Add(time.Hour + 6*time.Hour)
	if next := f.NextChange(second.Add(time.Minute)); !next.Equal(clear.Add(time.Nanosecond)) {
		t.Errorf("next change %v, want %v (the first down leaves the window)", next, clear)
	}
	if c := verdict(f, clear); c.Status != apitype.ConditionProblem {
		t.Errorf("at the window's edge: %+v, want still flapping", c)
	}
	if c := verdict(f, clear.Add(time.Second)); c.Status != apitype.ConditionOK {
		t.Errorf("after the first down left the window: %+v, want ok", c)
	}
	if next := f.NextChange(clear.Add(time.Second)); !next.IsZero() {
		t.Errorf("next change %v when nothing is flapping", next)
	}

	// Three downs in ten minutes: the short rule's message, and once its
	// quiet window is over the long rule holds the port on.
	g := NewFlaps(longCfg)
	g.Observe("rxe0/1", true, t0)
	for i := range 3 {
		bounce(g, "rxe0/1", t0.Add(time.Duration(i+1)*time.Minute))
	}
	if c := verdict(g, t0.Add(4*time.Minute)); !strings.Contains(c.Message, "went down 3 times in 10m0s") || strings.Contains(c.Message, "flap_long_window") {
		t.Errorf("three downs in 3 minutes: %+v, want the short rule's message", c)
	}
	if c := verdict(g, t0.Add(time.Hour)); c.Status != apitype.ConditionProblem || !strings.Contains(c.Message, "went down 3 times in 6h (flap_long_window)") {
		t.Errorf("an hour later: %+v, want the long rule", c)
	}

	// The long window off.
	off := NewFlaps(FlapConfig{Downs: 3, Window: 10 * time.Minute, Quiet: 10 * time.Minute})
	off.Observe("rxe0/1", true, t0)
	bounce(off, "rxe0/1", t0.Add(time.Hour))
	bounce(off, "rxe0/1", second)
	if c := verdict(off, second.Add(time.Minute)); c.Status != apitype.ConditionOK {
		t.Errorf("long window off: %+v, want ok", c)
	}
}

// TestLongWindowKernel: the kernel's link downs feed the long window from
// the tracker's own record (the follower keeps only kernel_fault_window's,
// so the first down is gone from its list when the second comes); the two
// witnesses are not added: one down seen by each is one down.
func TestLongWindowKernel(t *testing.T) {
	f := NewFlaps(longCfg)
	f.Observe("rxe0/1", true, t0)
	d1, d2 := t0.Add(time.Hour), t0.Add(4*time.Hour)
	s := node()
	if turned := f.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(d1)}, d1); len(turned) > 0 {
		t.Fatalf("one kernel down turned %v", turned)
	}
	turned := f.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(d2)}, d2)
	st := f.Port("rxe0/1", d2)
	if !slices.Equal(turned, []string{"rxe0/1"}) || !st.Long || st.LongKernelDowns != 2 {
		t.Fatalf("two kernel downs 3 h apart: turned %v, state %+v; want rxe0/1 flapping by the long window", turned, st)
	}
	if m := st.Why("rxe0/1", "eth0"); !strings.Contains(m, "the kernel logged 2 link downs of eth0") || !strings.Contains(m, "in 6h") {
		t.Errorf("message %q", m)
	}

	// One down seen by both witnesses, a second by the kernel alone some
	// hours later: two downs, flapping; but one down by each witness
	// alone, hours apart, is not two of either, and is not added.
	g := NewFlaps(longCfg)
	g.Observe("rxe0/1", true, t0)
	bounce(g, "rxe0/1", d1)
	g.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(d1.Add(time.Millisecond))}, d1)
	if st := g.Port("rxe0/1", d1); st.Flapping {
		t.Fatalf("one down seen by both witnesses: %+v, want not flapping", st)
	}
}

// TestFlapRecordRestore: a tracker restored from another's record in the
// same boot is the same tracker (transitions, downs, flapping and its
// quiet window, the kernel's downs already counted); from before a
// reboot the downs and counts carry over, the first observation is a
// baseline and the kernel's downs before the port is ACTIVE are its
// bring-up.
func TestFlapRecordRestore(t *testing.T) {
	f := NewFlaps(longCfg)
	f.Observe("rxe0/1", true, t0)
	for i := range 3 {
		bounce(f, "rxe0/1", t0.Add(time.Duration(i+1)*time.Minute))
	}
	s := node()
	kd := t0.Add(3*time.Minute + 500*time.Millisecond)
	f.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(kd)}, kd)
	now := t0.Add(5 * time.Minute)
	want := f.Port("rxe0/1", now)
	if !want.Flapping || want.Long || want.Transitions != 6 {
		t.Fatalf("before: %+v", want)
	}
	b, err := f.Encode(bootA, now)
	if err != nil || !f.Dirty() {
		t.Fatal(err, f.Dirty())
	}

	g := NewFlaps(FlapConfig{})
	info, err := g.Restore(b, bootA, now)
	if err != nil || !info.SameBoot || info.Ports != 1 {
		t.Fatalf("restore: %+v, %v", info, err)
	}
	g.SetConfig(longCfg) // the configuration in force: the same thresholds keep the downs
	if got := g.Port("rxe0/1", now); got != want {
		t.Fatalf("restored in the same boot: %+v, want %+v", got, want)
	}
	if nf, ng := f.NextChange(now), g.NextChange(now); !nf.Equal(ng) {
		t.Errorf("next change %v, want %v", ng, nf)
	}
	// The port is known: a down now is a transition; the kernel's
	// message already counted is not counted again.
	if g.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(kd.Add(2 * time.Microsecond))}, now) != nil {
		t.Error("a kernel down counted before the restart counted again")
	}
	if !g.Observe("rxe0/1", false, now) || g.Port("rxe0/1", now).Transitions != 7 {
		t.Errorf("a down after the restart: %+v, want transition 7", g.Port("rxe0/1", now))
	}

	// Another boot: the reboot's down and up are no transition, nor the
	// bring-up's kernel link down; the downs before count on.
	later := t0.Add(2 * time.Hour)
	r := NewFlaps(FlapConfig{})
	if info, err := r.Restore(b, bootB, later); err != nil || info.SameBoot {
		t.Fatalf("restore after a reboot: %+v, %v", info, err)
	}
	r.SetConfig(longCfg)
	if !r.Dirty() {
		t.Error("a record of another boot restored: not dirty (the new boot's record is never written)")
	}
	bringUp := later.Add(-time.Minute)
	if r.Observe("rxe0/1", false, later) || r.Observe("rxe0/1", false, later.Add(time.Second)) {
		t.Error("the first reads after a reboot made transitions")
	}
	r.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(bringUp)}, later)
	if !r.Observe("rxe0/1", true, later.Add(2*time.Second)) {
		t.Error("down to up after the baseline is no transition")
	}
	r.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(bringUp, later.Add(time.Second))}, later.Add(3*time.Second))
	st := r.Port("rxe0/1", later.Add(3*time.Second))
	if st.Transitions != 7 || st.LongKernelDowns != 1 || st.LongDowns != 3 || !st.Long {
		t.Errorf("after a reboot: %+v, want 7 transitions, the 3 downs of before (flapping by the long window), no bring-up link down counted", st)
	}
	// A restored port not seen yet is kept by Forget while it holds
	// downs, dropped once it holds none; a port seen is dropped at once.
	u := NewFlaps(FlapConfig{})
	u.Restore(b, bootB, later)
	u.SetConfig(longCfg)
	u.Forget(func(string) bool { return false }, later)
	if len(u.State(later)) != 1 {
		t.Error("Forget dropped a restored port with downs before it was seen")
	}
	u.Forget(func(string) bool { return false }, t0.Add(7*time.Hour))
	if len(u.State(later)) != 0 {
		t.Error("Forget kept a restored port whose downs are all older than the windows")
	}
	r2 := NewFlaps(FlapConfig{})
	r2.Restore(b, bootA, now)
	r2.Observe("rxe0/1", true, now)
	r2.Forget(func(string) bool { return false }, now)
	if len(r2.State(now)) != 0 {
		t.Error("Forget kept a port seen since the restore")
	}

	after := later.Add(time.Minute)
	r.ObserveKernelFaults(s.Devices, []apitype.KernelFault{linkDown(after)}, after)
	if st := r.Port("rxe0/1", after); st.LongKernelDowns != 2 {
		t.Errorf("a kernel down once the port was ACTIVE: %+v, want counted", st)
	}
}

// TestFlapRecordRefused: a record that is not one a tracker writes is
// refused whole with an error, and the tracker keeps its state.
func TestFlapRecordRefused(t *testing.T) {
	f := NewFlaps(longCfg)
	f.Observe("rxe0/1", true, t0)
	bounce(f, "rxe0/1", t0.Add(time.Minute))
	good, _ := f.Encode(bootA, t0.Add(time.Hour))
	edit := func(change func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		change(m)
		b, _ := json.Marshal(m)
		return b
	}
	port := func(m map[string]any) map[string]any { return m["ports"].(map[string]any)["rxe0/1"].(map[string]any) }
	many := make([]string, 2000)
	for i := range many {
		many[i] = t0.Format(time.RFC3339)
	}
	for name, b := range map[string][]byte{
		"garbage":       []byte("\x00\xffnot json"),
		"empty":         nil,
		"truncated":     good[:len(good)/2],
		"two records":   append(append([]byte{}, good...), good...),
		"format":        edit(func(m map[string]any) { m["format"] = 2 }),
		"boot id":       edit(func(m map[string]any) { m["boot_id"] = "../../etc" }),
		"unknown field": edit(func(m map[string]any) { m["extra"] = 1 }),
		"thresholds":    edit(func(m map[string]any) { m["config"].(map[string]any)["downs"] = 0 }),
		"port key":      edit(func(m map[string]any) { m["ports"].(map[string]any)["\x1b[31mevil"] = port(m) }),
		"downs":         edit(func(m map[string]any) { port(m)["downs"] = many }),
		"unsorted": edit(func(m map[string]any) {
			port(m)["downs"] = []string{t0.Add(time.Hour).Format(time.RFC3339), t0.Format(time.RFC3339)}
		}),
		"ports": edit(func(m map[string]any) {
			ps := m["ports"].(map[string]any)
			for i := range MaxFlapRecordPorts + 1 {
				ps[fmt.Sprintf("mlx5_%d/1", i)] = port(m)
			}
		}),
	} {
		g := NewFlaps(longCfg)
		g.Observe("mlx5_0/1", true, t0)
		if _, err := g.Restore(b, bootA, t0.Add(time.Hour)); err == nil {
			t.Errorf("%s: restored", name)
		}
		if st := g.State(t0.Add(time.Hour)); len(st) != 1 || st["mlx5_0/1"].Transitions != 0 {
			t.Errorf("%s: the tracker changed: %d ports, mlx5_0/1 %+v", name, len(st), st["mlx5_0/1"])
		}
	}
	// Downs dated after now (the clock was set back) are dropped, not
	// counted for hours to come.
	fut := edit(func(m map[string]any) {
		port(m)["downs"] = []string{t0.Format(time.RFC3339), t0.Add(48 * time.Hour).Format(time.RFC3339)}
	})
	g := NewFlaps(FlapConfig{})
	if _, err := g.Restore(fut, bootA, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if st := g.Port("rxe0/1", t0.Add(time.Minute)); st.LongDowns != 1 || st.Flapping {
		t.Errorf("a down in the future: %+v, want dropped", st)
	}
}
