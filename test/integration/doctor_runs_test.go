package integration

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDoctorRunsLockOut is issue #24's doctor lock-out with the real
// binaries: one socket-group member running rdmactl doctor in two loops at
// once kept root's rdmactl doctor refused (5 of 5). Now the member holds
// one run at a time (its second loop is refused, saying so) and root's five
// runs all get rdmad's answer.
func TestDoctorRunsLockOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run rdmactl as another user (CI runs as root)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatal("setpriv (util-linux) is missing; make test installs it")
	}
	nobody := []string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}
	n := start(t, "[daemon]\nsocket_group = \"nogroup\"\n")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ran, refused atomic.Int64
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, errOut, code := n.ctlAs(nobody, "doctor", "--interval", "2s")
				switch {
				case code != 1:
					ran.Add(1)
				case strings.Contains(errOut, "uid 65534 already has a doctor run in progress"):
					refused.Add(1)
					time.Sleep(20 * time.Millisecond)
				default:
					t.Errorf("nobody's doctor: exit %d %q", code, errOut)
					return
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // both loops are at it
	for i := range 5 {
		_, errOut, code := n.ctl("doctor", "--interval", "0")
		if code == 1 {
			t.Errorf("root's doctor %d of 5 while nobody loops: exit %d %q", i+1, code, errOut)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("nobody's loops: %d runs, %d refused", ran.Load(), refused.Load())
	if refused.Load() == 0 {
		t.Error("nobody's second loop was never refused: the test did not hold two runs at once")
	}
}
