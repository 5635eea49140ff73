package packaging

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/health"
)

// Slurm NHC as slurmd's HealthCheckProgram runs it: LBNL NHC's own driver
// (testdata/nhc/nhc, with its scripts/common.nhc and its helpers, vendored
// from github.com/mej/nhc: testdata/nhc/README.md) loads nhc/rdmad.nhc,
// runs the check line of its nhc.conf, and on a failure its real die marks
// the node offline through its real node-mark-offline, which calls
// scontrol. scontrol and sinfo do not exist here: the test puts first on
// NHC's PATH an scontrol that records its arguments and a sinfo that
// answers for an idle node, and a logger that keeps NHC's syslog lines out
// of the host's journal. rdmactl is the real one, against an rdmad-like
// socket that serves the verdict's JSON (verdictSocket).

// nhcRun is one run of NHC.
type nhcRun struct {
	rc       int
	out      string     // NHC's output (-l -: its log goes to stdout)
	scontrol [][]string // the arguments of each scontrol call
	dir      string     // the run's directory (its pwned files, if any)
}

// hostname is the name NHC reads for the node, from where NHC reads it.
func hostname(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/hostname")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// runNHC runs NHC's driver with the configuration line `* || CHECK`
// against rdmactl and the socket sock. sinfo answers sinfoLine for the
// node (`sinfo -o '%t %E' -hn HOST`: its state and its reason).
func runNHC(t *testing.T, rdmactl, sock, check, sinfoLine string) nhcRun {
	t.Helper()
	nhcDir, err := filepath.Abs("testdata/nhc")
	if err != nil {
		t.Fatal(err)
	}
	rdmadNHC, err := filepath.Abs("nhc/rdmad.nhc")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{"bin", "etc", "scripts", "calls"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// NHC sources every *.nhc of its INCDIR, as /etc/nhc/scripts holds
	// common.nhc and the link to /usr/share/rdmad/nhc/rdmad.nhc.
	for link, target := range map[string]string{
		"scripts/common.nhc": filepath.Join(nhcDir, "scripts/common.nhc"),
		"scripts/rdmad.nhc":  rdmadNHC,
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"etc/nhc.conf": "# rdmad's check, as docs/HEALTH.md says to add it\n* || " + check + "\n",
		"bin/scontrol": "#!/bin/sh\nprintf '%s\\0' \"$@\" >\"" + dir + "/calls/scontrol.$$\"\n",
		"bin/sinfo":    "#!/bin/sh\necho '" + sinfoLine + "'\n",
		"bin/logger":   "#!/bin/sh\ncat >>\"" + dir + "/syslog\"\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// NHC sets its own PATH (/sbin:/usr/sbin:/bin:/usr/bin) and finds
	// Slurm by scontrol on it; its VAR=value arguments are how a site
	// overrides its settings on the command line.
	cmd := exec.CommandContext(ctx, filepath.Join(nhcDir, "nhc"),
		"-D", filepath.Join(dir, "etc"), "-c", filepath.Join(dir, "etc/nhc.conf"), "-l", "-", "-t", "30",
		"INCDIR="+filepath.Join(dir, "scripts"), "HELPERDIR="+filepath.Join(nhcDir, "helpers"),
		"PATH="+filepath.Join(dir, "bin")+":/sbin:/usr/sbin:/bin:/usr/bin")
	cmd.Env = append(os.Environ(), "RDMACTL="+rdmactl, "RDMAD_SOCKET="+sock)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	r := nhcRun{out: string(out), dir: dir}
	if ee, ok := err.(*exec.ExitError); ok {
		r.rc = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("nhc: %v\n%s", err, out)
	}
	calls, err := filepath.Glob(filepath.Join(dir, "calls/scontrol.*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		b, err := os.ReadFile(c)
		if err != nil {
			t.Fatal(err)
		}
		r.scontrol = append(r.scontrol, strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"))
	}
	return r
}

// problemOf is a verdict whose one problem is a condition of type typ
// with message msg; the other types are ok.
func problemOf(typ, msg string) apitype.Health {
	h := apitype.Health{Status: apitype.ConditionProblem}
	for _, ct := range apitype.ConditionTypes {
		c := apitype.Condition{Type: ct, Status: apitype.ConditionOK, Reason: "Fine", Message: "fine"}
		if ct == typ {
			c.Status, c.Reason, c.Message, c.Objects = apitype.ConditionProblem, "Broken", msg, []string{"mlx5_0/1"}
		}
		h.Conditions = append(h.Conditions, c)
	}
	return h
}

// safeForNHC is what rdmad.nhc hands NHC's die: each apostrophe a
// typographic one, each control character a space.
func safeForNHC(s string) string {
	s = strings.ReplaceAll(s, "'", "\u2019")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// TestNHCDrainsEveryCondition runs NHC's own driver on a problem of every
// condition type rdmad has, each with a message that holds what a message
// may hold: the apostrophes of rdmad's own texts (the NIC's driver, the
// switch port's counters), double quotes, $(...) and `...` that must not
// run, backslashes, globs, a tab. NHC must call scontrol once to drain the
// node, with the reason NHC writes ("NHC: " and die's text) naming the
// condition and carrying the message. Before, NHC's eval failed on the
// apostrophe: scontrol was never called, and a message with two
// apostrophes around a $(...) ran it.
func TestNHCDrainsEveryCondition(t *testing.T) {
	rdmactl := buildRdmactl(t)
	host := hostname(t)
	// NoDevice as rdmad decides it (the node has no device); the others
	// with the texts of health/ that hold apostrophes, or hostile text.
	noDevice, _ := health.Evaluate(health.Input{Snap: &apitype.Snapshot{Components: map[string]apitype.Component{
		apitype.ComponentInventory: {State: apitype.OK}}}, Now: time.Now()}).Condition(apitype.CondNoDevice)
	if noDevice.Status != apitype.ConditionProblem || !strings.Contains(noDevice.Message, "'") {
		t.Fatalf("NoDevice of a node without devices: %+v (want a problem whose message has an apostrophe)", noDevice)
	}
	messages := map[string]string{
		apitype.CondNoDevice:          noDevice.Message,
		apitype.CondPortFlapping:      "mlx5_0/1 (ens1f0) went down 7 times in 10m0s: check the cable, the transceiver and the switch port's error counters",
		apitype.CondLinkDegraded:      "mlx5_0/1 runs at 100 Gb/s, below min_rate 200: the link trained low; check the cable, the transceiver and the switch port's speed",
		apitype.CondLoopbackBandwidth: "mlx5_0/1 measured 12.0 Gb/s: check the port's rate, its PCIe link and the adapter's load; run rdmactl bw --loopback again to judge it anew",
	}
	for i, typ := range apitype.ConditionTypes {
		if _, ok := messages[typ]; ok {
			continue
		}
		pwned := "PWNED" + typ
		messages[typ] = []string{
			"the NIC's $(touch " + pwned + ") and the port's `touch " + pwned + "2`",
			`a "quoted" \back\slash; rm -rf * | cat & ` + "`touch " + pwned + "`",
			"it's $(touch " + pwned + ")'",
			"tab\there, 100% down, $HOME ${PATH} 'single' \"double\" \\'",
		}[i%4]
	}
	if len(messages) != len(apitype.ConditionTypes) {
		t.Fatalf("%d messages for %d condition types", len(messages), len(apitype.ConditionTypes))
	}
	for _, typ := range apitype.ConditionTypes {
		t.Run(typ, func(t *testing.T) {
			msg := messages[typ]
			r := runNHC(t, rdmactl, verdictSocket(t, problemOf(typ, msg)), "check_rdmad", "idle none")
			reason := "Reason=NHC: check_rdmad: rdmad: " + typ + " problem: " + safeForNHC(msg)
			want := []string{"update", "State=DRAIN", "NodeName=" + host, reason}
			if r.rc == 0 || len(r.scontrol) != 1 || !slices.Equal(r.scontrol[0], want) {
				t.Errorf("nhc exited %d, scontrol called %q; want a failure and one call %q\n%s", r.rc, r.scontrol, want, r.out)
			}
			if m, _ := filepath.Glob(filepath.Join(r.dir, "PWNED*")); len(m) > 0 {
				t.Errorf("the message ran a command: %s exist\n%s", m, r.out)
			}
		})
	}
}

// TestNHCCheck runs check_rdmad's other cases through NHC's own driver:
// a healthy node passes and is not drained (NHC's node-mark-online leaves
// an idle node alone, and resumes one NHC drained), -u lets an unknown
// verdict pass, an unknown verdict without -u drains, an unknown option
// drains naming it, and no rdmad at all is rdmactl's own verdict (this
// host has no RDMA device: a problem).
func TestNHCCheck(t *testing.T) {
	rdmactl := buildRdmactl(t)
	host := hostname(t)
	drain := func(reason string) [][]string {
		return [][]string{{"update", "State=DRAIN", "NodeName=" + host, "Reason=NHC: check_rdmad: " + reason}}
	}
	for _, tc := range []struct {
		name, verdict, check, sinfo string
		rc                          int
		scontrol                    [][]string // nil: not called
		reasonPrefix                string     // instead of scontrol: one drain whose reason starts so
	}{
		{name: "ok", verdict: "ok", check: "check_rdmad", sinfo: "idle none"},
		{name: "ok resumes what NHC drained", verdict: "ok", check: "check_rdmad", sinfo: "drain NHC: check_rdmad: rdmad: PortDown problem: x",
			scontrol: [][]string{{"update", "State=RESUME", "NodeName=" + host}}},
		{name: "problem", verdict: "problem", check: "check_rdmad", sinfo: "idle none", rc: 1,
			scontrol: drain("rdmad: PortDown problem: rxe0/1 (eth0) is DOWN/Disabled: check the cable, the switch port and `ip link`; list a port in [health] ignore if it is not meant to be used")},
		{name: "problem -u", verdict: "problem", check: "check_rdmad -u", sinfo: "idle none", rc: 1,
			reasonPrefix: "Reason=NHC: check_rdmad: rdmad: PortDown problem: rxe0/1"},
		{name: "unknown", verdict: "unknown", check: "check_rdmad", sinfo: "idle none", rc: 1,
			scontrol: drain("health unknown: rdmad: NoDevice unknown: the RDMA inventory has not been read yet")},
		{name: "unknown -u", verdict: "unknown", check: "check_rdmad -u", sinfo: "idle none"},
		{name: "unknown option", verdict: "ok", check: "check_rdmad -x", sinfo: "idle none", rc: 1,
			scontrol: drain("unknown option -x; use -u to let an unknown verdict pass")},
		{name: "no rdmad", check: "check_rdmad -u", sinfo: "idle none", rc: 1,
			reasonPrefix: "Reason=NHC: check_rdmad: rdmad: NoDevice problem: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "gone.sock")
			if tc.verdict != "" {
				sock = verdictSocket(t, verdicts[tc.verdict])
			}
			r := runNHC(t, rdmactl, sock, tc.check, tc.sinfo)
			ok := r.rc == tc.rc
			if tc.reasonPrefix != "" {
				ok = ok && len(r.scontrol) == 1 && len(r.scontrol[0]) == 4 && r.scontrol[0][1] == "State=DRAIN" &&
					strings.HasPrefix(r.scontrol[0][3], tc.reasonPrefix)
			} else {
				ok = ok && len(r.scontrol) == len(tc.scontrol)
				for i := range tc.scontrol {
					ok = ok && slices.Equal(r.scontrol[i], tc.scontrol[i])
				}
			}
			if !ok {
				t.Errorf("nhc exited %d (want %d), scontrol called %q, want %q %q\n%s", r.rc, tc.rc, r.scontrol, tc.scontrol, tc.reasonPrefix, r.out)
			}
			if tc.rc != 0 && !bytes.Contains([]byte(r.out), []byte("Health check failed:  check_rdmad: ")) {
				t.Errorf("NHC's log does not say the check failed:\n%s", r.out)
			}
		})
	}
}
