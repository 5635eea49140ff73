package kmsg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/testenv"
)

// TestIntegrationKmsg follows the real /dev/kmsg: a line written to it
// in a driver's form raises a fault on that device within 2 s when the
// Follower trusts userspace's lines (RDMAD_TEST_KMSG_USERSPACE=1), and
// none on one that does not (the kernel gives the line facility user);
// lines naming other devices raise none; a Follower started afterwards
// replays it from the kernel's buffer (the start-up window), and one
// whose window is shorter than the line's age does not. Writing to /dev/kmsg needs root (the test
// skips without it; as root, under make test, a missing /dev/kmsg fails
// it); it writes three lines with a unique token ("rdmadtest"), well
// under the kernel's rate limit for writers (10 per 5 s).
func TestIntegrationKmsg(t *testing.T) {
	w, err := os.OpenFile(DefaultPath, os.O_WRONLY, 0)
	switch {
	case err == nil:
	case os.Geteuid() != 0:
		t.Skipf("cannot write %s (%v): the test needs root", DefaultPath, err)
	case errors.Is(err, os.ErrNotExist) && !testenv.Strict():
		// A container without the kernel log; make test's machines
		// have it.
		t.Skipf("no %s: %v", DefaultPath, err)
	default:
		t.Fatalf("root cannot write %s: %v", DefaultPath, err)
	}
	defer w.Close()
	token := fmt.Sprintf("%d.%d", os.Getpid(), time.Now().UnixNano())
	devs := []Device{{Name: "rdmadtest0"}, {Name: "rdmadtest1"}}

	run := func(opts Options) (*Follower, chan []apitype.KernelFault, func()) {
		ch := make(chan []apitype.KernelFault, 64)
		opts.OnChange = func(l []apitype.KernelFault) {
			select {
			case ch <- l:
			default:
			}
		}
		f := New(opts)
		f.SetDevices(devs)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		return f, ch, func() {
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					// An open error (no CAP_SYSLOG under
					// kernel.dmesg_restrict=1) ends up here too.
					t.Errorf("Run = %v, want context.Canceled", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("Run did not return within 2s of the cancellation")
			}
		}
	}
	ours := func(l []apitype.KernelFault) (mine, others []apitype.KernelFault) {
		for _, e := range l {
			if strings.Contains(e.Line, token) {
				if e.Device == "rdmadtest0" && e.Pattern == PatternErr && e.Priority == 3 {
					mine = append(mine, e)
				} else {
					others = append(others, e)
				}
			}
		}
		return mine, others
	}
	await := func(ch chan []apitype.KernelFault, timeout time.Duration) []apitype.KernelFault {
		deadline := time.After(timeout)
		for {
			select {
			case l := <-ch:
				if mine, _ := ours(l); len(mine) > 0 {
					return l
				}
			case <-deadline:
				return nil
			}
		}
	}

	f, ch, stop := run(Options{TrustUserspace: true})
	strict, _, stopStrict := run(Options{})
	// Let Run reach the end of the buffer, so the lines are read live.
	time.Sleep(200 * time.Millisecond)
	written := time.Now()
	for _, line := range []string{
		"<3>infiniband rdmadother0: test fault " + token + " (another device)\n",
		"<3>infiniband rdmadtest1x: test fault " + token + " (a longer name)\n",
		"<3>infiniband rdmadtest0: test fault " + token + "\n",
	} {
		if _, err := w.WriteString(line); err != nil {
			t.Fatalf("write %s: %v", DefaultPath, err)
		}
	}
	l := await(ch, 2*time.Second)
	if l == nil {
		t.Fatalf("no fault on rdmadtest0 within 2s of writing it; faults %+v, stats %+v", f.Faults(), f.Stats())
	}
	t.Logf("fault raised %v after the write", time.Since(written))
	if _, others := ours(f.Faults()); len(others) > 0 {
		t.Errorf("lines naming other devices became faults: %+v", others)
	}
	stop()
	if mine, others := ours(strict.Faults()); len(mine)+len(others) > 0 || strict.Stats().Records == 0 {
		t.Errorf("a Follower that does not trust userspace raised %+v from lines root wrote (stats %+v)", append(mine, others...), strict.Stats())
	}
	stopStrict()

	// A restart within the window replays the fault from the buffer.
	f, ch, stop = run(Options{TrustUserspace: true})
	if await(ch, 2*time.Second) == nil {
		t.Errorf("a new Follower did not replay the fault from the kernel's buffer; faults %+v", f.Faults())
	}
	stop()

	// One whose window the line is older than does not.
	time.Sleep(50 * time.Millisecond)
	f, _, stop = run(Options{Window: 20 * time.Millisecond, TrustUserspace: true})
	time.Sleep(300 * time.Millisecond)
	if mine, _ := ours(f.Faults()); len(mine) > 0 {
		t.Errorf("a line older than the window was replayed: %+v", mine)
	}
	if f.Stats().Records == 0 {
		t.Error("read no record of the kernel's buffer")
	}
	stop()
}
