package daemon

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// passiveTargets are systemd's passive targets (systemd.special(7)): only
// the units that provide what they stand for pull them in; a consumer
// such as rdmad may order itself after one but must not want it.
var passiveTargets = []string{
	"cryptsetup-pre.target", "first-boot-complete.target", "getty-pre.target", "local-fs-pre.target",
	"network.target", "network-pre.target", "nss-lookup.target", "nss-user-lookup.target",
	"remote-fs-pre.target", "rpcbind.target", "time-set.target", "time-sync.target",
}

// TestUnitPullsNoPassiveTarget: rdmad.service pulls in no passive target
// (Wants=, Requires=, Requisite=, BindsTo=, Upholds=).
func TestUnitPullsNoPassiveTarget(t *testing.T) {
	const path = "../systemd/rdmad.service"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch k {
		case "Wants", "Requires", "Requisite", "BindsTo", "Upholds":
			for _, u := range strings.Fields(v) {
				for _, p := range passiveTargets {
					if u == p {
						t.Errorf("%s:%d: %s=%s: %s is a passive target that only its providers pull in; order with After= instead", path, n, k, u, p)
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestUnitPreventsConfigRestart: rdmad.service does not restart rdmad when
// it exits with ExitConfig (a bad configuration and no accepted one to run
// on): a restart would fail the same way, in a loop.
func TestUnitPreventsConfigRestart(t *testing.T) {
	b, err := os.ReadFile("../systemd/rdmad.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && k == "RestartPreventExitStatus" {
			for _, f := range strings.Fields(v) {
				if f == strconv.Itoa(ExitConfig) {
					return
				}
			}
		}
	}
	t.Errorf("rdmad.service has no RestartPreventExitStatus=%d (ExitConfig)", ExitConfig)
}
