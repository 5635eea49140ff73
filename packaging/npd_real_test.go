package packaging

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/health"
	"github.com/rdmad/rdmad/internal/testenv"
)

// node-problem-detector's own custom plugin monitor on rdmad's plugin
// config: testdata/npd is a module that requires NPD (v1.36.0, from the Go
// module proxy) and runs its pkg/custompluginmonitor, the code behind
// --config.custom-plugin-monitor, printing each status it sends to NPD's
// exporters. It runs the shipped config with two changes only a test needs:
// every rule's path is the rdmactl built here, and NPD runs the rules
// again as soon as a cycle ends (invoke_interval 100ms) instead of every
// minute. The rules' arguments, timeouts, concurrency and
// max_output_length are the shipped ones.

// npdCond is the part of NPD's types.Condition the test reads.
type npdCond struct {
	Type, Status, Reason, Message string
}

// npdStatus is the part of NPD's types.Status the test reads.
type npdStatus struct {
	Source     string    `json:"source"`
	Conditions []npdCond `json:"conditions"`
}

// buildNPDMonitor builds testdata/npd.
func buildNPDMonitor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "npd-custom-plugin")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = "testdata/npd"
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := "building node-problem-detector's custom plugin monitor (testdata/npd, modules from the Go module proxy): " + err.Error() + "\n" + string(out)
		if testenv.Strict() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// switchSocket serves GET /v1/health with whatever verdict v holds.
func switchSocket(t *testing.T, v *atomic.Pointer[apitype.Health]) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rdmad-npd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "rdmad.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(v.Load())
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// npdMonitor is NPD's plugin monitor running the shipped config against
// a socket whose verdict the test sets.
type npdMonitor struct {
	t        *testing.T
	verdict  atomic.Pointer[apitype.Health]
	statuses chan npdStatus
	stderr   *strings.Builder
	maxLen   int
	// defaults are the conditions as the config declares them (False).
	defaults map[string]npdCond
	// last is the last status NPD sent, by condition type.
	last map[string]npdCond
	// settling are the conditions the last step named, which NPD may
	// not have run again yet when the next step begins.
	settling []string
}

// startNPD starts NPD's monitor on the shipped config with the verdict h.
func startNPD(t *testing.T, h apitype.Health) *npdMonitor {
	t.Helper()
	npd := buildNPDMonitor(t)
	rdmactl := buildRdmactl(t)
	b, err := os.ReadFile("npd/rdmad-health.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, r := range cfg["rules"].([]any) {
		rule := r.(map[string]any)
		if rule["path"] != "/usr/bin/rdmactl" {
			t.Fatalf("rule path %v, want /usr/bin/rdmactl", rule["path"])
		}
		rule["path"] = rdmactl
	}
	pc := cfg["pluginConfig"].(map[string]any)
	pc["invoke_interval"] = "100ms"
	m := &npdMonitor{t: t, statuses: make(chan npdStatus, 1000), stderr: &strings.Builder{},
		maxLen: int(pc["max_output_length"].(float64)), defaults: map[string]npdCond{}, last: map[string]npdCond{}}
	for _, c := range cfg["conditions"].([]any) {
		c := c.(map[string]any)
		typ := c["type"].(string)
		m.defaults[typ] = npdCond{Type: typ, Status: "False", Reason: c["reason"].(string), Message: c["message"].(string)}
	}
	cfgFile := filepath.Join(t.TempDir(), "rdmad-health.json")
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m.verdict.Store(&h)
	sock := switchSocket(t, &m.verdict)
	cmd := exec.Command(npd, "-config", cfgFile)
	cmd.Env = append(os.Environ(), "RDMAD_SOCKET="+sock)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = m.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var s npdStatus
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				m.statuses <- s
			}
		}
		close(m.statuses)
	}()
	return m
}

func (m *npdMonitor) set(h apitype.Health) { m.verdict.Store(&h) }

