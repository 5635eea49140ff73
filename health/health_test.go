package health

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// node is a healthy node: one device with one active port, verbs, a
// passing loopback probe and a working pool.
func node() *apitype.Snapshot {
	return &apitype.Snapshot{
		Config: apitype.Config{Generation: 1},
		Components: map[string]apitype.Component{
			apitype.ComponentInventory: {State: apitype.OK}, apitype.ComponentVerbs: {State: apitype.OK},
			apitype.ComponentMRPool: {State: apitype.OK}, apitype.ComponentLoopback: {State: apitype.OK},
			apitype.ComponentAPI: {State: apitype.OK},
		},
		Devices: []apitype.Device{{Name: "rxe0", Uverbs: "/dev/infiniband/uverbs0", Ports: []apitype.Port{
			{Port: 1, State: "ACTIVE", PhysState: "LinkUp", Netdev: "eth0", RateGbps: 10, Width: "1X"}}}},
		Loopback: []apitype.LoopbackPort{{Device: "rxe0", Port: 1, State: "ok"}},
		MRPool:   []apitype.PoolDevice{{Device: "rxe0", Registered: true}},
	}
}

func cond(t *testing.T, h apitype.Health, typ string) apitype.Condition {
	t.Helper()
	c, ok := h.Condition(typ)
	if !ok {
		t.Fatalf("no condition %s in %+v", typ, h)
	}
	return c
}

func TestEvaluateHealthyNode(t *testing.T) {
	h := Evaluate(Input{Snap: node(), Now: t0, Flaps: map[string]FlapState{}})
	if !h.Healthy || h.Status != apitype.ConditionOK {
		t.Fatalf("healthy node: %+v", h)
	}
	var types []string
	for _, c := range h.Conditions {
		types = append(types, c.Type)
		if c.Since != t0 || c.Reason == "" || c.Message == "" {
			t.Errorf("%s: since %v reason %q message %q", c.Type, c.Since, c.Reason, c.Message)
		}
	}
	if !slices.Equal(types, apitype.ConditionTypes) {
		t.Errorf("types %v, want %v", types, apitype.ConditionTypes)
	}
}

