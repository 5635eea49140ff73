package kmsg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// segvEnv turns this test binary, run with it, into a program that names
// itself after the variable's value (prctl PR_SET_NAME; empty: the name
// of the file it runs from) and crashes with SIGSEGV unhandled, so that
// the kernel logs "<name>[<pid>]: segfault at 0 ...".
const segvEnv = "RDMAD_KMSG_TEST_SEGV"

func init() {
	name, ok := os.LookupEnv(segvEnv)
	if !ok {
		return
	}
	runtime.LockOSThread()
	if name != "" {
		b := append([]byte(name), 0)
		unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
	}
	// The Go runtime handles SIGSEGV, and the kernel reports only a fault
	// no handler takes: back to the default action (an all-zero struct
	// sigaction is SIG_DFL on every architecture).
	var sa [4]uint64
	unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
	*segvNil = 1
	os.Exit(3) // not reached
}

var segvNil *int

// TestIntegrationForged performs the forgeries of issue #41 on this
// host's kernel as user nobody while a Follower watches devices of the
// names used: crashing programs named after the device and after its
// netdev, programs that named themselves "<device>: fatal" and "<netdev>:
// Link down" (the kernel prints the name first), and tmpfs mounts in a
// user namespace with the names as options (tmpfs logs "Unknown parameter
// '<name>'" at err). The netdev is declared without a parent device, the
// prefix the matcher trusts most. It checks that the kernel logged each
// line and that none became a fault. Needs root (to run as nobody and
// read the kernel log), runuser and unshare; a kernel without
// unprivileged user namespaces skips the mounts.
func TestIntegrationForged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the forgeries as nobody")
	}
	for _, tool := range []string{"runuser", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	if _, err := os.Stat(DefaultPath); err != nil {
		t.Skipf("no %s: %v", DefaultPath, err)
	}
	const dev, netdev = "rdmadfg0", "rdv0"
	f := New(Options{})
	f.SetDevices([]Device{{Name: dev, Netdevs: []string{netdev}, Ifindexes: []int{0}, Virtual: []bool{true}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}()

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.MkdirTemp("", "rdmad-kmsg-forge-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{dev, netdev} {
		if err := copyExecutable(self, bin+"/"+name); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	tries := []struct {
		argv       []string
		name, line string
		mount      bool
	}{
		{[]string{bin + "/" + dev}, "", dev + "[", false},
		{[]string{bin + "/" + netdev}, "", netdev + "[", false},
		{[]string{bin + "/" + dev}, dev + ": fatal", dev + ": fatal[", false},
		{[]string{bin + "/" + netdev}, netdev + ": Link down", netdev + ": Link down[", false},
		{[]string{"unshare", "-Urm", "mount", "-t", "tmpfs", "-o", dev, "none", "/"}, "", "tmpfs: Unknown parameter '" + dev + "'", true},
		{[]string{"unshare", "-Urm", "mount", "-t", "tmpfs", "-o", netdev, "none", "/"}, "", "tmpfs: Unknown parameter '" + netdev + "'", true},
	}
	var want []string
	for _, tr := range tries {
		cmd := exec.Command("runuser", append([]string{"-u", "nobody", "--"}, tr.argv...)...)
		cmd.Env = os.Environ()
		if !tr.mount {
			cmd.Env = append(cmd.Env, segvEnv+"="+tr.name)
		}
		out, _ := cmd.CombinedOutput()
		if tr.mount && strings.Contains(string(out), "unshare failed") {
			t.Logf("no unprivileged user namespace here: %s", strings.TrimSpace(string(out)))
			continue
		}
		want = append(want, tr.line)
	}
	// The kernel logged each line (printk_ratelimit lets ten crash
	// reports through in 5 s: these are four), and the Follower read it.
	logged := kernelLines(t, start)
	for _, w := range want {
		if !strings.Contains(logged, w) {
			t.Errorf("the kernel logged no %q since the test began; it logged:\n%s", w, logged)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if l := f.Faults(); len(l) != 0 {
		t.Errorf("the forged lines became faults: %+v", l)
	}
	if f.Stats().Records == 0 {
		t.Error("the Follower read no record")
	}
}

// copyExecutable copies the file src to dst, mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// kernelLines returns the messages of the kernel log's records since
// since (by the kernel's clock), one a line.
func kernelLines(t *testing.T, since time.Time) string {
	t.Helper()
	src, err := openKmsg(DefaultPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	from := monotonic() - time.Since(since) - time.Second
	var b strings.Builder
	buf := make([]byte, recordBuffer)
	src.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		n, err := src.Read(buf)
		if errors.Is(err, syscall.EPIPE) {
			continue
		}
		if err != nil {
			break // the deadline: the end of the buffer
		}
		if r, err := ParseRecord(buf[:n]); err == nil && time.Duration(r.TS)*time.Microsecond >= from {
			fmt.Fprintf(&b, "%d,%d: %s\n", r.Facility, r.Priority, r.Message)
		}
		src.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	}
	return b.String()
}