// await waits until NPD sends a status in which each condition of want is
// as given and every other condition is at its default (False, the
// config's reason and message), and returns that status. A condition
// neither in want nor named by the last step (which NPD may not have run
// again yet) that leaves its default meanwhile is an error: a problem of
// one type must not touch another type's condition.
func (m *npdMonitor) await(step string, want map[string]npdCond) map[string]npdCond {
	m.t.Helper()
	settling := m.settling
	m.settling = nil
	for typ := range want {
		m.settling = append(m.settling, typ)
	}
	deadline := time.After(30 * time.Second)
	reported := map[string]bool{}
	for {
		select {
		case s, open := <-m.statuses:
			if !open {
				m.t.Fatalf("%s: NPD's monitor ended; stderr:\n%s", step, m.stderr.String())
			}
			if s.Source != "rdmad" {
				continue
			}
			got := map[string]npdCond{}
			for _, c := range s.Conditions {
				got[c.Type] = c
			}
			m.last = got
			done := len(got) == len(m.defaults)
			for typ, def := range m.defaults {
				w, named := want[typ]
				if !named {
					w = def
				}
				if got[typ] == w {
					continue
				}
				done = false
				if !named && !slices.Contains(settling, typ) && !reported[typ] {
					reported[typ] = true
					m.t.Errorf("%s: %s left its default: %+v", step, typ, got[typ])
				}
			}
			if done {
				return got
			}
		case <-deadline:
			var diff []string
			for typ, def := range m.defaults {
				w, named := want[typ]
				if !named {
					w = def
				}
				if m.last[typ] != w {
					diff = append(diff, fmt.Sprintf("%s is %+v, want %+v", typ, m.last[typ], w))
				}
			}
			slices.Sort(diff)
			m.t.Fatalf("%s: after 30s:\n%s", step, strings.Join(diff, "\n"))
		}
	}
}

// problemCond is NPD's condition for a problem: True, the rule's reason,
// rdmactl's line as the message.
func problemCond(typ, reason, msg string) npdCond {
	return npdCond{Type: typ, Status: "True", Reason: reason, Message: msg}
}

