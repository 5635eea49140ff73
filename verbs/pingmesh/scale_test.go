package pingmesh

// The peer engine at scale on the host (docs/BENCHMARKS.md, "Peer probes at
// scale (host)"): the production Manager (selection, schedule, state
// machine, windows, publishing, the real control endpoint over UDP) probes
// 100, 1,000 or 10,000 peers at 1 Hz on the wall clock, through memTransport,
// which answers every probe in memory after a delay and with a loss rate.
// The peers' control endpoints are fakeFleet: one UDP socket per peer on its
// own loopback address, served by another process (the other nodes' work
// is not the node's).
//
//	go test -run '^$' -bench 'Peers(100|1000)At1Hz' -benchtime 10x ./verbs/pingmesh
//	go test -run '^$' -bench 'Peers10000At1Hz' -benchtime 10x ./verbs/pingmesh
//
// Each b.N iteration is one second of probing. Metrics: core-% (the
// process's user+system CPU time per wall second while probing, in percent
// of one core), allocs/probe (mallocs
// during the measured seconds per probe sent), bytes/peer (live heap after
// GC, with the manager running and its last published state held, minus the
// heap before it started, per configured peer). The consumers of each
// publish (D-Bus view, metrics) are measured in daemon/bus
// (BenchmarkPeersPublish*).

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/verbs/peer"
	"github.com/rdmad/rdmad/verbs/pingmesh/wire"
)

var (
	scaleDelay      = flag.Duration("scale.delay", 100*time.Microsecond, "BenchmarkPeers*At1Hz: time from a probe to its reply")
	scaleLoss       = flag.Float64("scale.loss", 0.001, "BenchmarkPeers*At1Hz: share of probes without a reply")
	scalePorts      = flag.Int("scale.ports", 1, "BenchmarkPeers*At1Hz: local probe ports (every peer is probed from each)")
	scaleProfile    = flag.String("scale.cpuprofile", "", "BenchmarkPeers*At1Hz: write a CPU profile of the measured seconds only (go test's -cpuprofile covers the warm-up too)")
	scaleMemProfile = flag.String("scale.memprofile", "", "BenchmarkPeers*At1Hz: write a heap profile when bytes/peer is measured, with the manager running")
	scaleWarmup     = flag.Duration("scale.warmup", 100*time.Second, "BenchmarkPeers*At1Hz: probing before the measurement, after every peer is up (100s fills the default window of 100 probes)")
)

// memTransport is a Transport in memory: every probe is answered after
// delay, except a share loss of them, by one goroutine that delivers the
// replies due together (as verbs/peer's completion loop takes a batch),
// woken once per batch by a timer that ProbeBatch arms.
type memTransport struct {
	ports   []peer.LocalPort
	delay   time.Duration
	loss    uint64 // probes without reply per 2^32
	onReply func(peer.Reply)

	mu      sync.Mutex
	q       []pendingReply // ring
	head, n int
	rng     rand.PCG
	timer   *time.Timer    // fires when the first reply falls due
	armed   bool           // timer is set for the first reply
	batch   []pendingReply // run's; made with the transport, so not counted as the node's memory

	sent, lost, admits atomic.Uint64
}

type pendingReply struct {
	r    peer.Reply
	sent time.Time
}

// responderDelay is the host delay every memTransport reply claims.
const responderDelay = 5 * time.Microsecond

func newMemTransport(ports int, delay time.Duration, loss float64) *memTransport {
	t := &memTransport{delay: delay, loss: uint64(loss * (1 << 32)), q: make([]pendingReply, 1024), batch: make([]pendingReply, 0, 1024), timer: time.NewTimer(time.Hour)}
	t.timer.Stop()
	t.rng.Seed(1, 2)
	for i := range ports {
		t.ports = append(t.ports, peer.LocalPort{Key: fmt.Sprintf("mem%d/1", i), Device: fmt.Sprintf("mem%d", i), Port: 1, LinkLayer: "Ethernet",
			Endpoint: peer.Endpoint{GID: [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: byte(i + 1)}, QPN: uint32(0x10 + i), QKey: 0x1234}})
	}
	return t
}

func (t *memTransport) Ports() ([]peer.LocalPort, error) { return t.ports, nil }

func (t *memTransport) Admit(local string, src peer.Endpoint, from netip.Addr, until time.Time) error {
	t.admits.Add(1)
	return nil
}

