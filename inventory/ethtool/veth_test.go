package ethtool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/rdmad/rdmad/internal/testenv"
	"github.com/rdmad/rdmad/test/netnstest"
)

// vethNS creates a network namespace with the veth pair va/vb (4 queues
// each, down, so that no traffic moves the counters) and returns it with
// va's and vb's interface indexes.
func vethNS(t *testing.T) (netns.NsHandle, int, int) {
	t.Helper()
	ns, h := netnstest.New(t)
	attrs := netlink.LinkAttrs{Name: "va", NumTxQueues: 4, NumRxQueues: 4}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "vb", PeerNumTxQueues: 4, PeerNumRxQueues: 4}); err != nil {
		t.Fatalf("add veth va/vb: %v", err)
	}
	va, err := h.LinkByName("va")
	if err != nil {
		t.Fatal(err)
	}
	vb, err := h.LinkByName("vb")
	if err != nil {
		t.Fatal(err)
	}
	return ns, va.Attrs().Index, vb.Attrs().Index
}

// inNS runs a command in ns (nsenter), or skips t when the command is not
// installed.
func inNS(t *testing.T, ns netns.NsHandle, name string, args ...string) (string, error) {
	t.Helper()
	testenv.Tool(t, name, "Debian: apt-get install "+name)
	nsenter := testenv.Tool(t, "nsenter", "apt-get install util-linux")
	args = append([]string{fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(ns)), name}, args...)
	out, err := exec.CommandContext(context.Background(), nsenter, args...).CombinedOutput()
	return string(out), err
}

// ethtoolS runs `ethtool -S netdev` in ns and parses its statistics.
func ethtoolS(t *testing.T, ns netns.NsHandle, netdev string) []Stat {
	t.Helper()
	out, err := inNS(t, ns, "ethtool", "-S", netdev)
	if err != nil {
		t.Fatalf("ethtool -S %s: %v\n%s", netdev, err, out)
	}
	var stats []Stat
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line == "NIC statistics:" {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimSpace(line), ": ")
		v, err := strconv.ParseUint(value, 10, 64)
		if !ok || err != nil {
			t.Fatalf("ethtool -S %s: line %q", netdev, line)
		}
		stats = append(stats, Stat{Name: name, Value: v})
	}
	return stats
}

var queueDrops = regexp.MustCompile(`^rx_queue_[0-9]+_drops$`)