// TestEvaluateProblems: each fault makes its own condition a problem that
// names the object, and leaves the others ok.
func TestEvaluateProblems(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mod     func(s *apitype.Snapshot, in *Input)
		typ     string
		objects []string
		msg     string
	}{
		{"config rejected", func(s *apitype.Snapshot, _ *Input) { s.Config.Error = "rdmad.toml:3: bad\nmore" },
			apitype.CondConfig, nil, "rdmad.toml:3: bad"},
		{"no device", func(s *apitype.Snapshot, _ *Input) {
			s.Devices, s.Loopback, s.MRPool = nil, nil, nil
		}, apitype.CondNoDevice, nil, "no RDMA device"},
		{"no uverbs node", func(s *apitype.Snapshot, _ *Input) { s.Devices[0].Uverbs = "" },
			apitype.CondVerbs, []string{"rxe0"}, "modprobe ib_uverbs"},
		{"verbs unavailable", func(s *apitype.Snapshot, _ *Input) {
			s.Components[apitype.ComponentVerbs] = apitype.Component{State: apitype.Unavailable, Reason: "no libibverbs device"}
		}, apitype.CondVerbs, []string{"rxe0"}, "no libibverbs device"},
		{"port down", func(s *apitype.Snapshot, _ *Input) {
			s.Devices[0].Ports[0].State, s.Devices[0].Ports[0].PhysState = "DOWN", "Disabled"
		}, apitype.CondPortDown, []string{"rxe0/1"}, "rxe0/1 (eth0) is DOWN/Disabled"},
		{"flapping", func(_ *apitype.Snapshot, in *Input) {
			in.Flaps["rxe0/1"] = FlapState{Downs: 4, Window: time.Minute, Flapping: true}
		}, apitype.CondPortFlapping, []string{"rxe0/1"}, "went down 4 times in 1m0s"},
		{"rate below min_rate", func(_ *apitype.Snapshot, in *Input) {
			in.Expect.MinRateGbps = map[string]float64{"rxe0/1": 25}
		}, apitype.CondLinkDegraded, []string{"rxe0/1"}, "runs at 10 Gb/s 1X, below its min_rate 25 Gb/s"},
		{"pcie degraded", func(s *apitype.Snapshot, _ *Input) {
			s.Devices[0].PCIe = &apitype.PCIeLink{Address: "0000:03:00.0", Speed: 16, Width: 8, MaxSpeed: 16, MaxWidth: 16,
				PathMaxSpeed: 16, PathMaxWidth: 16}
		}, apitype.CondPCIeDegraded, []string{"rxe0"}, "16 GT/s x8, its path allows 16 GT/s x16"},
		{"loopback fails", func(s *apitype.Snapshot, _ *Input) {
			s.Loopback[0].State, s.Loopback[0].LastError = "failed", "work completion error"
		}, apitype.CondLoopback, []string{"rxe0/1"}, "work completion error"},
		{"loopback bandwidth below min_loopback_gbps", func(s *apitype.Snapshot, in *Input) {
			s.Bandwidth = &apitype.BandwidthStatus{Loopback: []apitype.BandwidthResult{
				{Loopback: true, Local: "rxe0/1", Op: "write", QPs: 4, Gbps: 7.5, Time: t0}}}
			in.Expect.MinLoopbackGbps = 8
		}, apitype.CondLoopbackBandwidth, []string{"rxe0/1"}, "rxe0/1 reached 7.50 Gb/s in its last loopback test (write, 4 QP(s), 2026-12-01T12:00:00Z), below its threshold 8.00 Gb/s"},
		{"loopback bandwidth below min_loopback_share", func(s *apitype.Snapshot, in *Input) {
			s.Bandwidth = &apitype.BandwidthStatus{Loopback: []apitype.BandwidthResult{
				{Loopback: true, Local: "rxe0/1", Op: "read", QPs: 1, Gbps: 8.5, Time: t0}}}
			in.Expect.MinLoopbackGbps, in.Expect.MinLoopbackShare = 5, 0.9 // 0.9 of 10 Gb/s outweighs 5
		}, apitype.CondLoopbackBandwidth, []string{"rxe0/1"}, "below its threshold 9.00 Gb/s"},
		{"canary fails", func(s *apitype.Snapshot, _ *Input) { s.MRPool[0].Canary.LastError = "Cannot allocate memory" },
			apitype.CondMRPool, []string{"rxe0"}, "ulimit -l"},
		{"memlock drifted", func(s *apitype.Snapshot, _ *Input) {
			s.Policy.Policies = []apitype.PolicyStatus{{Name: "memlock", Targets: []apitype.Target{
				{Kind: "memlock", Object: "rdmad", Desired: "unlimited", Actual: "64KiB", State: apitype.Drifted}}}}
		}, apitype.CondMemlock, nil, "rdmad: 64KiB, declared unlimited"},
		{"local fault", func(s *apitype.Snapshot, _ *Input) {
			s.Peers.Ports = []apitype.PeerPort{{Key: "rxe0/1", LocalFault: "all 3 peers down"}}
		}, apitype.CondPeers, []string{"rxe0/1"}, "all 3 peers down"},
		{"kernel fault", func(s *apitype.Snapshot, _ *Input) {
			s.KernelFaults = []apitype.KernelFault{{Device: "rxe0", Pattern: "err", Line: "infiniband rxe0: boom", Count: 2}}
		}, apitype.CondKernelFault, []string{"rxe0"}, "infiniband rxe0: boom"},
		{"policy error", func(s *apitype.Snapshot, _ *Input) {
			s.Policy.Policies = []apitype.PolicyStatus{{Name: "fabric", Targets: []apitype.Target{
				{Kind: "mtu", Object: "eth0", Desired: "9000", Actual: "1500", State: apitype.TargetError, Error: "EPERM"}}}}
		}, apitype.CondPolicy, []string{"eth0"}, "fabric mtu of eth0 is error"},
		{"component error", func(s *apitype.Snapshot, _ *Input) {
			s.Components[apitype.ComponentEventsUevent] = apitype.Component{State: apitype.Error, Error: "socket: EPERM"}
		}, apitype.CondDaemon, nil, "events-uevent: socket: EPERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := node()
			in := Input{Snap: s, Now: t0, Flaps: map[string]FlapState{}}
			tc.mod(s, &in)
			h := Evaluate(in)
			if h.Healthy || h.Status != apitype.ConditionProblem {
				t.Fatalf("verdict %v %s, want a problem", h.Healthy, h.Status)
			}
			c := cond(t, h, tc.typ)
			if c.Status != apitype.ConditionProblem || !slices.Equal(c.Objects, tc.objects) || !strings.Contains(c.Message, tc.msg) {
				t.Errorf("%s: %+v, want a problem about %v saying %q", tc.typ, c, tc.objects, tc.msg)
			}
			for _, o := range h.Conditions {
				if o.Type != tc.typ && o.Status == apitype.ConditionProblem && !(tc.typ == apitype.CondNoDevice) {
					t.Errorf("%s is a problem too: %+v", o.Type, o)
				}
			}
			if w := h.Worst(); w == nil || w.Type != tc.typ {
				t.Errorf("worst %+v, want %s", w, tc.typ)
			}
		})
	}
}

