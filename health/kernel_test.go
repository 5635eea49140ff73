package health

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// linkDown is the kernel log's link-down fault of rxe0's netdev eth0 with
// its messages at times.
func linkDown(times ...time.Time) apitype.KernelFault {
	return apitype.KernelFault{Device: "rxe0", Pattern: "link-down", Class: apitype.KernelNonFatal, Netdev: "eth0",
		Line: "e1000e 0000:00:19.0 eth0: NIC Link is Down", Priority: 6, First: times[0], Last: times[len(times)-1],
		Count: uint64(len(times)), Recent: times}
}

// TestEvaluateKernelClasses: a non-fatal fault is shown in the KernelFault
// condition but is no problem; a fatal one is, and names only its device;
// a fault without a class (an older rdmad's) is fatal.
func TestEvaluateKernelClasses(t *testing.T) {
	s := node()
	s.KernelFaults = []apitype.KernelFault{linkDown(t0)}
	h := Evaluate(Input{Snap: s, Now: t0, Flaps: map[string]FlapState{}})
	c := cond(t, h, apitype.CondKernelFault)
	if !h.Healthy || c.Status != apitype.ConditionOK || c.Reason != "NonFatalOnly" || !strings.Contains(c.Message, "rxe0 eth0 (link-down, 1×)") {
		t.Errorf("one link down: %+v (healthy %v), want ok NonFatalOnly showing it", c, h.Healthy)
	}

	s = node()
	s.Devices = append(s.Devices, apitype.Device{Name: "mlx5_0", Ports: []apitype.Port{{Port: 1, State: "ACTIVE", Netdev: "ens1"}}})
	s.KernelFaults = []apitype.KernelFault{
		{Device: "mlx5_0", Pattern: "mlx5-cmd-timeout", Class: apitype.KernelFatal, Line: "ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource", Count: 1},
		linkDown(t0),
	}
	c = cond(t, Evaluate(Input{Snap: s, Now: t0, Flaps: map[string]FlapState{}}), apitype.CondKernelFault)
	if c.Status != apitype.ConditionProblem || !slices.Equal(c.Objects, []string{"mlx5_0"}) || !strings.Contains(c.Message, "Will cause a leak") ||
		!strings.Contains(c.Message, "non-fatal: rxe0 eth0 (link-down, 1×)") {
		t.Errorf("a fatal and a non-fatal fault: %+v, want a problem of mlx5_0 alone, the link down shown", c)
	}

	s = node()
	s.KernelFaults = []apitype.KernelFault{{Device: "rxe0", Pattern: "link-down", Line: "eth0: Link down", Count: 1}}
	if c := cond(t, Evaluate(Input{Snap: s, Now: t0}), apitype.CondKernelFault); c.Status != apitype.ConditionProblem {
		t.Errorf("a fault without a class: %+v, want a problem (fatal)", c)
	}
}