func (t *memTransport) ProbeBatch(local string, ts []peer.Target) int {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range ts {
		ts[i].Err = nil
		t.sent.Add(1)
		if t.rng.Uint64()&(1<<32-1) < t.loss {
			t.lost.Add(1)
			continue
		}
		if t.n == len(t.q) {
			q := make([]pendingReply, 2*len(t.q))
			for k := range t.n {
				q[k] = t.q[(t.head+k)%len(t.q)]
			}
			t.q, t.head = q, 0
		}
		t.q[(t.head+t.n)%len(t.q)] = pendingReply{r: peer.Reply{Local: local, From: peer.Endpoint{GID: ts[i].Dst.GID, QPN: ts[i].Dst.QPN},
			Seq: ts[i].Seq, ResponderDelay: responderDelay, Authenticated: ts[i].Auth}, sent: now}
		t.n++
	}
	if t.n > 0 && !t.armed {
		t.timer.Reset(t.delay)
		t.armed = true
	}
	return len(ts)
}

// run delivers the replies as they fall due, until ctx is done.
func (t *memTransport) run(ctx context.Context) {
	defer t.timer.Stop()
	batch := t.batch
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.timer.C:
		}
		now := time.Now()
		t.mu.Lock()
		t.armed = false
		for t.n > 0 {
			p := &t.q[t.head]
			if d := p.sent.Add(t.delay).Sub(now); d > 0 {
				t.timer.Reset(d)
				t.armed = true
				break
			}
			batch = append(batch, *p)
			*p = pendingReply{}
			t.head = (t.head + 1) % len(t.q)
			t.n--
		}
		t.mu.Unlock()
		for i := range batch {
			r := batch[i].r
			r.At, r.RTT = now, max(now.Sub(batch[i].sent), responderDelay)
			t.onReply(r)
			batch[i] = pendingReply{}
		}
		batch = batch[:0]
	}
}

// fakeFleet stands in for the peers' control endpoints, in a process of
// its own (this test binary again, see TestMain), so that neither its CPU
// time nor its allocations nor its threads count as the node's: peer i
// has a UDP socket on its own loopback address (127.1.0.0 + i + 1) and the
// node's control port, connected to the node's endpoint. It answers the
// node's queries (version 2, with a fingerprint equal to the node's) and,
// as every peer re-asks once a minute, sends each peer's query to the node
// once per period.
type fakeFleet struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// fleetStats are the fake fleet's counters and CPU time.
type fleetStats struct {
	answered, asked uint64
	cpu             time.Duration
}

const fleetEnv = "RDMAD_PINGMESH_FLEET" // "n ports node-addr:port period fingerprint-hex"

func TestMain(m *testing.M) {
	if spec := os.Getenv(fleetEnv); spec != "" {
		os.Exit(runFleet(spec))
	}
	os.Exit(m.Run())
}

func newFakeFleet(tb testing.TB, n, ports int, node netip.AddrPort, fp []byte, period time.Duration) *fakeFleet {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s %x", fleetEnv, n, ports, node, period, fp))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	f := &fakeFleet{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	if line, err := f.out.ReadString('\n'); err != nil || line != "ready\n" {
		f.close()
		tb.Fatalf("fake fleet: %q, %v", line, err)
	}
	return f
}

// stats asks the fleet for its counters.
func (f *fakeFleet) stats(tb testing.TB) fleetStats {
	var st fleetStats
	var cpu int64
	if _, err := io.WriteString(f.in, "stats\n"); err != nil {
		tb.Fatal(err)
	}
	line, err := f.out.ReadString('\n')
	if err == nil {
		_, err = fmt.Sscan(line, &st.answered, &st.asked, &cpu)
	}
	if err != nil {
		tb.Fatalf("fake fleet stats %q: %v", line, err)
	}
	st.cpu = time.Duration(cpu)
	return st
}

func (f *fakeFleet) close() {
	f.in.Close() // the fleet exits at the end of its input
	f.cmd.Wait()
}

// runFleet is the fake fleet's process.
func runFleet(spec string) int {
	var n, ports int
	var node, periodS, fpHex string
	if _, err := fmt.Sscan(spec, &n, &ports, &node, &periodS, &fpHex); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	period, err1 := time.ParseDuration(periodS)
	fp, err2 := hex.DecodeString(fpHex)
	nodeAP, err3 := netip.ParseAddrPort(node)
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 2
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(n)+256 {
		lim.Cur = min(lim.Max, uint64(n)+1024)
		unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	}
	f, err := listenFleet(n, ports, nodeAP, fp, period)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		return 1
	}
	go f.serve()
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Println(f.answered.Load(), f.asked.Load(), int64(processCPU()))
	}
	return 0
}