// TestVethDriverStats reads a real veth's ethtool -S statistics (as root,
// in a private network namespace) and compares them with the ethtool
// command's, before and after the channel count changes the set.
func TestVethDriverStats(t *testing.T) {
	ns, vaIndex, vbIndex := vethNS(t)
	r, err := Open(&Config{NetNS: int(ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	if idx, err := r.Ifindex("va"); err != nil || idx != vaIndex {
		t.Errorf("Ifindex(va) = %d, %v; want %d", idx, err, vaIndex)
	}
	stats, err := r.DriverStats("va")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("veth va, ethtool -S: %d statistics, first %v", len(stats), stats[:min(3, len(stats))])
	// veth's own: the peer's index, then per queue counters.
	if len(stats) == 0 || stats[0] != (Stat{Name: "peer_ifindex", Value: uint64(vbIndex)}) {
		t.Errorf("veth's first statistic: %v, want peer_ifindex %d", stats[:min(1, len(stats))], vbIndex)
	}
	queues := 0
	for _, s := range stats {
		if queueDrops.MatchString(s.Name) {
			queues++
		}
	}
	if queues != 4 {
		t.Errorf("%d rx_queue_N_drops statistics, want 4 (one per queue)", queues)
	}
	if kept := Keep(stats); len(kept) != 0 {
		t.Errorf("kept %v of a veth's statistics, which has none of rdmad's", kept)
	}

	want := ethtoolS(t, ns, "va")
	if diff := cmp.Diff(want, stats); diff != "" {
		t.Errorf("DriverStats(va) differs from ethtool -S va (-ethtool +DriverStats):\n%s", diff)
	}
	// Fewer channels, fewer statistics: both read the new set.
	if out, err := inNS(t, ns, "ethtool", "-L", "va", "rx", "2", "tx", "2"); err != nil {
		t.Fatalf("ethtool -L va rx 2 tx 2: %v\n%s", err, out)
	}
	after, err := r.DriverStats("va")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) >= len(stats) {
		t.Errorf("%d statistics with 2 channels, %d with 4: want fewer", len(after), len(stats))
	}
	if diff := cmp.Diff(ethtoolS(t, ns, "va"), after); diff != "" {
		t.Errorf("with 2 channels, DriverStats(va) differs from ethtool -S va (-ethtool +DriverStats):\n%s", diff)
	}
}

// TestVethCountChanged asks the real kernel for fewer names and values
// than the driver has, as a read racing a channel change would: the guard
// page (older kernels write them all) or the kernel (newer ones write none)
// turns it into errChanged, never an overrun.
func TestVethCountChanged(t *testing.T) {
	ns, _, _ := vethNS(t)
	r, err := Open(&Config{NetNS: int(ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n, err := r.statsCount("va")
	if err != nil || n < 2 {
		t.Fatalf("statsCount(va) = %d, %v", n, err)
	}
	if _, err := r.statNames("va", n-1); !errors.Is(err, errChanged) {
		t.Errorf("statNames with %d of %d: %v, want errChanged", n-1, n, err)
	}
	if _, err := r.statValues("va", n-1); !errors.Is(err, errChanged) {
		t.Errorf("statValues with %d of %d: %v, want errChanged", n-1, n, err)
	}
	if names, err := r.statNames("va", n); err != nil || len(names) != n || names[0] != "peer_ifindex" {
		t.Errorf("statNames with the right count: %q, %v", names, err)
	}

	// The guard itself: the kernel writes n names into a buffer with room
	// for n-1; the write stops at the guard page with EFAULT.
	g, err := newGuarded(gstringsDataOff + (n-1)*gstringLen)
	if err != nil {
		t.Fatal(err)
	}
	defer g.free()
	binary.NativeEndian.PutUint32(g.buf, cmdGStrings)
	binary.NativeEndian.PutUint32(g.buf[4:], ssStats)
	binary.NativeEndian.PutUint32(g.buf[gstringsLenOff:], uint32(n))
	if err := r.ioctl("va", g.buf); !errors.Is(err, errChanged) {
		t.Errorf("ETHTOOL_GSTRINGS of %d names into room for %d: %v, want errChanged (EFAULT at the guard page)", n, n-1, err)
	}
}

// TestVethPause: a veth has no pause parameters; the kernel answers
// ETHTOOL_MSG_PAUSE_GET with EOPNOTSUPP, ethtool -I -a says the same, and
// the Reader reports it as unsupported.
func TestVethPause(t *testing.T) {
	ns, _, _ := vethNS(t)
	r, err := Open(&Config{NetNS: int(ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.famErr != nil {
		t.Fatalf("the kernel has no ethtool netlink family: %v", r.famErr)
	}
	_, err = r.Pause("va")
	t.Logf("veth va, ETHTOOL_MSG_PAUSE_GET with ETHTOOL_FLAG_STATS: %v", err)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "pause statistics of va") {
		t.Errorf("Pause(va): %v; want unsupported, naming va", err)
	}

	c, err := r.Counters("va")
	if err != nil || c.Pause != nil || c.Driver == nil || len(c.Driver) != 0 {
		t.Errorf("Counters(va) = %+v, %v; want no pause, an empty map of kept statistics, no error", c, err)
	}
	_, err = r.Counters("nonesuch")
	if err == nil || errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "nonesuch") || !strings.Contains(err.Error(), "gone") {
		t.Errorf("Counters(nonesuch): %v; want an error naming it as gone", err)
	}
	if m, err := r.FlatCounters("va"); err != nil || m == nil || len(m) != 0 {
		t.Errorf("FlatCounters(va) = %v, %v; want an empty map, no error", m, err)
	}
	if _, err := r.FlatCounters("nonesuch"); err == nil || !strings.Contains(err.Error(), "nonesuch") {
		t.Errorf("FlatCounters(nonesuch): %v", err)
	}
	if _, err := r.Ifindex("nonesuch"); err == nil || !strings.Contains(err.Error(), "nonesuch") {
		t.Errorf("Ifindex(nonesuch): %v", err)
	}
	// Last: it skips the test without the ethtool command.
	if out, err := inNS(t, ns, "ethtool", "-I", "-a", "va"); err == nil || !strings.Contains(out, "Operation not supported") {
		t.Errorf("ethtool -I -a va: %v\n%s\nwant Operation not supported, as the Reader found", err, out)
	}
}

// logRecords collects a logger's messages.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.msgs = append(l.msgs, string(bytes.TrimSpace(p)))
		return len(p), nil
	}), nil))
}

func (l *logRecords) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestSourceReportsOnce: over several reads, a veth's missing pause
// statistics are reported once, a missing netdev's error once, and a veth
// re-created under the same name is asked again.
func TestSourceReportsOnce(t *testing.T) {
	ns, h := netnstest.New(t)
	netnstest.Veth(t, h, "va", "vb")
	var logs logRecords
	s := &Source{NetNS: int(ns), Log: logs.logger()}
	for range 3 {
		got := s.Read([]string{"va", "gone0", "va"})
		if len(got) != 1 || got[0].Netdev != "va" || got[0].Pause != nil || got[0].Driver == nil {
			t.Fatalf("Read = %+v; want va alone, with an empty map of kept statistics and no pause", got)
		}
	}
	t.Logf("log:\n%s", strings.Join(logs.msgs, "\n"))
	if n := logs.count(`msg="netdev has no pause statistics`); n != 1 || logs.count("netdev=va") != 1 {
		t.Errorf("va's missing pause statistics reported %d times, want once", n)
	}
	if n := logs.count("netdev=gone0"); n != 1 {
		t.Errorf("gone0 reported %d times, want once", n)
	}
	if logs.count("level=WARN") != 1 || logs.count("the netdev is gone") != 1 {
		t.Errorf("want one warning, for gone0, saying it is gone")
	}

	// Re-created: a new interface index, asked again, reported again.
	va, err := h.LinkByName("va")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkDel(va); err != nil {
		t.Fatal(err)
	}
	netnstest.Veth(t, h, "va", "vb")
	s.Read([]string{"va"})
	if n := logs.count(`msg="netdev has no pause statistics`); n != 2 {
		t.Errorf("after va was re-created, its missing pause statistics were reported %d times in all, want 2", n)
	}
}
