//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// daemonStatus is the part of the status these tests read: the verbs parts
// and the policy targets.
type daemonStatus struct {
	Loopback []struct {
		Device string `json:"device"`
		Port   int    `json:"port"`
		State  string `json:"state"`
		Rounds uint64 `json:"rounds"`
		Write  struct {
			P50   int64  `json:"p50_ns"`
			Count uint64 `json:"count"`
		} `json:"write"`
		Read struct {
			Count uint64 `json:"count"`
		} `json:"read"`
		Send struct {
			Count uint64 `json:"count"`
		} `json:"send"`
	} `json:"loopback"`
	MRPool []struct {
		Device          string `json:"device"`
		Registered      bool   `json:"registered"`
		RegisteredBytes int64  `json:"registered_bytes"`
		Canary          struct {
			Registrations uint64 `json:"registrations"`
		} `json:"canary"`
	} `json:"mrpool"`
	Policy struct {
		Policies []struct {
			Name    string `json:"name"`
			Targets []struct {
				Kind, Object, Desired, Actual, State, Error string
			} `json:"targets"`
		} `json:"policies"`
	} `json:"policy"`
}

func daemonStatusNow(t *testing.T) daemonStatus {
	t.Helper()
	out, _ := run("rdmactl", "status", "--json")
	var s daemonStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("decode status: %v\n%s", err, out)
	}
	return s
}

// TestDaemonLoopbackAndPool is the verbs issue's "done when": rdmad under
// systemd shows for rxe0 port 1 the MR pool registered and loopback probe
// results that update every second.
func TestDaemonLoopbackAndPool(t *testing.T) {
	requireVM(t)
	waitActive(t)
	var rounds uint64
	waitFor(t, 60*time.Second, "loopback results for rxe0/1", func() (bool, string) {
		s := daemonStatusNow(t)
		for _, p := range s.Loopback {
			if p.Device == roceDev && p.Port == 1 && p.State == "ok" && p.Write.Count > 0 && p.Read.Count > 0 && p.Send.Count > 0 {
				rounds = p.Rounds
				return true, ""
			}
		}
		return false, "loopback: " + mustJSON(s.Loopback)
	})
	time.Sleep(3500 * time.Millisecond)
	s := daemonStatusNow(t)
	for _, p := range s.Loopback {
		if p.Device == roceDev && p.Port == 1 {
			if p.Rounds < rounds+2 {
				t.Errorf("loopback rounds went from %d to %d in 3.5s at 1 Hz", rounds, p.Rounds)
			}
			if p.Write.P50 <= 0 {
				t.Errorf("no write RTT: %+v", p)
			}
		}
	}
	var pool bool
	for _, d := range s.MRPool {
		if d.Device == roceDev {
			pool = d.Registered && d.RegisteredBytes >= 256*4096+8<<20
		}
	}
	if !pool {
		t.Errorf("MR pool of rxe0 not registered with the default classes: %s", mustJSON(s.MRPool))
	}
	human := mustRun(t, "rdmactl", "status")
	for _, want := range []string{"LOOPBACK", "rxe0      1     ok", "MRPOOL", "256x4KiB 8x1MiB"} {
		if !strings.Contains(human, want) {
			t.Errorf("rdmactl status lacks %q:\n%s", want, human)
		}
	}
}

// TestDaemonRoCEPolicy drives the RoCE applier through the daemon: a drop-in
// with [policy.roce] is picked up without a signal and lands in configfs.
func TestDaemonRoCEPolicy(t *testing.T) {
	requireVM(t)
	waitActive(t)
	origTos, origMode := roceReadRaw(t, roceDev, 1)
	dropin := "/etc/rdmad/rdmad.d/60-e2e-roce.toml"
	os.MkdirAll(filepath.Dir(dropin), 0o755)
	if err := os.WriteFile(dropin, []byte("[[policy]]\nname = \"e2e-roce\"\ndevices = [\"rxe*\"]\n[policy.roce]\ntos = 106\nmode = \"v2\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(dropin)
		run("rdmactl", "reload")
		// Put back what the VM had.
		run("sh", "-c", "mkdir -p /sys/kernel/config/rdma_cm/rxe0 && echo "+origTos+" > /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos; rmdir /sys/kernel/config/rdma_cm/rxe0")
	})
	waitFor(t, 30*time.Second, "the RoCE policy applied", func() (bool, string) {
		s := daemonStatusNow(t)
		for _, p := range s.Policy.Policies {
			if p.Name == "e2e-roce" && len(p.Targets) == 1 && (p.Targets[0].State == "in-sync" || p.Targets[0].State == "applied") {
				return true, ""
			}
		}
		return false, mustJSON(s.Policy)
	})
	tos, mode := roceReadRaw(t, roceDev, 1)
	if tos != "106" || mode != "RoCE v2" {
		t.Errorf("configfs has tos %q mode %q, want 106 and RoCE v2 (was %q %q)", tos, mode, origTos, origMode)
	}
	// Drift: someone else writes another value; a policy apply puts it back.
	run("sh", "-c", "mkdir -p /sys/kernel/config/rdma_cm/rxe0 && echo 0 > /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos; rmdir /sys/kernel/config/rdma_cm/rxe0")
	out, _ := run("rdmactl", "policy", "diff")
	if !strings.Contains(out, "e2e-roce") || !strings.Contains(out, "tos=0") {
		t.Errorf("policy diff after drift:\n%s", out)
	}
	mustRun(t, "rdmactl", "policy", "apply")
	if tos, _ := roceReadRaw(t, roceDev, 1); tos != "106" {
		t.Errorf("after policy apply configfs tos is %q, want 106", tos)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