func TestEvaluateIgnoreAndUnknown(t *testing.T) {
	s := node()
	s.Devices[0].Ports = append(s.Devices[0].Ports, apitype.Port{Port: 2, State: "DOWN", PhysState: "Polling"})
	h := Evaluate(Input{Snap: s, Now: t0, Expect: Expect{Ignore: []string{"rxe0/2"}}})
	if !h.Healthy {
		t.Errorf("an ignored down port: %+v", cond(t, h, apitype.CondPortDown))
	}
	// Before the first inventory read nothing is known: unknown, not ok.
	s = node()
	delete(s.Components, apitype.ComponentInventory)
	h = Evaluate(Input{Snap: s, Now: t0})
	if h.Status != apitype.ConditionUnknown || cond(t, h, apitype.CondNoDevice).Reason != "NotReadYet" {
		t.Errorf("before the inventory: %s %+v", h.Status, cond(t, h, apitype.CondNoDevice))
	}
	// rdmactl's local verdict: the inventory alone decides a problem;
	// without one, what rdmad alone knows is unknown.
	h = Evaluate(Input{Snap: node(), Now: t0, Local: true})
	if h.Status != apitype.ConditionUnknown || cond(t, h, apitype.CondLoopback).Status != apitype.ConditionUnknown {
		t.Errorf("local: %s", h.Status)
	}
	s = node()
	s.Devices[0].Ports[0].State = "DOWN"
	if h = Evaluate(Input{Snap: s, Now: t0, Local: true}); h.Status != apitype.ConditionProblem {
		t.Errorf("local with a down port: %s", h.Status)
	}
}

func TestEvaluateKeepsSince(t *testing.T) {
	s := node()
	h1 := Evaluate(Input{Snap: s, Now: t0})
	s.Devices[0].Ports[0].State = "DOWN"
	h2 := Evaluate(Input{Snap: s, Prev: h1, Now: t0.Add(time.Minute)})
	if c := cond(t, h2, apitype.CondPortDown); c.Since != t0.Add(time.Minute) {
		t.Errorf("changed condition since %v", c.Since)
	}
	if c := cond(t, h2, apitype.CondConfig); c.Since != t0 {
		t.Errorf("unchanged condition since %v, want %v", c.Since, t0)
	}
}

func TestForDevice(t *testing.T) {
	s := node()
	s.Devices = append(s.Devices, apitype.Device{Name: "rxe1", Uverbs: "/dev/infiniband/uverbs1",
		Ports: []apitype.Port{{Port: 1, State: "DOWN"}}})
	s.Config.Error = "bad"
	h := Evaluate(Input{Snap: s, Now: t0})
	d0, d1 := h.ForDevice("rxe0"), h.ForDevice("rxe1")
	if c := cond(t, d0, apitype.CondPortDown); c.Status != apitype.ConditionOK {
		t.Errorf("rxe0 sees rxe1's port: %+v", c)
	}
	if c := cond(t, d1, apitype.CondPortDown); c.Status != apitype.ConditionProblem || !slices.Equal(c.Objects, []string{"rxe1/1"}) {
		t.Errorf("rxe1: %+v", c)
	}
	// The node's conditions concern every device.
	if d0.Healthy || cond(t, d0, apitype.CondConfig).Status != apitype.ConditionProblem {
		t.Errorf("rxe0 without the config error: %+v", d0)
	}
}

