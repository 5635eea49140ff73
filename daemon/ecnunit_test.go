package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/unitjob"
	"github.com/rdmad/rdmad/policy/ecn"
)

// TestWriteECNThroughUnitNoBus: without a system bus the want file is
// written, the start reaches nothing, the error says so and is marked for
// a retry at the next pass (ecn.ErrNotStarted), and the want file is gone.
func TestWriteECNThroughUnitNoBus(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	dir := filepath.Join(t.TempDir(), "ecn")
	err := writeECNThroughUnit(context.Background(), dir, "eth0", ecn.Want{NP: []int{3}})
	if !errors.Is(err, ecn.ErrNotStarted) || !errors.Is(err, unitjob.ErrNoBus) || !strings.Contains(err.Error(), "rdmad-ecn@eth0.service") {
		t.Errorf("writeECNThroughUnit without a bus = %v, want ErrNotStarted and ErrNoBus, naming the unit", err)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("want directory after the start: %v, %v; want it empty", ents, err)
	}
}

// TestWriteECNThroughUnitRefusesNames: a netdev name that is a path or
// carries a newline is refused before any file or unit is touched.
func TestWriteECNThroughUnitRefusesNames(t *testing.T) {
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "nobus"))
	base := t.TempDir()
	dir := filepath.Join(base, "ecn")
	for _, nd := range []string{"../eth0", "eth0/../../etc", "eth0\n", "eth0\nExecStart=/bin/sh", "", ".."} {
		err := writeECNThroughUnit(context.Background(), dir, nd, ecn.Want{NP: []int{3}})
		if err == nil || !strings.Contains(err.Error(), "invalid netdev name") || errors.Is(err, unitjob.ErrNoBus) {
			t.Errorf("writeECNThroughUnit(%q) = %v, want the name refused before the bus is asked", nd, err)
		}
	}
	if ents, _ := os.ReadDir(base); len(ents) != 0 {
		t.Errorf("refused names left %v in %s", ents, base)
	}
}

// TestECNUnitFile: the template keeps the properties the design rests on
// (docs/SECURITY.md, "ECN under systemd"), each with the reason it matters.
func TestECNUnitFile(t *testing.T) {
	const path = "../systemd/rdmad-ecn@.service"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	props := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(k, "#") {
			props[section+k] = append(props[section+k], v)
		}
	}
	for _, c := range []struct {
		key, want, why string
	}{
		{"[Service]ReadWritePaths", "-/sys/class/net/%I/ecn", "the one opening: that netdev's ecn directory, resolved when the instance starts"},
		{"[Service]ExecStart", "/usr/sbin/rdmad --write-ecn %I", "the writer, with the unescaped netdev"},
		{"[Service]Type", "oneshot", "its job ends when the writer exited, which rdmad waits for"},
		{"[Service]CapabilityBoundingSet", "", "uid 0 writes the root-owned 0644 files without capabilities"},
		{"[Service]ProtectKernelTunables", "yes", "the rest of /sys stays read-only"},
		{"[Service]ProtectSystem", "strict", "/run/rdmad (the want files) read-only for the writer"},
		{"[Service]RestrictAddressFamilies", "none", "the writer opens no socket"},
		{"[Service]NoNewPrivileges", "yes", ""},
	} {
		if got := props[c.key]; len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: %s = %q, want exactly %q (%s)", path, c.key, got, c.want, c.why)
		}
	}
	for key, why := range map[string]string{
		"[Service]RuntimeDirectory": "it would be /run/rdmad, removed with rdmad's socket when the instance stops",
		"[Unit]After":               "rdmad starts the instance from its first pass, before it is ready: ordering after rdmad.service deadlocks until the timeout",
		"[Unit]Requisite":           "rdmad is still activating at its first pass",
		"[Unit]Requires":            "starting the instance must never start or restart rdmad",
		"[Service]BindPaths":        "no other opening",
		"[Service]PrivateNetwork":   "systemd mounts a sysfs of the unit's own network namespace then: the netdev is not in it",
	} {
		if got, ok := props[key]; ok {
			t.Errorf("%s: %s=%q: %s", path, key, got, why)
		}
	}
	if _, ok := props["[Install]WantedBy"]; ok {
		t.Errorf("%s has [Install]: it is static, rdmad starts its instances", path)
	}
}