// TestKernelLinkDownsFlap is #39 item 3's Done-when: a driver-format Link
// down makes no problem alone; three within the flap window make the port
// flapping. Each publication of the faults gives the times again (and a
// restarted follower dates them a few microseconds off): they count once.
// The port stays flapping for the quiet window after the last down.
func TestKernelLinkDownsFlap(t *testing.T) {
	cfg := FlapConfig{Downs: 3, Window: 10 * time.Minute, Quiet: 10 * time.Minute}
	verdict := func(f *Flaps, faults []apitype.KernelFault, now time.Time) (apitype.Health, []string) {
		s := node()
		s.KernelFaults = faults
		turned := f.ObserveKernelFaults(s.Devices, faults, now)
		return Evaluate(Input{Snap: s, Now: now, Flaps: f.State(now)}), turned
	}
	f := NewFlaps(cfg)
	f.Observe("rxe0/1", true, t0) // the inventory's baseline: up

	down1 := t0.Add(time.Minute)
	for range 3 { // three publications of the same one message
		h, turned := verdict(f, []apitype.KernelFault{linkDown(down1)}, down1.Add(time.Second))
		if !h.Healthy || len(turned) > 0 {
			t.Fatalf("one link down: %+v, turned %v; want healthy", h, turned)
		}
	}
	if st := f.Port("rxe0/1", down1); st.KernelDowns != 1 || st.Flapping {
		t.Fatalf("after one link down published thrice: %+v, want 1 kernel down", st)
	}

	down2, down3 := t0.Add(3*time.Minute), t0.Add(5*time.Minute)
	h, _ := verdict(f, []apitype.KernelFault{linkDown(down1, down2)}, down2)
	if !h.Healthy {
		t.Fatalf("two link downs: %+v, want healthy", h)
	}
	h, turned := verdict(f, []apitype.KernelFault{linkDown(down1, down2, down3)}, down3)
	c := cond(t, h, apitype.CondPortFlapping)
	if h.Healthy || c.Status != apitype.ConditionProblem || !slices.Equal(c.Objects, []string{"rxe0/1"}) ||
		!strings.Contains(c.Message, "the kernel logged 3 link downs of eth0") || !slices.Equal(turned, []string{"rxe0/1"}) {
		t.Fatalf("three link downs in 4 minutes: %+v, turned %v; want PortFlapping of rxe0/1", c, turned)
	}
	if k := cond(t, h, apitype.CondKernelFault); k.Status != apitype.ConditionOK {
		t.Errorf("KernelFault %+v: the link downs are non-fatal, want ok", k)
	}

	// A restarted follower republishes the same messages, dated anew.
	jitter := func(ts ...time.Time) []time.Time {
		for i := range ts {
			ts[i] = ts[i].Add(3 * time.Microsecond)
		}
		return ts
	}
	f.SetConfig(FlapConfig{Downs: 3, Window: 10 * time.Minute, Quiet: 5 * time.Minute})
	if h, _ := verdict(f, []apitype.KernelFault{linkDown(jitter(down1, down2, down3)...)}, down3.Add(time.Second)); !h.Healthy {
		t.Errorf("the same downs after new thresholds: %+v, want them not counted again", cond(t, h, apitype.CondPortFlapping))
	}

	// Quiet: the flapping ends quiet after the last down.
	g := NewFlaps(cfg)
	g.Observe("rxe0/1", true, t0)
	verdict(g, []apitype.KernelFault{linkDown(down1, down2, down3)}, down3)
	if next := g.NextChange(down3); !next.Equal(down3.Add(cfg.Quiet)) {
		t.Errorf("next change %v, want the last down plus the quiet window %v", next, down3.Add(cfg.Quiet))
	}
	if h, _ := verdict(g, nil, down3.Add(cfg.Quiet-time.Second)); h.Healthy {
		t.Error("healthy within the quiet window after the third down")
	}
	if h, _ := verdict(g, nil, down3.Add(cfg.Quiet)); !h.Healthy {
		t.Errorf("still a problem after the quiet window: %+v", cond(t, h, apitype.CondPortFlapping))
	}

	// Downs spread wider than the window never flap, nor do those of a
	// netdev that is no port's, nor those of a port never observed.
	w := NewFlaps(cfg)
	w.Observe("rxe0/1", true, t0)
	if h, _ := verdict(w, []apitype.KernelFault{linkDown(t0, t0.Add(6*time.Minute), t0.Add(12*time.Minute))}, t0.Add(12*time.Minute)); !h.Healthy {
		t.Errorf("three downs over 12 minutes: %+v, want healthy", cond(t, h, apitype.CondPortFlapping))
	}
	other := linkDown(down1, down2, down3)
	other.Netdev = "eth9"
	if h, _ := verdict(NewFlaps(cfg), []apitype.KernelFault{linkDown(down1, down2, down3)}, down3); !h.Healthy {
		t.Errorf("downs of a port never observed: %+v, want healthy", cond(t, h, apitype.CondPortFlapping))
	}
	x := NewFlaps(cfg)
	x.Observe("rxe0/1", true, t0)
	if h, _ := verdict(x, []apitype.KernelFault{other}, down3); !h.Healthy {
		t.Errorf("downs of another netdev: %+v, want healthy", cond(t, h, apitype.CondPortFlapping))
	}
}