func TestFlaps(t *testing.T) {
	f := NewFlaps(FlapConfig{Downs: 3, Window: time.Minute, Quiet: 2 * time.Minute})
	now := t0
	if f.Observe("rxe0/1", true, now) {
		t.Error("the first observation is a transition")
	}
	cycle := func() {
		now = now.Add(5 * time.Second)
		f.Observe("rxe0/1", false, now)
		now = now.Add(5 * time.Second)
		f.Observe("rxe0/1", true, now)
	}
	cycle()
	cycle()
	if st := f.State(now)["rxe0/1"]; st.Flapping || st.Downs != 2 || st.Transitions != 4 {
		t.Fatalf("after 2 cycles: %+v", st)
	}
	cycle()
	if st := f.State(now)["rxe0/1"]; !st.Flapping || st.Downs != 3 || st.Transitions != 6 {
		t.Fatalf("after 3 cycles in 30 s: %+v", st)
	}
	if next := f.NextChange(now); !next.Equal(now.Add(2 * time.Minute)) {
		t.Errorf("next change %v", next)
	}
	// Still flapping within the quiet window, cleared after it.
	if !f.State(now.Add(time.Minute))["rxe0/1"].Flapping {
		t.Error("cleared before the quiet window")
	}
	if st := f.State(now.Add(2 * time.Minute)); st["rxe0/1"].Flapping || st["rxe0/1"].Downs != 0 {
		t.Errorf("after the quiet window: %+v", st["rxe0/1"])
	}
	// Downs spread wider than the window never flap.
	g := NewFlaps(FlapConfig{Downs: 3, Window: time.Minute})
	g.Observe("p", true, t0)
	for i := range 10 {
		at := t0.Add(time.Duration(i) * 40 * time.Second)
		g.Observe("p", false, at)
		g.Observe("p", true, at.Add(time.Second))
		if g.State(at.Add(time.Second))["p"].Flapping {
			t.Fatalf("flapping after down %d at 40 s apart", i+1)
		}
	}
	// New thresholds count anew; the same ones keep what was counted.
	f.SetConfig(FlapConfig{Downs: 3, Window: time.Minute, Quiet: 2 * time.Minute})
	cycle()
	cycle()
	cycle()
	if !f.State(now)["rxe0/1"].Flapping {
		t.Fatal("same thresholds: the count was dropped")
	}
	f.SetConfig(FlapConfig{Downs: 3, Window: time.Minute, Quiet: time.Minute})
	if st := f.State(now)["rxe0/1"]; st.Flapping || st.Downs != 0 || st.Transitions != 12 {
		t.Errorf("after new thresholds: %+v, want no downs, not flapping, 12 transitions", st)
	}
	g.Forget(func(string) bool { return false }, t0)
	if len(g.State(t0)) != 0 {
		t.Error("Forget kept a port")
	}
}

// TestEvaluateLoopbackBandwidth: the condition judges each port's last
// loopback test against the threshold in force, so that a lower threshold
// (a reload) clears it without a new test; a port without a test, an
// ignored one or one no longer present is not judged, and a share of an
// unknown rate gives no threshold.
func TestEvaluateLoopbackBandwidth(t *testing.T) {
	res := func(gbps float64, local string) *apitype.BandwidthStatus {
		return &apitype.BandwidthStatus{Loopback: []apitype.BandwidthResult{{Loopback: true, Local: local, Op: "write", QPs: 1, Gbps: gbps, Time: t0}}}
	}
	for _, tc := range []struct {
		name   string
		bw     *apitype.BandwidthStatus
		expect Expect
		mod    func(s *apitype.Snapshot)
		status string
		reason string
	}{
		{"no threshold", res(1, "rxe0/1"), Expect{}, nil, apitype.ConditionOK, "NoThreshold"},
		{"no test yet", nil, Expect{MinLoopbackGbps: 8}, nil, apitype.ConditionOK, "NotTested"},
		{"at the threshold", res(8, "rxe0/1"), Expect{MinLoopbackGbps: 8}, nil, apitype.ConditionOK, "AtThreshold"},
		{"below a raised threshold", res(8, "rxe0/1"), Expect{MinLoopbackGbps: 8.01}, nil, apitype.ConditionProblem, "BelowThreshold"},
		{"share at 0.5 of 10 Gb/s", res(5, "rxe0/1"), Expect{MinLoopbackShare: 0.5}, nil, apitype.ConditionOK, "AtThreshold"},
		{"share of the netdev speed", res(20, "rxe0/1"), Expect{MinLoopbackShare: 0.9}, func(s *apitype.Snapshot) {
			s.Devices[0].Ports[0].RateGbps, s.Devices[0].Ports[0].NetdevSpeedMbps = 0, 25000
		}, apitype.ConditionProblem, "BelowThreshold"},
		{"share of an unknown rate", res(1, "rxe0/1"), Expect{MinLoopbackShare: 0.9}, func(s *apitype.Snapshot) {
			s.Devices[0].Ports[0].RateGbps = 0
		}, apitype.ConditionUnknown, "RateUnknown"},
		{"ignored port", res(1, "rxe0/1"), Expect{MinLoopbackGbps: 8, Ignore: []string{"rxe0"}}, nil, apitype.ConditionOK, "NotTested"},
		{"port gone", res(1, "rxe9/1"), Expect{MinLoopbackGbps: 8}, nil, apitype.ConditionOK, "NotTested"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := node()
			s.Bandwidth = tc.bw
			if tc.mod != nil {
				tc.mod(s)
			}
			c := cond(t, Evaluate(Input{Snap: s, Now: t0, Expect: tc.expect}), apitype.CondLoopbackBandwidth)
			if c.Status != tc.status || c.Reason != tc.reason {
				t.Errorf("%+v; want %s %s", c, tc.status, tc.reason)
			}
			if (c.Status == apitype.ConditionProblem) != (len(c.Objects) == 1 && c.Objects[0] == "rxe0/1") {
				t.Errorf("objects %v for status %s", c.Objects, c.Status)
			}
		})
	}
	local := cond(t, Evaluate(Input{Snap: node(), Now: t0, Local: true}), apitype.CondLoopbackBandwidth)
	if local.Status != apitype.ConditionUnknown || local.Reason != "DaemonNotAnswering" {
		t.Errorf("local verdict %+v; want unknown DaemonNotAnswering", local)
	}
}