// A fleetSockets is the fake fleet's side: every peer's socket, the
// answers and queries they send, ready-made (serve allocates nothing).
type fleetSockets struct {
	fds      []int
	peerOf   []int32      // fd -> peer index
	answers  [][][][]byte // [peer][version-1][port index]
	queries  [][]byte     // [peer]
	ports    int
	epfd     int
	period   time.Duration
	answered atomic.Uint64
	asked    atomic.Uint64
}

func fleetAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 1, byte((i + 1) >> 8), byte(i + 1)})
}

func fleetGID(i int) [16]byte {
	a := fleetAddr(i).As4()
	return [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: a[1], 14: a[2], 15: a[3]}
}

func fleetQPN(i int) uint32 { return uint32(0x1000 + i) }

func listenFleet(n, ports int, node netip.AddrPort, fp []byte, period time.Duration) (*fleetSockets, error) {
	f := &fleetSockets{ports: ports, period: period}
	var err error
	if f.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, err
	}
	nodeSA := &unix.SockaddrInet4{Port: int(node.Port()), Addr: node.Addr().As4()}
	fpExt := wire.WithFingerprint(fp)
	for i := range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("fake peer %d: %w (raise the open files limit)", i, err)
		}
		f.fds = append(f.fds, fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(node.Port()), Addr: fleetAddr(i).As4()}); err != nil {
			return nil, fmt.Errorf("fake peer %d: bind %v: %w", i, fleetAddr(i), err)
		}
		if err := unix.Connect(fd, nodeSA); err != nil {
			return nil, err
		}
		if err := unix.EpollCtl(f.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return nil, err
		}
		for len(f.peerOf) <= fd {
			f.peerOf = append(f.peerOf, -1)
		}
		f.peerOf[fd] = int32(i)
		var byVer [][][]byte
		for _, ver := range []uint8{wire.Version1, wire.Version2} {
			var byIdx [][]byte
			for idx := range ports {
				m := wire.Message{Version: ver, Type: wire.TypeAnswer, Index: uint8(idx), Count: uint8(ports),
					QPN: fleetQPN(i) + uint32(idx)<<16, QKey: 0x4321, GID: fleetGID(i), NodeID: uint64(0xf000 + i)}
				if ver == wire.Version2 {
					m.Ext = []wire.Ext{{Type: wire.ExtFingerprint, Value: fp}}
				}
				b, err := m.Append(nil, nil)
				if err != nil {
					return nil, err
				}
				byIdx = append(byIdx, b)
			}
			byVer = append(byVer, byIdx)
		}
		f.answers = append(f.answers, byVer)
		q := wire.Message{Version: wire.Version2, Type: wire.TypeQuery, Nonce: uint64(i + 1), Count: uint8(ports),
			QPN: fleetQPN(i), QKey: 0x4321, GID: fleetGID(i), NodeID: uint64(0xf000 + i), Ext: fpExt}
		b, err := q.Append(nil, nil)
		if err != nil {
			return nil, err
		}
		f.queries = append(f.queries, b)
	}
	return f, nil
}

// fleetPoll is how often the fake fleet looks at its sockets. It polls
// rather than sleeping in epoll_wait: a datagram to a process asleep on
// its sockets makes the sender's system call wake it, and on a VM that
// cross-process wakeup costs the sender (the node) up to a millisecond per
// message, which a datagram to a remote peer does not.
const fleetPoll = 20 * time.Millisecond

// serve answers the node's queries and sends the peers' own, until the
// process exits.
func (f *fleetSockets) serve() {
	runtime.LockOSThread()
	events := make([]unix.EpollEvent, 256)
	buf := make([]byte, wire.MaxSize+1)
	start := time.Now()
	next := 0
	for {
		k, err := unix.EpollWait(f.epfd, events, 0)
		if err != nil && err != unix.EINTR {
			panic(err)
		}
		for _, e := range events[:max(k, 0)] {
			fd := int(e.Fd)
			i := f.peerOf[fd]
			for {
				n, err := unix.Read(fd, buf)
				if err != nil {
					break
				}
				b := buf[:n]
				if n < wire.Size || string(b[:4]) != "RDPC" || b[5] != wire.TypeQuery || (b[4] != wire.Version1 && b[4] != wire.Version2) {
					continue // the node's answers to our queries, or not ours
				}
				a := f.answers[i][b[4]-1][int(b[16])%f.ports]
				copy(a[8:16], b[8:16])
				if _, err := unix.Write(fd, a); err == nil {
					f.answered.Add(1)
				}
			}
		}
		if f.period > 0 {
			// Each peer asks the node once per period, spread evenly.
			due := int(int64(time.Since(start)) * int64(len(f.fds)) / int64(f.period))
			for ; next < due; next++ {
				i := next % len(f.fds)
				q := f.queries[i]
				binary.BigEndian.PutUint64(q[8:], uint64(next+1))
				if _, err := unix.Write(f.fds[i], q); err == nil {
					f.asked.Add(1)
				}
			}
		}
		if k < len(events) {
			time.Sleep(fleetPoll)
		}
	}
}

func processCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processSleeps returns how often the process's threads went to sleep
// (voluntary context switches): each is a wakeup later, the cost that
// BenchmarkTimerWakeup50Hz measures.
func processSleeps() int64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return ru.Nvcsw
}

// scaleFingerprint is the node's fingerprint, and every fake peer's: a
// homogeneous fleet, no mismatches.
func scaleFingerprint(ports []peer.LocalPort) wire.Fingerprint {
	f := wire.Fingerprint{Version: "0.0.0-bench", Kernel: "6.1.0-bench-amd64"}
	for i, lp := range ports {
		f.Ports = append(f.Ports, wire.FingerprintPort{Index: uint8(i), Key: lp.Key, Netdev: fmt.Sprintf("eth%d", i), NetdevMTU: 4200, ActiveMTU: 4096,
			LinkLayer: "Ethernet", FWVer: "22.39.1002", Driver: "mlx5_core", HasToS: true, ToS: 106, RoCEMode: "v2", Trust: "dscp", PFC: "3"})
	}
	return f
}

// A scaleRun is a Manager probing n fake peers.
type scaleRun struct {
	m      *Manager
	tr     *memTransport
	fleet  *fakeFleet
	n      int
	last   atomic.Pointer[apitype.Peers]
	pubs   atomic.Uint64 // publishes
	cancel context.CancelFunc
	done   chan error
	heap0  uint64
}