// realProblems are the messages rdmad's verdict (health.Evaluate) has for
// a problem of every condition type on a node of eight NICs (mlx5_10 to
// mlx5_17, RoCE netdevs enp129s0f1np1 ...; InfiniBand for the subnet
// manager) with, where a condition lists its objects, every NIC concerned:
// the condition's longest real message (four objects, "and 4 more", the
// fix), with realistic texts where the verdict quotes one (a kernel log
// line, a component's error). fixes are the fix each message ends with,
// for the types whose message has one.
func realProblems(t *testing.T) (msgs, fixes map[string]string) {
	t.Helper()
	const nics = 8
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	port := func(i int) string { return fmt.Sprintf("mlx5_%d/1", 10+i) }
	node := func(ib bool) *apitype.Snapshot {
		s := &apitype.Snapshot{Config: apitype.Config{Generation: 1}, Components: map[string]apitype.Component{
			apitype.ComponentInventory: {State: apitype.OK}, apitype.ComponentVerbs: {State: apitype.OK},
			apitype.ComponentMRPool: {State: apitype.OK}, apitype.ComponentLoopback: {State: apitype.OK},
			apitype.ComponentAPI: {State: apitype.OK}}}
		for i := range nics {
			name, netdev, ll := fmt.Sprintf("mlx5_%d", 10+i), fmt.Sprintf("enp%ds0f1np1", 129+i), "Ethernet"
			if ib {
				netdev, ll = fmt.Sprintf("ibp%ds0", 129+i), "InfiniBand"
			}
			s.Devices = append(s.Devices, apitype.Device{Name: name, Uverbs: fmt.Sprintf("/dev/infiniband/uverbs%d", i),
				PCI: fmt.Sprintf("0000:%02x:00.1", 0x81+i), Ports: []apitype.Port{{Port: 1, State: "ACTIVE", PhysState: "LinkUp",
					Netdev: netdev, RateGbps: 400, Width: "4X", LinkLayer: ll, LID: 5, SMLID: 1}}})
			s.Loopback = append(s.Loopback, apitype.LoopbackPort{Device: name, Port: 1, State: "ok"})
			s.MRPool = append(s.MRPool, apitype.PoolDevice{Device: name, Registered: true})
		}
		return s
	}
	type scenario struct {
		mod func(s *apitype.Snapshot, in *health.Input)
		fix string
	}
	scenarios := map[string]scenario{
		apitype.CondConfig: {func(s *apitype.Snapshot, _ *health.Input) {
			s.Config.Error = `/etc/rdmad/rdmad.d/50-fabric.toml:14: [[policy]] fabric: "pfc_prio" is not a key (did you mean "pfc_priorities"?)`
		}, "fix it and run rdmactl reload"},
		apitype.CondInputRefused: {func(s *apitype.Snapshot, _ *health.Input) {
			s.RefusedFiles = []apitype.RefusedFile{
				{Key: "probe.key_file", Path: "/etc/rdmad/fleet.key", Why: "owned by uid 1000, not root and readable or writable by group or others (mode 0644): a key others can read is no secret",
					Kept: "the peer probes go on with the key and settings in force", Fix: "chown root: /etc/rdmad/fleet.key && chmod 600 /etc/rdmad/fleet.key, then rdmactl reload"},
				{Key: "probe.peers_file", Path: "/etc/rdmad/peers", Why: "owned by uid 1000, not root and writable by group or others (mode 0666): it decides whom rdmad trusts",
					Kept: "the 4095 peers read from it before stay in force", Fix: "chown root: /etc/rdmad/peers && chmod go-w /etc/rdmad/peers, then rdmactl reload"}}
		}, "fix: chown root: /etc/rdmad/peers && chmod go-w /etc/rdmad/peers, then rdmactl reload"},
		apitype.CondNoDevice: {func(s *apitype.Snapshot, _ *health.Input) { s.Devices, s.Loopback, s.MRPool = nil, nil, nil },
			"then `ls /sys/class/infiniband` must list the device"},
		apitype.CondDeviceMissing: {func(s *apitype.Snapshot, in *health.Input) {
			for i := range nics {
				in.Expect.Devices = append(in.Expect.Devices, health.ExpectedDevice{PCI: fmt.Sprintf("0000:%02x:00.1", 0xc1+i), Rail: fmt.Sprintf("rail%d", i)})
			}
			in.Expect.Count = 2 * nics
		}, "reseat or replace the adapter, or declare what the node has in [health.expect]"},
		apitype.CondVerbs: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range s.Devices {
				s.Devices[i].Uverbs = ""
			}
		}, "load ib_uverbs (modprobe ib_uverbs); until then no program can use verbs on it"},
		apitype.CondPortDown: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range s.Devices {
				s.Devices[i].Ports[0].State, s.Devices[i].Ports[0].PhysState = "DOWN", "Polling"
			}
		}, "check the cable, the switch port and `ip link`; list a port in [health] ignore if it is not meant to be used"},
		apitype.CondPortFlapping: {func(s *apitype.Snapshot, in *health.Input) {
			for i := range nics {
				in.Flaps[port(i)] = health.FlapState{Downs: 2, KernelDowns: 12, Window: 10 * time.Minute, Flapping: true,
					Long: true, LongDowns: 2, LongKernelDowns: 12, LongWindow: 6 * time.Hour}
			}
		}, "check the cable, the transceiver and the switch port's error counters"},
		apitype.CondSubnetManager: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range s.Devices {
				p := &s.Devices[i].Ports[0]
				p.State, p.LID, p.SMLID = "INIT", 0xffff, 0
			}
		}, "start opensm on one node of the subnet (systemctl enable --now opensm) or check the switch's SM"},
		apitype.CondLinkDegraded: {func(s *apitype.Snapshot, in *health.Input) {
			in.Expect.MinRateGbps = map[string]float64{}
			for i := range s.Devices {
				in.Expect.MinRateGbps[port(i)] = 400
				s.Devices[i].Ports[0].RateGbps, s.Devices[i].Ports[0].Width = 200, "2X"
			}
		}, "the link trained low; check the cable, the transceiver and the switch port's speed"},
		apitype.CondPCIeDegraded: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range s.Devices {
				s.Devices[i].PCIe = &apitype.PCIeLink{Address: s.Devices[i].PCI, Speed: 16, Width: 8, MaxSpeed: 32, MaxWidth: 16,
					PathMaxSpeed: 32, PathMaxWidth: 16, Limit: "0000:80:01.1"}
			}
		}, "reseat the card or move it to a slot of its width and generation; `lspci -vv` LnkSta shows the same"},
		apitype.CondLoopback: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range s.Loopback {
				s.Loopback[i].State, s.Loopback[i].LastError = "failed", "RDMA READ: work completion error IBV_WC_RETRY_EXC_ERR (12) after 7 retries"
			}
		}, ""},
		apitype.CondLoopbackBandwidth: {func(s *apitype.Snapshot, in *health.Input) {
			s.Bandwidth = &apitype.BandwidthStatus{}
			for i := range nics {
				s.Bandwidth.Loopback = append(s.Bandwidth.Loopback, apitype.BandwidthResult{Loopback: true, Local: port(i), Op: "write", QPs: 4, Gbps: 187.25, Time: t0})
			}
			in.Expect.MinLoopbackShare = 0.8
		}, "check the port's rate, its PCIe link and the adapter's load; run rdmactl bw --loopback again to judge it anew"},
		apitype.CondMRPool: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range s.MRPool {
				s.MRPool[i].Canary.LastError = "ibv_reg_mr: Cannot allocate memory"
			}
		}, "check memlock (ulimit -l) and rdmactl doctor"},
		apitype.CondMemlock: {func(s *apitype.Snapshot, _ *health.Input) {
			s.Policy.Policies = []apitype.PolicyStatus{{Name: "memlock", Targets: []apitype.Target{{Kind: "memlock", Object: "@rdma",
				Desired: "unlimited", Actual: "8MiB", State: apitype.Drifted, Error: "/etc/security/limits.conf sets 8MiB after rdmad's /etc/security/limits.d/99-rdmad.conf"}}}}
		}, ""},
		apitype.CondPeers: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range nics {
				s.Peers.Ports = append(s.Peers.Ports, apitype.PeerPort{Key: port(i),
					LocalFault: fmt.Sprintf("all 64 peers are down from %s: suspect this port, its cable or switch port, or this host before 64 remote faults", port(i))})
			}
		}, ""},
		apitype.CondKernelFault: {func(s *apitype.Snapshot, _ *health.Input) {
			for i := range nics {
				s.KernelFaults = append(s.KernelFaults, apitype.KernelFault{Device: fmt.Sprintf("mlx5_%d", 10+i), Pattern: "mlx5-health", Class: apitype.KernelFatal, Count: 3,
					Line: fmt.Sprintf("mlx5_core 0000:%02x:00.1: mlx5_health_try_recover:340:(pid 2117): handling bad device here, health syndrome 0x8 (fw: Fatal internal error)", 0x81+i)})
			}
		}, "`journalctl -k` has the context"},
		apitype.CondPolicy: {func(s *apitype.Snapshot, _ *health.Input) {
			p := apitype.PolicyStatus{Name: "fabric"}
			for i := range nics {
				p.Targets = append(p.Targets, apitype.Target{Kind: "pfc", Object: fmt.Sprintf("enp%ds0f1np1", 129+i), Desired: "0,0,0,1,0,0,0,0",
					Actual: "0,0,0,0,0,0,0,0", State: apitype.TargetError, Error: "dcbnl: operation not supported"})
			}
			s.Policy.Policies = []apitype.PolicyStatus{p}
		}, "rdmactl policy diff shows the rest"},
		apitype.CondDaemon: {func(s *apitype.Snapshot, _ *health.Input) {
			s.Components[apitype.ComponentEventsUevent] = apitype.Component{State: apitype.Error, Error: "socket: operation not permitted"}
			s.Components[apitype.ComponentDBus] = apitype.Component{State: apitype.Error, Error: "connect to the system bus: dial unix /run/dbus/system_bus_socket: no such file or directory"}
			s.Components[apitype.ComponentEventsRtnetlink] = apitype.Component{State: apitype.Error, Error: "netlink receive: no buffer space available"}
		}, ""},
	}
	msgs, fixes = map[string]string{}, map[string]string{}
	for _, typ := range apitype.ConditionTypes {
		sc, ok := scenarios[typ]
		if !ok {
			t.Fatalf("no real problem of %s here: add one to realProblems", typ)
		}
		s := node(typ == apitype.CondSubnetManager)
		in := health.Input{Snap: s, Now: t0, Flaps: map[string]health.FlapState{}}
		sc.mod(s, &in)
		c, _ := health.Evaluate(in).Condition(typ)
		if c.Status != apitype.ConditionProblem || !strings.HasSuffix(c.Message, sc.fix) {
			t.Fatalf("%s: %+v; want a problem whose message ends with %q", typ, c, sc.fix)
		}
		msgs[typ], fixes[typ] = c.Message, sc.fix
	}
	return msgs, fixes
}