// TestEvaluateKernelLogNote: a note of the kernel log's follower (the
// test switch RDMAD_TEST_KMSG_USERSPACE=1) shows in the KernelFault
// condition, which stays ok.
func TestEvaluateKernelLogNote(t *testing.T) {
	s := node()
	s.Components[apitype.ComponentKernelLog] = apitype.Component{State: apitype.OK,
		Error: "RDMAD_TEST_KMSG_USERSPACE=1: lines written to /dev/kmsg from userspace count as the kernel's"}
	h := Evaluate(Input{Snap: s, Now: t0})
	c := cond(t, h, apitype.CondKernelFault)
	if !h.Healthy || c.Status != apitype.ConditionOK || !strings.Contains(c.Message, "RDMAD_TEST_KMSG_USERSPACE=1") {
		t.Errorf("KernelFault %+v (healthy %v), want ok naming the switch", c, h.Healthy)
	}
}

// TestEvaluateIgnoredDeviceVerbs is #40 item 5: a device in [health]
// ignore is left out of VerbsUnavailable and NoUverbsNode as its ports are
// left out of the port conditions; before, an ignored mlx4_0 kept the
// node's verbs condition a problem.
func TestEvaluateIgnoredDeviceVerbs(t *testing.T) {
	mlx4 := apitype.Device{Name: "mlx4_0", Ports: []apitype.Port{{Port: 1, State: "DOWN", PhysState: "Disabled"}}}
	ignore := Expect{Ignore: []string{"mlx4_0"}}

	s := node()
	s.Devices = append(s.Devices, mlx4) // no verbs node
	if c := cond(t, Evaluate(Input{Snap: s, Now: t0, Expect: ignore}), apitype.CondVerbs); c.Status != apitype.ConditionOK {
		t.Errorf("an ignored device without a verbs node: %s %s: %s", c.Status, c.Reason, c.Message)
	}
	if c := cond(t, Evaluate(Input{Snap: s, Now: t0}), apitype.CondVerbs); c.Status != apitype.ConditionProblem || c.Reason != "NoUverbsNode" {
		t.Errorf("the same device not ignored: %s %s; want a NoUverbsNode problem", c.Status, c.Reason)
	}

	s = node()
	s.Devices = append(s.Devices, mlx4)
	s.Devices[1].Uverbs = "/dev/infiniband/uverbs1"
	s.Components[apitype.ComponentVerbs] = apitype.Component{State: apitype.Unavailable, Error: "libibverbs: no provider"}
	c := cond(t, Evaluate(Input{Snap: s, Now: t0, Expect: ignore}), apitype.CondVerbs)
	if c.Status != apitype.ConditionProblem || c.Reason != "VerbsUnavailable" || len(c.Objects) != 1 || c.Objects[0] != "rxe0" {
		t.Errorf("verbs unavailable beside an ignored device: %s %s %v; want a problem naming rxe0 alone", c.Status, c.Reason, c.Objects)
	}

	s = node()
	s.Devices = []apitype.Device{mlx4}
	s.Components[apitype.ComponentVerbs] = apitype.Component{State: apitype.Unavailable, Error: "libibverbs: no provider"}
	if c := cond(t, Evaluate(Input{Snap: s, Now: t0, Expect: ignore}), apitype.CondVerbs); c.Status != apitype.ConditionOK || c.Reason != "AllIgnored" {
		t.Errorf("verbs unavailable with only an ignored device: %s %s: %s; want ok, AllIgnored", c.Status, c.Reason, c.Message)
	}
}
