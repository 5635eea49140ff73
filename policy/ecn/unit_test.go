package ecn

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/testenv"
)

func TestValidNetdev(t *testing.T) {
	for _, ok := range []string{"eth0", "ens1f0np0", "bond0.100", "a:b", "my-nic_1", "123456789012345"} {
		if err := ValidNetdev(ok); err != nil {
			t.Errorf("ValidNetdev(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../eth0", "eth0/../x", "eth0\n", "eth0\nExecStart=/bin/sh", "eth 0", "eth0\x00", "1234567890123456", "é", "eth0\\x2f", "eth@0", "eth0.service"[:0]} {
		if err := ValidNetdev(bad); err == nil {
			t.Errorf("ValidNetdev(%q) = nil, want an error", bad)
		}
	}
}

func TestUnitName(t *testing.T) {
	for nd, want := range map[string]string{
		"eth0":      "rdmad-ecn@eth0.service",
		"ens1f0np0": "rdmad-ecn@ens1f0np0.service",
		"my-nic":    `rdmad-ecn@my\x2dnic.service`, // %I gives my-nic back; %i "-" would be "/"
		".x":        `rdmad-ecn@\x2ex.service`,
		"bond0.100": "rdmad-ecn@bond0.100.service",
		"a:b_c":     "rdmad-ecn@a:b_c.service",
	} {
		if got := UnitName(nd); got != want {
			t.Errorf("UnitName(%q) = %q, want %q", nd, got, want)
		}
	}
}

// TestUnitNameIsSystemdEscape: UnitName escapes as systemd-escape does,
// so that %I in the unit is the netdev again.
func TestUnitNameIsSystemdEscape(t *testing.T) {
	testenv.Tool(t, "systemd-escape", "apt-get install systemd")
	for _, nd := range []string{"eth0", "my-nic", ".x", "a:b", "bond0.100", "eth-0_1", "A.b-c", "x..y", "-", "_"} {
		out, err := exec.Command("systemd-escape", "--template=rdmad-ecn@.service", "--", nd).Output()
		if err != nil {
			t.Fatalf("systemd-escape %q: %v", nd, err)
		}
		if want := strings.TrimSpace(string(out)); UnitName(nd) != want {
			t.Errorf("UnitName(%q) = %q, systemd-escape says %q", nd, UnitName(nd), want)
		}
		back, err := exec.Command("systemd-escape", "--unescape", "--instance", UnitName(nd)).Output()
		if err != nil || strings.TrimSpace(string(back)) != nd {
			t.Errorf("systemd-escape --unescape --instance %s = %q, %v; want %q (what %%I gives)", UnitName(nd), back, err, nd)
		}
	}
}

func TestParseWant(t *testing.T) {
	for in, want := range map[string]Want{
		"np=3\nrp=3\n":      {NP: []int{3}, RP: []int{3}},
		"np=none\n":         {NP: []int{}},
		"rp=0,1,7\n":        {RP: []int{0, 1, 7}},
		"rp=none\nnp=2,3\n": {NP: []int{2, 3}, RP: []int{}},
	} {
		got, err := ParseWant([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseWant(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		// FormatWant round-trips.
		if back, err := ParseWant(FormatWant(got)); err != nil || !reflect.DeepEqual(back, want) {
			t.Errorf("ParseWant(FormatWant(%+v)) = %+v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", "\n", "np=3", "np=3\nnp=4\n", "np=8\n", "np=-1\n", "np=3,3\n", "np=4,3\n", "np=\n", "np=3 \n",
		"np=3,\n", "xp=3\n", "np 3\n", "np=3\n\n", "np=03\n", "np=3\r\n", strings.Repeat("np=none\n", 9)} {
		if w, err := ParseWant([]byte(bad)); err == nil {
			t.Errorf("ParseWant(%q) = %+v, nil; want an error", bad, w)
		}
	}
}

func TestWantFileRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ecn")
	want := Want{NP: []int{3, 4}, RP: []int{}}
	if err := WriteWantFile(dir, "eth0", want); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("want file mode %v, want 0600", st.Mode().Perm())
	}
	if dst, _ := os.Stat(dir); dst.Mode().Perm() != 0o700 {
		t.Errorf("want dir mode %v, want 0700", dst.Mode().Perm())
	}
	got, err := ReadWantFile(dir, "eth0")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadWantFile = %+v, %v; want %+v", got, err, want)
	}
	if err := RemoveWantFile(dir, "eth0"); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadWantFile(dir, "eth0"); err == nil {
		t.Error("ReadWantFile after RemoveWantFile: no error")
	}
}

// TestWantFileAttacks: a netdev name that is a path or carries a newline is
// refused before any file is touched, and a want file that someone else
// could have put there or pointed elsewhere is refused by the writer.
func TestWantFileAttacks(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "ecn")
	for _, nd := range []string{"../eth0", "..", "eth0\n", "eth0/x", "x\nrp=1"} {
		if err := WriteWantFile(dir, nd, Want{NP: []int{3}}); err == nil {
			t.Errorf("WriteWantFile(%q) = nil, want an error", nd)
		}
		if _, err := ReadWantFile(dir, nd); err == nil {
			t.Errorf("ReadWantFile(%q) = nil, want an error", nd)
		}
		if _, err := New(Options{Root: base}).WriteWanted(dir, nd); err == nil {
			t.Errorf("WriteWanted(%q) = nil, want an error", nd)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a refused name created %s (%v)", dir, err)
	}
	if ents, _ := os.ReadDir(base); len(ents) != 0 {
		t.Errorf("refused names left %v in %s", ents, base)
	}

	if err := WriteWantFile(dir, "eth0", Want{NP: []int{3}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "eth0")

	// A symlink in place of the file (pointing at a file that parses).
	decoy := filepath.Join(base, "decoy")
	if err := os.WriteFile(decoy, []byte("np=0,1,2,3,4,5,6,7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if err := os.Symlink(decoy, path); err != nil {
		t.Fatal(err)
	}
	if w, err := ReadWantFile(dir, "eth0"); err == nil {
		t.Errorf("ReadWantFile through a symlink = %+v, nil; want an error", w)
	}
	os.Remove(path)

	// Writable by group or others.
	if err := os.WriteFile(path, []byte("np=3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []os.FileMode{0o620, 0o602, 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if w, err := ReadWantFile(dir, "eth0"); err == nil || !strings.Contains(err.Error(), "not writable by others") {
			t.Errorf("ReadWantFile of a %04o file = %+v, %v; want a refusal", mode, w, err)
		}
	}
	os.Chmod(path, 0o600)

	// A FIFO (would block a reader that does not open non-blocking).
	os.Remove(path)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadWantFile(dir, "eth0"); err == nil {
		t.Error("ReadWantFile of a FIFO: no error")
	}
	os.Remove(path)

	// A directory others may write, or a symlinked directory.
	if err := os.WriteFile(path, []byte("np=3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadWantFile(dir, "eth0"); err == nil {
		t.Error("ReadWantFile in a 0777 directory: no error")
	}
	if err := WriteWantFile(dir, "eth0", Want{NP: []int{3}}); err == nil {
		t.Error("WriteWantFile into a 0777 directory: no error")
	}
	os.Chmod(dir, 0o700)
	link := filepath.Join(base, "ecnlink")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadWantFile(link, "eth0"); err == nil {
		t.Error("ReadWantFile in a symlinked directory: no error")
	}

	// Owned by someone else (needs root to chown).
	if os.Geteuid() != 0 {
		t.Log("not root: the foreign owner case is skipped")
		return
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if w, err := ReadWantFile(dir, "eth0"); err == nil {
		t.Errorf("ReadWantFile of a file owned by 65534 = %+v, nil; want an error", w)
	}
	os.Chown(path, 0, 0)
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadWantFile(dir, "eth0"); err == nil {
		t.Error("ReadWantFile in a directory owned by 65534: no error")
	}
}

// TestWriteWanted is the writer the unit runs, on a fixture tree: it writes
// exactly the differing files of that netdev's ecn directory and reports.
func TestWriteWanted(t *testing.T) {
	root := fixture(t, "eth0", []int{}, []int{3})
	dir := filepath.Join(t.TempDir(), "ecn")
	if err := WriteWantFile(dir, "eth0", Want{NP: []int{3}}); err != nil {
		t.Fatal(err)
	}
	c := New(Options{Root: root})
	msg, err := c.WriteWanted(dir, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	if want := "ecn eth0: now np=3 (wrote 1 files: roce_np/enable/3)"; msg != want {
		t.Errorf("WriteWanted = %q, want %q", msg, want)
	}
	s, err := c.Observe("eth0")
	if err != nil || !reflect.DeepEqual(s, State{NP: []int{3}, RP: []int{3}}) {
		t.Errorf("after: %+v, %v", s, err)
	}
	if msg, err := c.WriteWanted(dir, "eth0"); err != nil || msg != "ecn eth0: already np=3" {
		t.Errorf("again: %q, %v", msg, err)
	}
	// No want file: an error, nothing written.
	if _, err := c.WriteWanted(dir, "eth1"); err == nil {
		t.Error("WriteWanted without a want file: no error")
	}
	// A netdev without ecn files.
	if err := WriteWantFile(dir, "lo", Want{NP: []int{3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteWanted(dir, "lo"); err == nil {
		t.Error("WriteWanted on a netdev without ecn: no error")
	}
}

func TestIsReadOnly(t *testing.T) {
	// As Apply wraps a failed write.
	erofs := fmt.Errorf("ecn: eth0: write 1 to %s: %w", "/sys/class/net/eth0/ecn/roce_np/enable/3", unix.EROFS)
	if !IsReadOnly(erofs) {
		t.Errorf("IsReadOnly(%v) = false", erofs)
	}
	if IsReadOnly(fmt.Errorf("x: %w", unix.EACCES)) {
		t.Error("IsReadOnly(EACCES) = true")
	}
}

// FuzzParseWant: whatever the want file holds, ParseWant either refuses it
// or returns priorities 0-7, distinct and ascending, that FormatWant
// renders back to exactly the input (the format has one spelling).
func FuzzParseWant(f *testing.F) {
	for _, s := range []string{"np=3\nrp=3\n", "np=none\n", "rp=0,1,7\n", "np=3,3\n", "np=3", "xp=1\n", "rp=none\nnp=2,3\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ParseWant(b)
		if err != nil {
			return
		}
		for _, prio := range [][]int{w.NP, w.RP} {
			for i, p := range prio {
				if p < 0 || p >= Priorities || i > 0 && p <= prio[i-1] {
					t.Fatalf("ParseWant(%q) = %+v: priorities out of range or order", b, w)
				}
			}
		}
		back, err := ParseWant(FormatWant(w))
		if err != nil || !reflect.DeepEqual(back, w) {
			t.Fatalf("ParseWant(FormatWant(%+v)) = %+v, %v", w, back, err)
		}
		// One spelling, except that np and rp may come in either order.
		if out := FormatWant(w); string(out) != string(b) && string(FormatWant(Want{RP: w.RP}))+string(FormatWant(Want{NP: w.NP})) != string(b) {
			t.Fatalf("ParseWant(%q) accepted a second spelling of %q", b, out)
		}
	})
}
