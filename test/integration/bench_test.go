package integration

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
)

// BenchmarkMTURevert measures how long rdmad takes to put an MTU back after
// something else changed it: from the netlink request that changes it to the
// kernel's notification that it is 4200 again. Run it with at least 100
// drifts:
//
//	go test -run XXX -bench MTURevert -benchtime 200x ./test/integration
//
// docs/BENCHMARKS.md has the figures.
func BenchmarkMTURevert(b *testing.B) {
	ns := newNetns(b)
	ns.ip(b, "link", "add", "rdt0", "type", "veth", "peer", "name", "other0")
	startIn(b, ns, "[[policy]]\nname = \"fabric\"\nnetdevs = [\"rdt*\"]\nmtu = 4200\n")
	h, updates, done := watchNetns(b, ns)
	defer close(done)
	link := waitMTU(b, h, updates, "rdt0", 4200, 10*time.Second)

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := h.LinkSetMTU(link, 1500); err != nil {
			b.Fatal(err)
		}
		waitMTU(b, h, updates, "rdt0", 4200, 5*time.Second)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}

// TestMTUFlipStorm flips an enforced MTU 1000 times as fast as netlink
// allows and checks that rdmad ends with the right MTU, bounded CPU and
// bounded memory. It logs the figures for docs/BENCHMARKS.md.
func TestMTUFlipStorm(t *testing.T) {
	ns := newNetns(t)
	ns.ip(t, "link", "add", "rdt0", "type", "veth", "peer", "name", "other0")
	n := startIn(t, ns, "[[policy]]\nname = \"fabric\"\nnetdevs = [\"rdt*\"]\nmtu = 4200\n")
	h, updates, done := watchNetns(t, ns)
	defer close(done)
	link := waitMTU(t, h, updates, "rdt0", 4200, 10*time.Second)
	pid := rdmadPID(t, n)

	cpu0, rss0 := procStat(t, pid)
	t0 := time.Now()
	const flips = 1000
	for i := 0; i < flips; i++ {
		if err := h.LinkSetMTU(link, 1500+i%500); err != nil {
			t.Fatal(err)
		}
	}
	storm := time.Since(t0)
	eventually(t, "the MTU to settle at 4200", func() bool { return ns.mtu(t, "rdt0") == 4200 })
	settle := time.Since(t0)
	time.Sleep(500 * time.Millisecond) // nothing left to do: it must stay
	if m := ns.mtu(t, "rdt0"); m != 4200 {
		t.Fatalf("MTU %d after the storm, want 4200", m)
	}
	cpu1, rss1 := procStat(t, pid)
	t.Logf("%d MTU flips in %v; settled at 4200 after %v; rdmad CPU %v (%.1f%% of the storm's wall time), RSS %d -> %d KiB",
		flips, storm.Round(time.Millisecond), settle.Round(time.Millisecond), cpu1-cpu0,
		100*float64(cpu1-cpu0)/float64(settle), rss0, rss1)
	if cpu1-cpu0 > 5*time.Second {
		t.Errorf("rdmad used %v of CPU for %d flips", cpu1-cpu0, flips)
	}
	if rss1 > rss0+64<<10 {
		t.Errorf("rdmad's RSS grew from %d to %d KiB during the storm", rss0, rss1)
	}
	s := n.policy(t)
	tg := s.Policy.Policies[0].Targets[0]
	if tg.State != "in-sync" && tg.State != "applied" {
		t.Errorf("target after the storm: %+v", tg)
	}
	t.Logf("target counters after the storm: applies %d, drifts %d (coalesced from %d flips)", tg.Applies, tg.Drifts, flips)
}

// watchNetns subscribes to link notifications inside ns.
func watchNetns(tb testing.TB, ns *netns) (*netlink.Handle, chan netlink.LinkUpdate, chan struct{}) {
	tb.Helper()
	nsh, err := vnetns.GetFromName(ns.name)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nsh.Close() })
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(h.Close)
	updates := make(chan netlink.LinkUpdate, 4096)
	done := make(chan struct{})
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &nsh}); err != nil {
		tb.Fatal(err)
	}
	return h, updates, done
}

// waitMTU waits for a notification (or a read) showing ifname at mtu.
func waitMTU(tb testing.TB, h *netlink.Handle, updates chan netlink.LinkUpdate, ifname string, mtu int, timeout time.Duration) netlink.Link {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case u := <-updates:
			if u.Attrs().Name == ifname && u.Attrs().MTU == mtu {
				return u.Link
			}
		case <-deadline:
			l, _ := h.LinkByName(ifname)
			if l != nil && l.Attrs().MTU == mtu {
				return l
			}
			tb.Fatalf("%s did not reach MTU %d within %v", ifname, mtu, timeout)
		case <-time.After(100 * time.Millisecond):
			// The notification may have come before we listened.
			if l, err := h.LinkByName(ifname); err == nil && l.Attrs().MTU == mtu {
				return l
			}
		}
	}
}

func rdmadPID(t *testing.T, n *node) int {
	t.Helper()
	out, _, _ := n.ctl("--json", "status")
	i := strings.Index(out, `"pid": `)
	if i < 0 {
		t.Fatalf("no pid in status: %s", out)
	}
	rest := out[i+len(`"pid": `):]
	pid, err := strconv.Atoi(rest[:strings.IndexAny(rest, ",\n")])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// procStat returns a process's CPU time (user+system) and RSS in KiB.
func procStat(t *testing.T, pid int) (time.Duration, int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	ut, _ := strconv.Atoi(f[11])
	st, _ := strconv.Atoi(f[12])
	rssPages, _ := strconv.Atoi(f[21])
	return time.Duration(ut+st) * time.Second / 100, rssPages * os.Getpagesize() / 1024
}
