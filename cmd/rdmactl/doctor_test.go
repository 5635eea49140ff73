package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/doctor"
	"github.com/rdmad/rdmad/inventory/ethtool"
)

// TestDoctorPipedIsWhole: rdmactl doctor | cat prints every line of a
// configuration error and of the MR pool's errors, as rdmad's own checks
// word them, each continuation line under the start of its message; nothing
// is cut ("(and more)") in a pipe, nor on a terminal (#16 item 11).
func TestDoctorPipedIsWhole(t *testing.T) {
	const (
		cfgErr  = "/etc/rdmad/rdmad.toml:3: daemon.x: unknown key; remove it\n/etc/rdmad/rdmad.toml:9: probe.window: 0 is out of range; give 1 to 10000"
		poolErr = "register the pool on mlx5_0: cannot allocate memory (RLIMIT_MEMLOCK 64 KiB)\nraise [memlock] daemon or LimitMEMLOCK= in rdmad.service"
	)
	proc := t.TempDir()
	limits := "Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max locked memory         unlimited            unlimited            bytes     \n"
	if err := os.MkdirAll(filepath.Join(proc, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "4242", "limits"), []byte(limits), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &apitype.Snapshot{Version: "t", State: apitype.Degraded, PID: 4242,
		Config: apitype.Config{Generation: 3, Error: cfgErr},
		MRPool: []apitype.PoolDevice{{Device: "mlx5_0", LastError: poolErr}}}
	env := &doctor.Env{Snapshot: s, ProcRoot: proc, Resources: func() (apitype.Resources, error) { return apitype.Resources{}, errors.New("no RDMA netlink") }}
	var checks []doctor.Check
	for _, c := range doctor.Checks {
		if c.ID == "daemon" || c.ID == "memlock" {
			checks = append(checks, c)
		}
	}
	rep := apitype.DoctorReport{Checks: doctor.Run(env, checks)}
	rep.Worst = doctor.Worst(rep.Checks)
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/doctor": answer(t, rep)})

	cfg := strings.Split(cfgErr, "\n")
	pool := strings.Split(poolErr, "\n")
	msgCol := strings.Repeat(" ", len("[FAIL] daemon       "))
	wants := []string{
		"[FAIL] daemon       configuration rejected, generation 3 stays in force: " + cfg[0] + "\n" + msgCol + cfg[1] + "\n",
		"[WARN] memlock      rdmad may lock unlimited, but memory registration fails on mlx5_0: " + pool[0] + "\n" + msgCol + pool[1] +
			" (who pins memory is unknown: no RDMA netlink)\n",
	}
	check := func(how, out string) {
		t.Helper()
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("%s: doctor lacks\n%s\nin:\n%s", how, want, out)
			}
		}
		if strings.Contains(out, "(and more)") || strings.Contains(out, "...") {
			t.Errorf("%s: doctor cuts a text:\n%s", how, out)
		}
	}
	code, out, errs := rdmactl(t, "--socket", sock, "doctor", "--interval", "0")
	if code != exitDegraded {
		t.Errorf("piped: exit %d, want %d; stderr %s", code, exitDegraded, errs)
	}
	check("piped", out)
	_, out = onTerminal(t, "--socket", sock, "doctor", "--interval", "0")
	check("on a terminal", out)
}

// TestLocalNet: when rdmad does not answer, rdmactl doctor reads the pause
// and discard counters itself: its sockets are opened at the first read
// only, a failed open answers every read, and a read of this host's
// loopback (no pause parameters, no ethtool -S statistics) goes through
// ethtool netlink and the ioctls to an unsupported netdev, as rdmad's does.
func TestLocalNet(t *testing.T) {
	opens := 0
	failing := &localNet{open: func(*ethtool.Config) (*ethtool.Reader, error) {
		opens++
		return nil, errors.New("no generic netlink here")
	}}
	failing.close() // nothing opened: nothing to close
	if opens != 0 {
		t.Fatalf("%d opens before the first read", opens)
	}
	for range 2 {
		if _, err := failing.read("ens1f0np0"); err == nil || !strings.Contains(err.Error(), "no generic netlink here") {
			t.Errorf("read after a failed open: %v, want the open's error", err)
		}
	}
	if opens != 1 {
		t.Errorf("%d opens for two reads, want 1", opens)
	}

	real := &localNet{open: ethtool.Open}
	defer real.close()
	_, err := real.read("lo")
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "lo") {
		t.Errorf("read of lo: %v, want an unsupported netdev named lo", err)
	}
}
