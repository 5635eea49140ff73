//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// resProcess is a process of rdmactl resources --json (GET /v1/resources).
type resProcess struct {
	PID         int      `json:"pid"`
	Comm        string   `json:"comm"`
	Kernel      bool     `json:"kernel"`
	Devices     []string `json:"devices"`
	QPs         int      `json:"qps"`
	CQs         int      `json:"cqs"`
	MRs         int      `json:"mrs"`
	PDs         int      `json:"pds"`
	PinnedBytes uint64   `json:"pinned_bytes"`
}

type resAnswer struct {
	Processes []resProcess `json:"processes"`
	Devices   []struct {
		Device      string `json:"device"`
		MRs         int    `json:"mrs"`
		PinnedBytes uint64 `json:"pinned_bytes"`
	} `json:"devices"`
	Error string `json:"error"`
}

func rdmactlResources(t *testing.T) resAnswer {
	t.Helper()
	out := mustRun(t, "rdmactl", "resources", "--json")
	var r resAnswer
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("rdmactl resources --json: %v: %s", err, out)
	}
	if r.Error != "" {
		t.Fatalf("rdmactl resources --json: error %q", r.Error)
	}
	return r
}

func (r resAnswer) process(pid int) (resProcess, bool) {
	for _, p := range r.Processes {
		if p.PID == pid {
			return p, true
		}
	}
	return resProcess{}, false
}

// roceV2GIDIndex returns the index of rxe0 port 1's RoCE v2 GID of an IPv4
// address, which ibv_rc_pingpong needs (-g) on RoCE.
func roceV2GIDIndex(t *testing.T) int {
	t.Helper()
	gids := verbsSysfsGIDs(t)
	idx := make([]int, 0, len(gids))
	for i := range gids {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		if gids[i][1] == "RoCE v2" && strings.HasPrefix(gids[i][0], "0000:0000:0000:0000:0000:ffff:") {
			return i
		}
	}
	t.Fatalf("rxe0 port 1 has no RoCE v2 GID of an IPv4 address: %v", gids)
	return -1
}

// rdmaToolMRs counts the MRs of pid as iproute2's rdma(8) lists them.
func rdmaToolMRs(t *testing.T, pid int) int {
	t.Helper()
	out := mustRun(t, "rdma", "-j", "resource", "show", "mr")
	var mrs []map[string]any
	if err := json.Unmarshal([]byte(out), &mrs); err != nil {
		t.Fatalf("rdma -j resource show mr: %v: %s", err, out)
	}
	n := 0
	for _, mr := range mrs {
		if p, ok := mr["pid"].(float64); ok && int(p) == pid {
			n++
		}
	}
	return n
}

// TestResourcesPingpong: an ibv_rc_pingpong server (its QP, CQ, PD and
// 4096-byte MR created, waiting for a client) appears in rdmactl
// resources with its pid and command name, as many MRs as rdma(8)
// counts, and goes away when it exits.
func TestResourcesPingpong(t *testing.T) {
	requireVM(t)
	gid := roceV2GIDIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out strings.Builder
	cmd := exec.CommandContext(ctx, "ibv_rc_pingpong", "-d", verbsDev, "-g", strconv.Itoa(gid))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ibv_rc_pingpong: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	pid := cmd.Process.Pid

	var p resProcess
	waitFor(t, 90*time.Second, fmt.Sprintf("ibv_rc_pingpong (pid %d) in rdmactl resources", pid), func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("ibv_rc_pingpong exited: %v: %s", err, out.String())
		default:
		}
		r := rdmactlResources(t)
		var ok bool
		p, ok = r.process(pid)
		return ok && p.MRs >= 1 && p.QPs >= 1, fmt.Sprintf("%+v", r.Processes)
	})
	t.Logf("ibv_rc_pingpong: %+v", p)
	if p.Comm != "ibv_rc_pingpong" || p.Kernel || p.QPs < 1 || p.MRs < 1 || p.CQs < 1 || p.PDs < 1 || p.PinnedBytes < 4096 {
		t.Errorf("ibv_rc_pingpong's entry %+v; want comm ibv_rc_pingpong, at least a QP, CQ, PD and MR, at least 4096 bytes pinned", p)
	}
	if len(p.Devices) != 1 || p.Devices[0] != verbsDev {
		t.Errorf("devices %v, want [%s]", p.Devices, verbsDev)
	}
	if n := rdmaToolMRs(t, pid); n != p.MRs {
		t.Errorf("rdma resource show mr lists %d MRs of pid %d, rdmactl resources %d", n, pid, p.MRs)
	}

	// rdmad's own MR pool is there too, and the device totals cover both.
	r := rdmactlResources(t)
	var devMRs int
	var devPinned uint64
	for _, d := range r.Devices {
		if d.Device == verbsDev {
			devMRs, devPinned = d.MRs, d.PinnedBytes
		}
	}
	if devMRs < p.MRs || devPinned < p.PinnedBytes {
		t.Errorf("%s totals: %d MRs, %d bytes; less than ibv_rc_pingpong's alone (%+v)", verbsDev, devMRs, devPinned, p)
	}
	u := showUnit(t)
	if d, ok := r.process(u.MainPID); !ok || d.Comm != "rdmad" || d.MRs == 0 {
		// The kernel names the thread that registered each MR; rdmad
		// counts them under its process.
		t.Errorf("rdmad (pid %d) with its MR pool: %+v (found %v); processes: %+v", u.MainPID, d, ok, r.Processes)
	}

	// The metrics have the device's totals.
	metrics := tclassMetrics(t)
	if !strings.Contains(metrics, `rdmad_rdma_resources{device="rxe0",type="mr"}`) || !strings.Contains(metrics, `rdmad_rdma_pinned_bytes{device="rxe0"}`) {
		t.Errorf("metrics lack rdmad_rdma_resources and rdmad_rdma_pinned_bytes for rxe0")
	}

	cmd.Process.Kill()
	waitFor(t, 60*time.Second, "ibv_rc_pingpong gone from rdmactl resources", func() (bool, string) {
		_, ok := rdmactlResources(t).process(pid)
		return !ok, fmt.Sprintf("pid %d still listed", pid)
	})
}