// TestNPDEveryConditionType runs NPD's plugin monitor on the shipped
// config while the verdict holds a problem of each condition type in
// turn, with its longest real message: NPD's condition RDMA<Type> must be
// True with reason <Type> and the whole message, fix included (it fits
// max_output_length: rdmactl cuts nothing, and neither does NPD), every
// other type's condition False, and the aggregate RDMAUnhealthy True with
// "<Type>: <message>". Before, one condition said every problem with the
// reason RDMAHealthCheckFailed, in 80 bytes that cut away the fix.
func TestNPDEveryConditionType(t *testing.T) {
	msgs, fixes := realProblems(t)
	m := startNPD(t, fullVerdict())
	m.await("ok", nil)
	for _, typ := range apitype.ConditionTypes {
		msg := msgs[typ]
		if len(typ)+2+len(msg) > m.maxLen {
			t.Errorf("%s: %q (%d bytes with its type) is longer than max_output_length %d: its fix would be cut", typ, msg, len(typ)+2+len(msg), m.maxLen)
		}
		m.set(problemOf(typ, msg))
		got := m.await(typ, map[string]npdCond{
			"RDMA" + typ: problemCond("RDMA"+typ, typ, msg),
			npdAggregate: problemCond(npdAggregate, npdAggregateReason, typ+": "+msg),
		})
		if fixes[typ] != "" && !strings.HasSuffix(got["RDMA"+typ].Message, fixes[typ]) {
			t.Errorf("%s: message %q lacks the fix %q", typ, got["RDMA"+typ].Message, fixes[typ])
		}
	}
	m.set(fullVerdict())
	m.await("ok again", nil)
}

