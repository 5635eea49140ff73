package memlock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/internal/testenv"
	"golang.org/x/sys/unix"
)

func hasCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(c%32)) != 0
}

// restoreLimit puts the test process's limit back at the end of the test.
func restoreLimit(t *testing.T) Limit {
	t.Helper()
	orig, err := Observe()
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	t.Cleanup(func() {
		if err := Set(orig); err != nil {
			t.Errorf("restore RLIMIT_MEMLOCK to %v: %v", orig, err)
		}
	})
	return orig
}

func TestIntegrationLowerAndRaiseSoft(t *testing.T) {
	orig := restoreLimit(t)
	if orig.Hard < 2*size.MiB {
		t.Skipf("hard RLIMIT_MEMLOCK is %s; this test needs room below it (at least 2MiB)", orig.Hard)
	}
	// Lowering the soft limit and raising it again up to the hard limit
	// needs no privilege.
	low := Limit{Soft: 1 * size.MiB, Hard: orig.Hard}
	if err := Set(low); err != nil {
		t.Fatalf("Set(%v): %v", low, err)
	}
	if got, err := Observe(); err != nil || got != low {
		t.Fatalf("Observe after Set = %v, %v; want %v", got, err, low)
	}
	want := Limit{Soft: 2 * size.MiB, Hard: orig.Hard}
	got, err := Raise(2 * size.MiB)
	if err != nil || got != want {
		t.Fatalf("Raise(2MiB) = %v, %v; want %v", got, err, want)
	}
	if got, err := Observe(); err != nil || got != want {
		t.Errorf("Observe after Raise = %v, %v; want %v", got, err, want)
	}
	// Raise never lowers.
	if got, err := Raise(1 * size.MiB); err != nil || got != want {
		t.Errorf("Raise(1MiB) with soft 2MiB = %v, %v; want unchanged %v", got, err, want)
	}
	if err := Set(Limit{Soft: 2 * size.MiB, Hard: 1 * size.MiB}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("Set(soft > hard) = %v, want EINVAL", err)
	}
}

func TestIntegrationRaiseHard(t *testing.T) {
	if !hasCap(unix.CAP_SYS_RESOURCE) {
		t.Skip("raising the hard RLIMIT_MEMLOCK needs CAP_SYS_RESOURCE, which this process lacks (TestIntegrationRaiseWithoutCapSysResource covers that case)")
	}
	orig := restoreLimit(t)
	target := orig.Hard + 64*size.MiB
	if orig.Hard == Unlimited {
		if err := Set(Limit{Soft: 8 * size.MiB, Hard: 8 * size.MiB}); err != nil {
			t.Fatalf("lower limit: %v", err)
		}
		target = 72 * size.MiB
	}
	want := Limit{Soft: target, Hard: target}
	if got, err := Raise(target); err != nil || got != want {
		t.Fatalf("Raise(%s) = %v, %v; want %v", target, got, err, want)
	}
	if got, err := Raise(Unlimited); err != nil || got != (Limit{Soft: Unlimited, Hard: Unlimited}) {
		t.Errorf("Raise(unlimited) = %v, %v", got, err)
	}
}

// TestIntegrationRaiseWithoutCapSysResource runs the raise in a child
// process that lost CAP_SYS_RESOURCE (as rdmad does under a restrictive
// unit), so the EPERM comes from the kernel, not from a fake.
func TestIntegrationRaiseWithoutCapSysResource(t *testing.T) {
	if os.Getenv("RDMAD_MEMLOCK_CHILD") == "1" {
		memlockChild()
		return
	}
	var cmd *exec.Cmd
	args := []string{"-test.run=^TestIntegrationRaiseWithoutCapSysResource$", "-test.v"}
	if hasCap(unix.CAP_SYS_RESOURCE) {
		setpriv := testenv.Tool(t, "setpriv", "apt-get install util-linux: it drops CAP_SYS_RESOURCE in a child process")
		cmd = exec.Command(setpriv, append([]string{"--inh-caps=-sys_resource", "--bounding-set=-sys_resource", os.Args[0]}, args...)...)
	} else {
		cmd = exec.Command(os.Args[0], args...)
	}
	cmd.Env = append(os.Environ(), "RDMAD_MEMLOCK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, want := range []string{
		"EPERM=true",
		"memlock: raise RLIMIT_MEMLOCK to 64MiB: the hard limit is 8MiB and rdmad lacks CAP_SYS_RESOURCE to raise it: operation not permitted; raise LimitMEMLOCK= in rdmad.service",
		"after=soft 8MiB, hard 8MiB",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
}

// memlockChild runs in the child without CAP_SYS_RESOURCE. Lowering is
// always allowed, so it first sets a known hard limit.
func memlockChild() {
	if hasCap(unix.CAP_SYS_RESOURCE) {
		fmt.Println("child still has CAP_SYS_RESOURCE")
		os.Exit(2)
	}
	if err := Set(Limit{Soft: 8 * size.MiB, Hard: 8 * size.MiB}); err != nil {
		fmt.Println("lower:", err)
		os.Exit(2)
	}
	_, err := Raise(64 * size.MiB)
	fmt.Printf("EPERM=%v\nerr=%v\n", errors.Is(err, unix.EPERM), err)
	after, _ := Observe()
	fmt.Printf("after=%v\n", after)
}

func TestSetError(t *testing.T) {
	cur := Limit{Soft: 64 * size.KiB, Hard: 8 * size.MiB}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"eperm", unix.EPERM, "memlock: raise RLIMIT_MEMLOCK to 1GiB: the hard limit is 8MiB and rdmad lacks CAP_SYS_RESOURCE to raise it: operation not permitted; " +
			"raise LimitMEMLOCK= in rdmad.service (e.g. `systemctl edit rdmad` with [Service] LimitMEMLOCK=infinity) or lower memlock in rdmad.toml"},
		{"other", unix.EINVAL, "memlock: raise RLIMIT_MEMLOCK to 1GiB (currently soft 64KiB, hard 8MiB): invalid argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := setError("raise RLIMIT_MEMLOCK to 1GiB", cur, tt.err)
			if got := err.Error(); got != tt.want {
				t.Errorf("setError:\n got %q\nwant %q", got, tt.want)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("setError does not wrap %v", tt.err)
			}
		})
	}
}