func startScale(tb testing.TB, n, ports int, delay time.Duration, loss float64) *scaleRun {
	l, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	node := l.LocalAddr().(*net.UDPAddr).AddrPort()
	l.Close()
	r := &scaleRun{n: n, tr: newMemTransport(ports, delay, loss), done: make(chan error, 1)}
	fp := scaleFingerprint(r.tr.ports)
	r.fleet = newFakeFleet(tb, n, ports, node, fp.Marshal(), time.Minute)
	s := Settings{Port: int(node.Port()), Group: "tor-000", Interval: time.Second, Timeout: 500 * time.Millisecond, Window: 100,
		MaxPeers: n, Rotate: time.Minute, Resolve: time.Minute,
		Threshold: Thresholds{DownAfter: 3, UpAfter: 3, LossPct: 1, MinLosses: 2}}
	for i := range n {
		s.Peers = append(s.Peers, Spec{Name: fleetAddr(i).String(), Group: fmt.Sprintf("tor-%03d", i/40)})
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.heap0 = ms.HeapAlloc
	r.m, err = New(Options{Transport: r.tr, NodeID: 1, ListenHost: node.Addr().String(), Logger: slog.New(slog.DiscardHandler),
		OnState:     func(ps apitype.Peers) { r.last.Store(&ps); r.pubs.Add(1) },
		Fingerprint: scaleFingerprint}, s)
	if err != nil {
		tb.Fatal(err)
	}
	r.tr.onReply = r.m.OnReply
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.tr.run(ctx)
	go func() { r.done <- r.m.Run(ctx) }()
	return r
}

func (r *scaleRun) stop(tb testing.TB) {
	r.cancel()
	if err := <-r.done; err != nil {
		tb.Errorf("Run = %v", err)
	}
	r.fleet.close()
}

// counts returns how many peers the last published state has, and how
// many of them answer (up or degraded).
func (r *scaleRun) counts() (peers, answering int) {
	ps := r.last.Load()
	if ps == nil {
		return 0, 0
	}
	for _, p := range ps.Peers {
		if p.State == apitype.PeerUp || p.State == apitype.PeerDegraded {
			answering++
		}
	}
	return len(ps.Peers), answering
}

// waitUp waits until every peer answers.
func (r *scaleRun) waitUp(tb testing.TB, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		peers, answering := r.counts()
		if peers == r.n && answering == r.n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %v: %d peers published, %d answering; want %d", limit, peers, answering, r.n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func BenchmarkPeers100At1Hz(b *testing.B)   { benchPeersAt1Hz(b, 100) }
func BenchmarkPeers1000At1Hz(b *testing.B)  { benchPeersAt1Hz(b, 1000) }
func BenchmarkPeers10000At1Hz(b *testing.B) { benchPeersAt1Hz(b, 10000) }

func benchPeersAt1Hz(b *testing.B, n int) {
	r := startScale(b, n, *scalePorts, *scaleDelay, *scaleLoss)
	defer r.stop(b)
	r.waitUp(b, 30*time.Second+time.Duration(n)*time.Millisecond)
	time.Sleep(*scaleWarmup)

	if *scaleProfile != "" {
		f, err := os.Create(*scaleProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	fleet0, cpu0, sleeps0 := r.fleet.stats(b), processCPU(), processSleeps()
	sent0, lost0, pubs0 := r.tr.sent.Load(), r.tr.lost.Load(), r.pubs.Load()
	start := time.Now()
	i := 0
	for b.Loop() {
		i++
		time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second)))
	}
	wall := time.Since(start)
	cpu, sleeps, fleet := processCPU(), processSleeps(), r.fleet.stats(b)
	sent, lost, pubs := r.tr.sent.Load()-sent0, r.tr.lost.Load()-lost0, r.pubs.Load()-pubs0
	runtime.ReadMemStats(&ms1)
	b.StopTimer()
	if *scaleProfile != "" {
		pprof.StopCPUProfile()
	}

	peers, answering := r.counts()
	// The run is only worth its figures if the node probed everyone at
	// the configured rate and saw them answer.
	wantRate := float64(n * *scalePorts)
	if rate := float64(sent) / wall.Seconds(); rate < 0.9*wantRate || rate > 1.2*wantRate {
		b.Errorf("%.0f probes/s, want about %.0f (%d peers x %d ports at 1 Hz)", rate, wantRate, n, *scalePorts)
	}
	if peers != n || answering < n*99/100 {
		b.Errorf("published %d peers, %d answering; want %d, nearly all answering", peers, answering, n)
	}
	runtime.GC()
	runtime.GC()
	var ms2 runtime.MemStats
	runtime.ReadMemStats(&ms2)
	if *scaleMemProfile != "" {
		f, err := os.Create(*scaleMemProfile)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}

	node := cpu - cpu0
	b.ReportMetric(100*node.Seconds()/wall.Seconds(), "core-%")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(max(sent, 1)), "allocs/probe")
	b.ReportMetric(float64(int64(ms2.HeapAlloc)-int64(r.heap0))/float64(n), "bytes/peer")
	b.ReportMetric(float64(sent)/wall.Seconds(), "probes/s")
	b.ReportMetric(float64(sleeps-sleeps0)/wall.Seconds(), "wakeups/s")
	b.ReportMetric(100*float64(lost)/float64(max(sent, 1)), "lost-%")
	b.Logf("%d peers: %d probes in %v (%d lost by the transport), %d publishes, node CPU %v, fake peers' process %v, %d control answers and %d queries from the fake peers, %d GCs",
		n, sent, wall.Round(time.Millisecond), lost, pubs, node, fleet.cpu-fleet0.cpu, fleet.answered-fleet0.answered, fleet.asked-fleet0.asked, ms1.NumGC-ms0.NumGC)
}

// BenchmarkTimerWakeup50Hz is the yardstick of the figures above: nothing
// but a goroutine woken by a 50 Hz ticker, each iteration a second, in
// the same process. Its core-% (and µs/wakeup) is what the machine charges
// for waking a goroutine: on a VM that is much more than on hardware, and
// it moves with what the host runs meanwhile. A node at 1,000 peers wakes
// some 40 times a second (the manager, the transport's completions, the
// control endpoint).
func BenchmarkTimerWakeup50Hz(b *testing.B) {
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	<-tk.C
	cpu0, sleeps0, start, n := processCPU(), processSleeps(), time.Now(), 0
	for b.Loop() {
		for range 50 {
			<-tk.C
			n++
		}
	}
	cpu, sleeps := processCPU()-cpu0, processSleeps()-sleeps0
	b.ReportMetric(100*cpu.Seconds()/time.Since(start).Seconds(), "core-%")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "µs/tick")
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(sleeps, 1)), "µs/wakeup")
	b.ReportMetric(float64(sleeps)/time.Since(start).Seconds(), "wakeups/s")
}