// TestNPDConditionFollowsCause runs NPD's plugin monitor on the shipped
// config while the cause changes and rdmactl's exit code does not: a port
// down, then flapping (the aggregate says the new cause; before, with
// enable_message_change_based_condition_update off, NPD kept the first
// problem's message), then another port flapping (RDMAPortFlapping says
// the new port, its exit code 1 throughout), then a port down as well
// (two types True at once, each its own; the aggregate the worst, the
// first), then a kernel fault whose message is longer than
// max_output_length (cut after a whole word with "...", within it), ok
// (every condition back to the config's default) and unknown.
func TestNPDConditionFollowsCause(t *testing.T) {
	downMsg := verdicts["problem"].Conditions[0].Message
	down := apitype.Condition{Type: apitype.CondPortDown, Status: apitype.ConditionProblem, Reason: "PortNotActive", Message: downMsg}
	flap := func(port, netdev string) apitype.Condition {
		return apitype.Condition{Type: apitype.CondPortFlapping, Status: apitype.ConditionProblem, Reason: "PortFlapping", Objects: []string{port},
			Message: port + " (" + netdev + ") went down 7 times in 10m0s: check the cable, the transceiver and the switch port's error counters"}
	}
	flap0, flap1 := flap("mlx5_0/1", "ens1f0"), flap("mlx5_1/1", "ens1f1")

	m := startNPD(t, fullVerdict(down))
	m.await("PortDown", map[string]npdCond{
		"RDMAPortDown": problemCond("RDMAPortDown", "PortDown", downMsg),
		npdAggregate:   problemCond(npdAggregate, npdAggregateReason, "PortDown: "+downMsg)})

	m.set(fullVerdict(flap0))
	m.await("PortFlapping after PortDown", map[string]npdCond{
		"RDMAPortFlapping": problemCond("RDMAPortFlapping", "PortFlapping", flap0.Message),
		npdAggregate:       problemCond(npdAggregate, npdAggregateReason, "PortFlapping: "+flap0.Message)})

	m.set(fullVerdict(flap1))
	m.await("another port flapping", map[string]npdCond{
		"RDMAPortFlapping": problemCond("RDMAPortFlapping", "PortFlapping", flap1.Message),
		npdAggregate:       problemCond(npdAggregate, npdAggregateReason, "PortFlapping: "+flap1.Message)})

	m.set(fullVerdict(down, flap1))
	m.await("PortDown and PortFlapping", map[string]npdCond{
		"RDMAPortDown":     problemCond("RDMAPortDown", "PortDown", downMsg),
		"RDMAPortFlapping": problemCond("RDMAPortFlapping", "PortFlapping", flap1.Message),
		npdAggregate:       problemCond(npdAggregate, npdAggregateReason, "PortDown: "+downMsg)})

	// Four faults with kernel lines as long as rdmad keeps them
	// (daemon/kmsg MaxLine, 256 bytes): longer than max_output_length.
	kernel := health.Evaluate(health.Input{Now: time.Now(), Snap: &apitype.Snapshot{
		Components: map[string]apitype.Component{apitype.ComponentInventory: {State: apitype.OK}},
		KernelFaults: func() (f []apitype.KernelFault) {
			for i := range 4 {
				line := fmt.Sprintf("mlx5_core 0000:%02x:00.0: mlx5_cmd_out_err:838:(pid 2117): CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3), syndrome (0x1a3f5c), err(-22)", 0x81+i)
				f = append(f, apitype.KernelFault{Device: fmt.Sprintf("mlx5_%d", i), Pattern: "err", Class: apitype.KernelFatal, Count: 9,
					Line: line + strings.Repeat(" context", (256-len(line))/8)})
			}
			return f
		}()}})
	longFault, _ := kernel.Condition(apitype.CondKernelFault)
	if longFault.Status != apitype.ConditionProblem || len(longFault.Message) <= m.maxLen {
		t.Fatalf("kernel fault %+v: want a problem longer than %d bytes", longFault, m.maxLen)
	}
	m.set(fullVerdict(longFault))
	got := m.await("a kernel fault longer than max_output_length", map[string]npdCond{
		"RDMAKernelFault": problemCond("RDMAKernelFault", "KernelFault", wordCut(longFault.Message, m.maxLen)),
		npdAggregate:      problemCond(npdAggregate, npdAggregateReason, wordCut("KernelFault: "+longFault.Message, m.maxLen))})
	for _, typ := range []string{"RDMAKernelFault", npdAggregate} {
		if msg := got[typ].Message; len(msg) > m.maxLen || !strings.HasSuffix(msg, "...") {
			t.Errorf("%s: message of %d bytes, want at most %d ending in ...: %q", typ, len(msg), m.maxLen, msg)
		}
	}

	m.set(fullVerdict())
	m.await("ok", nil)

	// Unknown: NPD gives the condition its default reason with rdmactl's
	// line as the message (pkg/custompluginmonitor, generateStatus).
	unknown := verdicts["unknown"].Conditions[0]
	m.set(fullVerdict(unknown))
	m.await("unknown", map[string]npdCond{
		"RDMANoDevice": {Type: "RDMANoDevice", Status: "Unknown", Reason: "NoDeviceNotDetected", Message: unknown.Message},
		npdAggregate:   {Type: npdAggregate, Status: "Unknown", Reason: npdAggregateOK, Message: "NoDevice: " + unknown.Message}})
}

// wordCut is msg as rdmactl cuts it for n bytes: whole if it fits, else
// its words that fit with "...". It checks that rule itself rather than
// calling rdmactl's code.
func wordCut(msg string, n int) string {
	if len(msg) <= n {
		return msg
	}
	cut := msg[:n-len("...")]
	if msg[len(cut)] != ' ' {
		cut = cut[:strings.LastIndexByte(cut, ' ')]
	}
	return strings.TrimRight(cut, " ,;:.") + "..."
}
