package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rdmad/rdmad/client/apitype"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: what the program writes to the
// terminal end (tty) can be read from the other (ptmx).
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open /dev/pts/%d: %v", n, err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestIsTerminal: a terminal is one; a pipe, a file and a buffer are not.
func TestIsTerminal(t *testing.T) {
	_, tty := openPTY(t)
	if !isTerminal(tty) {
		t.Errorf("a pseudo-terminal is not taken for a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, out := range map[string]io.Writer{"a pipe": w, "a file": f, "a buffer": &bytes.Buffer{}} {
		if isTerminal(out) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
}

// Long texts of the status: a component's reason with its fix, a failed
// policy target's error over two lines, and the MR pool's last error.
var (
	longReason = apitype.NoDevice + " (and this sentence makes it longer than any table cell, to see that nothing is lost)"
	longTarget = "dcb: set PFC on ens1f0: operation not supported; the NIC firmware has DCB disabled: enable it with mlxconfig -d 0000:3b:00.0 set LLDP_NB_DCBX_P1=1\nthen reboot or reset the NIC"
	longMRPool = "register 1 MiB region on mlx5_0: cannot allocate memory (RLIMIT_MEMLOCK 64 KiB): raise [memlock] daemon or LimitMEMLOCK= in rdmad.service"
)

func longStatus(t *testing.T) string {
	s := apitype.Snapshot{
		Version: "t", State: apitype.Degraded, StartedAt: time.Now(),
		Devices: []apitype.Device{},
		MRPool:  []apitype.PoolDevice{{Device: "mlx5_0", LastError: longMRPool}},
		Policy: apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "fabric", Mode: "enforce", Targets: []apitype.Target{
			{Kind: "qos", Object: "ens1f0", Desired: "pfc 3", Actual: "-", State: apitype.TargetError, Error: longTarget},
		}}}},
		Components: map[string]apitype.Component{
			"inventory": {State: apitype.Unavailable, Reason: longReason, Since: time.Now()},
			"verbs":     {State: apitype.Error, Error: strings.Repeat("x", 200) + " END", Since: time.Now()},
		},
	}
	return fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, s)})
}

// TestStatusPipedIsWhole: when stdout is not a terminal (rdmactl status |
// cat, a file, a journal), no text is shortened: the whole fix is there.
func TestStatusPipedIsWhole(t *testing.T) {
	sock := longStatus(t)
	code, out, errs := rdmactl(t, "--socket", sock, "status")
	if code != exitDegraded {
		t.Errorf("exit %d, want %d; stderr %s", code, exitDegraded, errs)
	}
	for _, want := range []string{longReason, strings.Repeat("x", 200) + " END", longMRPool, strings.Split(longTarget, "\n")[0]} {
		if !strings.Contains(out, want) {
			t.Errorf("piped status lacks the whole text %q:\n%s", want, out)
		}
	}
	// The error's second line continues under its column.
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasSuffix(l, strings.Split(longTarget, "\n")[0]) {
			col := strings.Index(l, "error: ")
			if i+1 >= len(lines) || lines[i+1] != strings.Repeat(" ", col)+"then reboot or reset the NIC" {
				t.Errorf("the second line of the error is not under its column %d:\n%s", col, out)
			}
		}
	}
	if strings.Contains(out, "...") || strings.Contains(out, "shortened") {
		t.Errorf("piped status shortens something:\n%s", out)
	}
}

// onTerminal runs rdmactl with stdout on a pseudo-terminal and returns what
// the terminal showed.
func onTerminal(t *testing.T, args ...string) (int, string) {
	ptmx, tty := openPTY(t)
	return onTerminalPair(t, ptmx, tty, args...)
}

func onTerminalPair(t *testing.T, ptmx, tty *os.File, args ...string) (int, string) {
	// Output as written: no \r\n for \n.
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	got := make(chan string)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, ptmx) // until EIO once tty is closed
		got <- b.String()
	}()
	var errb bytes.Buffer
	code := run(t.Context(), args, tty, &errb)
	tty.Close()
	return code, <-got
}

