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

// pollStatus is the part of the status TestDaemonProbeBusyPoll reads.
type pollStatus struct {
	Config struct {
		Error string `json:"error"`
	} `json:"config"`
	Loopback []struct {
		Device string `json:"device"`
		Port   int    `json:"port"`
		State  string `json:"state"`
		Poll   string `json:"poll"`
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
}

func pollStatusNow(t *testing.T) pollStatus {
	t.Helper()
	out, _ := run("rdmactl", "status", "--json")
	var s pollStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("decode status: %v\n%s", err, out)
	}
	return s
}

// TestDaemonProbeBusyPoll (#18 item 3): with [probe] poll = "busy" in a
// drop-in, rdmad's loopback probe on rxe0 port 1 runs in busy-poll mode
// (the status says so) and gets RTT samples of every operation; a drop-in
// with a poll mode that does not exist is rejected with the key's name,
// and the probe keeps running in the last good mode.
func TestDaemonProbeBusyPoll(t *testing.T) {
	requireVM(t)
	waitActive(t)
	dropin := "/etc/rdmad/rdmad.d/70-e2e-poll.toml"
	os.MkdirAll(filepath.Dir(dropin), 0o755)
	t.Cleanup(func() {
		os.Remove(dropin)
		run("rdmactl", "reload")
	})
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(dropin, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("[probe]\npoll = \"busy\"\nloopback_interval = \"100ms\"\n")
	mustRun(t, "rdmactl", "reload")
	var p50 int64
	waitFor(t, 60*time.Second, "busy-poll loopback samples on rxe0/1", func() (bool, string) {
		s := pollStatusNow(t)
		for _, p := range s.Loopback {
			if p.Device == roceDev && p.Port == 1 && p.Poll == "busy" && p.State == "ok" &&
				p.Write.Count >= 10 && p.Read.Count >= 10 && p.Send.Count >= 10 && p.Write.P50 > 0 {
				p50 = p.Write.P50
				return true, ""
			}
		}
		return false, "loopback: " + mustJSON(s.Loopback)
	})
	t.Logf("busy poll: RDMA WRITE p50 %v", time.Duration(p50))

	write("[probe]\npoll = \"spin\"\nloopback_interval = \"100ms\"\n")
	run("rdmactl", "reload") // fails: the configuration is rejected
	s := pollStatusNow(t)
	if !strings.Contains(s.Config.Error, "70-e2e-poll.toml:2: probe.poll: \"spin\" is not a poll mode; use \"event\"") {
		t.Errorf("config error after poll = \"spin\": %q, want it to name the file, line, key and the modes", s.Config.Error)
	}
	for _, p := range s.Loopback {
		if p.Device == roceDev && p.Port == 1 && p.Poll != "busy" {
			t.Errorf("after a rejected drop-in the probe's poll mode is %q, want the last good one, busy", p.Poll)
		}
	}
}