// TestStatusTerminalShortens: on a terminal, long texts are cut to fit the
// table, with a line that says so and how to see them; -l/--full shows them
// whole.
func TestStatusTerminalShortens(t *testing.T) {
	sock := longStatus(t)
	_, out := onTerminal(t, "--socket", sock, "status")
	if strings.Contains(out, longReason) || strings.Contains(out, longMRPool) || !strings.Contains(out, "...") {
		t.Errorf("on a terminal, the long texts are not shortened:\n%s", out)
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "rdmactl status --full (-l) prints them whole") {
		t.Errorf("on a terminal, shortened texts are not announced:\n%s", out)
	}
	for _, flag := range []string{"--full", "-l"} {
		_, out := onTerminal(t, "--socket", sock, "status", flag)
		for _, want := range []string{longReason, longMRPool, strings.Split(longTarget, "\n")[1]} {
			if !strings.Contains(out, want) {
				t.Errorf("status %s on a terminal lacks %q:\n%s", flag, want, out)
			}
		}
		if strings.Contains(out, "shortened") {
			t.Errorf("status %s says texts are shortened:\n%s", flag, out)
		}
	}
}

// onTerminalOf is onTerminal on a terminal of cols columns.
func onTerminalOf(t *testing.T, cols uint16, args ...string) (int, string) {
	ptmx, tty := openPTY(t)
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
		t.Fatalf("set the terminal's size: %v", err)
	}
	return onTerminalPair(t, ptmx, tty, args...)
}

// TestStatusFitsTheTerminal: on a terminal, no line of the status's tables
// is wider than the terminal, whatever its width (a sentence, such as the
// no-device one, wraps as the terminal wraps it: nothing is lost); a wide
// one shows what fits whole.
func TestStatusFitsTheTerminal(t *testing.T) {
	sock := longStatus(t)
	for _, cols := range []uint16{40, 80, 132} {
		_, out := onTerminalOf(t, cols, "--socket", sock, "status")
		for _, l := range strings.Split(out, "\n") {
			if n := utf8.RuneCountInString(l); n > int(cols) && !strings.HasPrefix(l, "DEGRADED: ") {
				t.Errorf("%d columns: a line of %d:\n%s", cols, n, l)
			}
		}
		if !strings.Contains(strings.Join(strings.Fields(out), " "), "rdmactl status --full (-l) prints them whole") {
			t.Errorf("%d columns: shortened texts are not announced:\n%s", cols, out)
		}
	}
	_, out := onTerminalOf(t, 250, "--socket", sock, "status")
	if !strings.Contains(out, strings.Repeat("x", 200)+" END") || !strings.Contains(out, longMRPool) {
		t.Errorf("a 250-column terminal does not show what fits whole:\n%s", out)
	}
}

// TestFitLine: a cut line ends in "..." within the width; padding is
// dropped, not cut; an escaped control counts as its escape.
func TestFitLine(t *testing.T) {
	for _, c := range []struct {
		in    string
		width int
		want  string
		cut   bool
	}{
		{"short", 10, "short", false},
		{"exactly10!", 10, "exactly10!", false},
		{"one more 11", 10, "one mor...", true},
		{"pad       ", 5, "pad", false},
		{"héllo wörld", 8, "héllo...", true},
		{"a\x1bb", 5, "a...", true},
	} {
		got, cut := fitLine(c.in, c.width)
		if got != c.want || cut != c.cut {
			t.Errorf("fitLine(%q, %d) = %q, %v; want %q, %v", c.in, c.width, got, cut, c.want, c.cut)
		}
	}
}

// TestPolicyApplyHintNamesItself: the hint under policy apply's table names
// policy apply, not status.
func TestPolicyApplyHintNamesItself(t *testing.T) {
	res := apitype.ApplyResult{Policy: apitype.PolicyState{Policies: []apitype.PolicyStatus{{Name: "fabric", Mode: "enforce", Targets: []apitype.Target{
		{Kind: "qos", Object: "ens1f0", Desired: "pfc 3", Actual: "-", State: apitype.TargetError, Error: longTarget},
	}}}}}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"POST /v1/policy/apply": answer(t, res)})
	_, out := onTerminalOf(t, 80, "--socket", sock, "policy", "apply")
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "rdmactl policy apply --full (-l) prints them whole") {
		t.Errorf("policy apply's hint does not name it:\n%s", out)
	}
	// The note wraps at the terminal's width, as the lines it is about.
	for _, l := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(l); n > 80 {
			t.Errorf("80 columns: a line of %d:\n%s", n, l)
		}
	}
}
