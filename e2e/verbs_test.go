//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/size"
	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/mrpool"
)

// verbsDev is the Soft-RoCE device test/vm/run creates over eth0.
const verbsDev = "rxe0"

// verbsRequireVM skips unless the test runs inside the test VM with
// Soft-RoCE: real verbs need rdma_rxe, which the host kernel lacks.
func verbsRequireVM(t testing.TB) {
	t.Helper()
	if os.Getenv("RDMAD_VM") != "1" {
		t.Skip("not inside the rdmad test VM (RDMAD_VM unset): real verbs need Soft-RoCE (rdma_rxe); run test/vm/e2e")
	}
	if !realVerbs {
		// Not a skip: the VM has Soft-RoCE and libibverbs, only the build
		// left them out, and a skip would hide every verbs test.
		t.Fatal("this e2e binary was built with CGO_ENABLED=0 (or -tags verbsfake), so package verbs is not libibverbs; " +
			"build the e2e binaries with CGO_ENABLED=1 and without verbsfake (the VM image has libibverbs1)")
	}
}

// verbsOpen opens rxe0 and closes it at the end of the test.
func verbsOpen(t testing.TB) *verbs.Context {
	t.Helper()
	c, err := verbs.Open(verbsDev)
	if err != nil {
		t.Fatalf("open %s: %v", verbsDev, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close %s: %v", verbsDev, err)
		}
	})
	return c
}

// verbsRun runs a command with a bound and returns its combined output.
func verbsRun(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// verbsSysfsGIDs reads port 1's GID table from sysfs as the kernel shows
// it: index -> (gid, type).
func verbsSysfsGIDs(t *testing.T) map[int][2]string {
	t.Helper()
	dir := filepath.Join("/sys/class/infiniband", verbsDev, "ports/1")
	out := map[int][2]string{}
	for i := 0; i < 16; i++ {
		g, err := os.ReadFile(filepath.Join(dir, "gids", strconv.Itoa(i)))
		if err != nil {
			break
		}
		gid := strings.TrimSpace(string(g))
		if gid == "0000:0000:0000:0000:0000:0000:0000:0000" {
			continue
		}
		typ, err := os.ReadFile(filepath.Join(dir, "gid_attrs/types", strconv.Itoa(i)))
		if err != nil {
			continue
		}
		out[i] = [2]string{gid, strings.TrimSpace(string(typ))}
	}
	return out
}

func TestVerbsOpenAndQuery(t *testing.T) {
	verbsRequireVM(t)
	devs, err := verbs.Devices()
	if err != nil {
		t.Fatalf("Devices: %v", err)
	}
	found := false
	for _, d := range devs {
		if d.Name == verbsDev {
			found = true
			if d.UverbsDev == "" || d.DevPath == "" {
				t.Errorf("device %+v lacks its uverbs node", d)
			}
		}
	}
	if !found {
		t.Fatalf("Devices() = %+v, want %s", devs, verbsDev)
	}
	c := verbsOpen(t)
	if !c.Alive() {
		t.Errorf("Alive() = false for an open, registered device")
	}
	da, err := c.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	if da.PhysPortCount != 1 || da.MaxQP == 0 || da.MaxMRSize == 0 {
		t.Errorf("QueryDevice = %+v; want 1 port and non-zero limits", da)
	}
	pa, err := c.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if pa.State != verbs.PortActive || pa.LinkLayer != verbs.LinkLayerEthernet || pa.ActiveMTU.Bytes() == 0 {
		t.Errorf("QueryPort(1) = %+v; want ACTIVE Ethernet with an MTU", pa)
	}
	table, err := c.GIDTable(1)
	if err != nil {
		t.Fatal(err)
	}
	// The verbs view of the GID table must be the kernel's sysfs view.
	sys := verbsSysfsGIDs(t)
	if len(table) != len(sys) {
		t.Errorf("GIDTable has %d entries, sysfs %d: %+v vs %v", len(table), len(sys), table, sys)
	}
	for _, e := range table {
		s, ok := sys[e.Index]
		if !ok {
			t.Errorf("GID index %d (%s) not in sysfs", e.Index, e.GID)
			continue
		}
		if want := map[string]verbs.GIDType{"IB/RoCE v1": verbs.GIDTypeRoCEv1, "RoCE v2": verbs.GIDTypeRoCEv2}[s[1]]; want != e.Type {
			t.Errorf("GID index %d type %v, sysfs says %q", e.Index, e.Type, s[1])
		}
		if got := verbsColonGID(e.GID); got != s[0] {
			t.Errorf("GID index %d = %s, sysfs says %s", e.Index, got, s[0])
		}
	}
	g, ok := verbs.PickGID(table, pa.LinkLayer)
	if !ok || g.Type != verbs.GIDTypeRoCEv2 {
		t.Errorf("PickGID = %+v, %v; want a RoCE v2 GID", g, ok)
	}
	if _, err := c.QueryPort(9); err == nil {
		t.Errorf("QueryPort(9) on a one-port device succeeded")
	}
	if _, err := verbs.Open("nosuch0"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("Open(nosuch0) = %v, want ErrNoDevice", err)
	}
}

// verbsColonGID formats a GID the way sysfs does: eight groups of four hex
// digits.
func verbsColonGID(g verbs.GID) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", g[i], g[i+1]))
	}
	return strings.Join(parts, ":")
}

func TestVerbsRegMR(t *testing.T) {
	verbsRequireVM(t)
	c := verbsOpen(t)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{4 << 10, 64 << 10, 1 << 20} {
		t.Run(size.Size(n).String(), func(t *testing.T) {
			b, err := verbs.AllocBuffer(n)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			mr, err := pd.RegMR(b, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
			if err != nil {
				t.Fatal(err)
			}
			if mr.Len() != n || mr.Addr() != uint64(uintptrOfVerbs(b.Bytes())) || mr.LKey() == 0 {
				t.Errorf("MR len %d addr %#x lkey %#x; want len %d at the buffer", mr.Len(), mr.Addr(), mr.LKey(), n)
			}
			if err := mr.Close(); err != nil {
				t.Errorf("dereg: %v", err)
			}
		})
	}
	if err := pd.Close(); err != nil {
		t.Errorf("dealloc PD: %v", err)
	}
}

// TestVerbsRegMRMemlock lowers RLIMIT_MEMLOCK to 64KiB and drops
// CAP_IPC_LOCK (root ignores the limit with it) on one locked thread, then
// registers 1MiB on that thread: the kernel must refuse with ENOMEM and
// the error must tell the operator what to raise.
func TestVerbsRegMRMemlock(t *testing.T) {
	verbsRequireVM(t)
	c := verbsOpen(t)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	b, err := verbs.AllocBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 64 << 10, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)

	type result struct {
		mr  *verbs.MR
		err error
		st  verbs.MemlockStatus
	}
	done := make(chan result)
	go func() {
		// Capabilities are per thread. This goroutine keeps its thread
		// locked and never unlocks it, so the runtime discards the thread
		// with its reduced capabilities when the goroutine ends.
		runtime.LockOSThread()
		if err := verbsDropEffectiveCap(unix.CAP_IPC_LOCK); err != nil {
			done <- result{err: fmt.Errorf("drop CAP_IPC_LOCK: %w", err)}
			return
		}
		st, _ := verbs.ReadMemlock()
		mr, err := pd.RegMR(b, verbs.AccessLocalWrite)
		done <- result{mr, err, st}
	}()
	r := <-done
	if r.mr != nil {
		r.mr.Close()
		t.Fatalf("RegMR of 1MiB with RLIMIT_MEMLOCK 64KiB and no CAP_IPC_LOCK succeeded (memlock %+v)", r.st)
	}
	if !errors.Is(r.err, syscall.ENOMEM) {
		t.Fatalf("RegMR = %v, want ENOMEM", r.err)
	}
	if r.st.CapIPCLock || r.st.Limit != 64<<10 {
		t.Errorf("ReadMemlock on the restricted thread = %+v; want limit 64KiB without CAP_IPC_LOCK", r.st)
	}
	want := "ibv_reg_mr 1MiB on rxe0: cannot allocate memory; RLIMIT_MEMLOCK is 64KiB with "
	if !strings.HasPrefix(r.err.Error(), want) || !strings.Contains(r.err.Error(), "raise LimitMEMLOCK=") {
		t.Errorf("error = %q\nwant it to start %q and say to raise LimitMEMLOCK=", r.err, want)
	}
	t.Logf("memlock error: %v", r.err)
}

// verbsDropEffectiveCap clears capability c from the calling thread's
// effective set (it stays permitted).
func verbsDropEffectiveCap(c int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[c/32].Effective &^= 1 << (uint(c) % 32)
	return unix.Capset(&hdr, &data[0])
}

// verbsRC is a pair of RC QPs on rxe0 port 1 connected to each other, with
// one registered page, as a probe or an application would build them.
type verbsRC struct {
	c    *verbs.Context
	pd   *verbs.PD
	ch   *verbs.CompChannel
	cq   *verbs.CQ
	a, b *verbs.QP
	buf  *verbs.Buffer
	mr   *verbs.MR
}

func verbsNewRC(t *testing.T, c *verbs.Context) *verbsRC {
	t.Helper()
	r := &verbsRC{c: c}
	var err error
	must := func(e error) {
		t.Helper()
		if e != nil {
			t.Fatal(e)
		}
	}
	r.pd, err = c.AllocPD()
	must(err)
	r.buf, err = verbs.AllocBuffer(4096)
	must(err)
	t.Cleanup(func() { r.buf.Close() })
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	r.mr, err = r.pd.RegMR(r.buf, acc)
	must(err)
	r.ch, err = c.NewCompChannel()
	must(err)
	r.cq, err = c.NewCQ(16, r.ch)
	must(err)
	cfg := verbs.QPConfig{Type: verbs.QPTypeRC, SendCQ: r.cq, RecvCQ: r.cq, MaxSendWR: 8, MaxRecvWR: 8}
	r.a, err = r.pd.NewQP(cfg)
	must(err)
	r.b, err = r.pd.NewQP(cfg)
	must(err)
	pa, err := c.QueryPort(1)
	must(err)
	table, err := c.GIDTable(1)
	must(err)
	g, ok := verbs.PickGID(table, pa.LinkLayer)
	if !ok {
		t.Fatalf("no usable GID on %s port 1: %+v", verbsDev, table)
	}
	path := verbs.Path{Port: 1, GIDIndex: g.Index, Global: true, MTU: pa.ActiveMTU, RemoteGID: g.GID}
	for _, p := range [][2]*verbs.QP{{r.a, r.b}, {r.b, r.a}} {
		must(p[0].Init(1, acc, 0))
		must(p[0].ReadyToReceive(path, verbs.Remote{QPN: p[1].Num()}))
		must(p[0].ReadyToSend(0, 14, 7))
	}
	for _, q := range []*verbs.QP{r.a, r.b} {
		if st, err := q.State(); err != nil || st != verbs.QPStateRTS {
			t.Fatalf("QP 0x%x state %v, %v; want RTS", q.Num(), st, err)
		}
	}
	return r
}

func (r *verbsRC) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: r.mr.Addr() + uint64(off), Length: uint32(n), LKey: r.mr.LKey()}
}

// wait collects n completions within 5s, sleeping on the channel (no spin).
func (r *verbsRC) wait(t *testing.T, n int) []verbs.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var all []verbs.WorkCompletion
	wcs := make([]verbs.WorkCompletion, 4)
	for len(all) < n {
		k, err := r.cq.PollWait(ctx, wcs, 0)
		if err != nil {
			t.Fatalf("waiting for %d completions (have %d): %v", n, len(all), err)
		}
		all = append(all, wcs[:k]...)
	}
	return all
}

func TestVerbsRCLoopback(t *testing.T) {
	verbsRequireVM(t)
	c := verbsOpen(t)
	r := verbsNewRC(t, c)
	mem := r.buf.Bytes()
	copy(mem[0:], "rdma write payload")
	copy(mem[1024:], "rdma read payload!")
	copy(mem[2048:], "send payload......")

	// WRITE [0,18) into [512,530).
	if err := r.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGE: r.sge(0, 18), RemoteAddr: r.mr.Addr() + 512, RKey: r.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := r.wait(t, 1)[0]; wc.Err() != nil || wc.WRID != 1 || wc.Opcode != verbs.WCOpRDMAWrite {
		t.Fatalf("WRITE completion %+v", wc)
	}
	if got := string(mem[512:530]); got != "rdma write payload" {
		t.Errorf("WRITE delivered %q", got)
	}
	// READ [1024,1042) into [1536,1554).
	if err := r.a.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpRDMARead, SGE: r.sge(1536, 18), RemoteAddr: r.mr.Addr() + 1024, RKey: r.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := r.wait(t, 1)[0]; wc.Err() != nil || wc.WRID != 2 || wc.Opcode != verbs.WCOpRDMARead || wc.ByteLen != 18 {
		t.Fatalf("READ completion %+v", wc)
	}
	if got := string(mem[1536:1554]); got != "rdma read payload!" {
		t.Errorf("READ fetched %q", got)
	}
	// SEND [2048,2066) to B's receive at [3072,3136).
	if err := r.b.PostRecv(3, r.sge(3072, 64)); err != nil {
		t.Fatal(err)
	}
	if err := r.a.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.OpSend, SGE: r.sge(2048, 18), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	wcs := r.wait(t, 2)
	var sawRecv bool
	for _, wc := range wcs {
		if wc.Err() != nil {
			t.Fatalf("SEND/RECV completion %+v: %v", wc, wc.Err())
		}
		if wc.WRID == 3 {
			sawRecv = true
			if wc.Opcode != verbs.WCOpRecv || wc.ByteLen != 18 || wc.QPNum != r.b.Num() {
				t.Errorf("RECV completion %+v; want 18 bytes on QP 0x%x", wc, r.b.Num())
			}
		}
	}
	if !sawRecv {
		t.Errorf("no receive completion in %+v", wcs)
	}
	if got := string(mem[3072:3090]); got != "send payload......" {
		t.Errorf("RECV got %q", got)
	}
}

// TestVerbsQPErrorFlush moves a QP to ERR: posted receives must complete
// with the flush status and the QP must report ERR, the state the probe
// detects and recovers from.
func TestVerbsQPErrorFlush(t *testing.T) {
	verbsRequireVM(t)
	c := verbsOpen(t)
	r := verbsNewRC(t, c)
	if err := r.b.PostRecv(9, r.sge(0, 64)); err != nil {
		t.Fatal(err)
	}
	if err := r.b.SetState(verbs.QPStateErr); err != nil {
		t.Fatal(err)
	}
	if st, err := r.b.State(); err != nil || st != verbs.QPStateErr {
		t.Fatalf("State = %v, %v; want ERR", st, err)
	}
	wc := r.wait(t, 1)[0]
	var wce *verbs.WCError
	if wc.WRID != 9 || wc.Status != verbs.WCFlushErr || !errors.As(wc.Err(), &wce) {
		t.Errorf("completion %+v (%v); want WR 9 flushed", wc, wc.Err())
	}
	t.Logf("flushed: %v", wc.Err())
}

// TestVerbsUDLoopback sends a datagram from one UD QP to another through
// an address handle on rxe0's RoCE v2 GID.
func TestVerbsUDLoopback(t *testing.T) {
	verbsRequireVM(t)
	c := verbsOpen(t)
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf, err := verbs.AllocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { buf.Close() })
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.NewCQ(8, ch)
	if err != nil {
		t.Fatal(err)
	}
	const qkey = 0x11111111
	var qps [2]*verbs.QP
	for i := range qps {
		q, err := pd.NewQP(verbs.QPConfig{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Init(1, 0, qkey); err != nil {
			t.Fatal(err)
		}
		if err := q.ReadyToReceive(verbs.Path{}, verbs.Remote{}); err != nil {
			t.Fatal(err)
		}
		if err := q.ReadyToSend(0, 0, 0); err != nil {
			t.Fatal(err)
		}
		qps[i] = q
	}
	pa, _ := c.QueryPort(1)
	table, _ := c.GIDTable(1)
	g, _ := verbs.PickGID(table, pa.LinkLayer)
	ah, err := pd.NewAH(verbs.Path{Port: 1, GIDIndex: g.Index, Global: true, RemoteGID: g.GID})
	if err != nil {
		t.Fatal(err)
	}
	mem := buf.Bytes()
	copy(mem, "ud datagram")
	// A UD receive starts with the 40-byte GRH.
	if err := qps[1].PostRecv(1, verbs.SGE{Addr: mr.Addr() + 1024, Length: 40 + 64, LKey: mr.LKey()}); err != nil {
		t.Fatal(err)
	}
	if err := qps[0].PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpSend, SGE: verbs.SGE{Addr: mr.Addr(), Length: 11, LKey: mr.LKey()},
		Signaled: true, AH: ah, RemoteQPN: qps[1].Num(), RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := 0
	wcs := make([]verbs.WorkCompletion, 4)
	for got < 2 {
		n, err := cq.PollWait(ctx, wcs, 0)
		if err != nil {
			t.Fatalf("UD completions: %v", err)
		}
		for _, wc := range wcs[:n] {
			if wc.Err() != nil {
				t.Fatalf("UD completion %+v: %v", wc, wc.Err())
			}
			if wc.WRID == 1 && (wc.ByteLen != 40+11 || wc.SrcQP != qps[0].Num()) {
				t.Errorf("UD receive %+v; want 51 bytes from QP 0x%x", wc, qps[0].Num())
			}
		}
		got += n
	}
	if s := string(mem[1024+40 : 1024+40+11]); s != "ud datagram" {
		t.Errorf("UD payload %q", s)
	}
}

// TestVerbsAsyncPortEvents takes eth0 down and up: rxe reports the port
// going down and coming back as PORT_ERR and PORT_ACTIVE async events,
// delivered through the non-blocking async fd.
func TestVerbsAsyncPortEvents(t *testing.T) {
	verbsRequireVM(t)
	c := verbsOpen(t)
	events := make(chan verbs.AsyncEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.WatchAsyncEvents(ctx, func(ev verbs.AsyncEvent) {
			select {
			case events <- ev:
			default:
			}
		})
	}()
	t.Cleanup(func() { verbsRun(30*time.Second, "ip", "link", "set", "eth0", "up") })
	expect := func(typ verbs.AsyncEventType) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case ev := <-events:
				t.Logf("event: %v", ev)
				if ev.Type == typ && ev.Port == 1 && ev.Device == verbsDev {
					return
				}
			case <-timeout:
				t.Fatalf("no %v event within 20s", typ)
			}
		}
	}
	if _, err := verbsRun(30*time.Second, "ip", "link", "set", "eth0", "down"); err != nil {
		t.Fatal(err)
	}
	expect(verbs.EventPortErr)
	if pa, err := c.QueryPort(1); err != nil || pa.State == verbs.PortActive {
		t.Errorf("port state after eth0 down: %v, %v", pa.State, err)
	}
	if _, err := verbsRun(30*time.Second, "ip", "link", "set", "eth0", "up"); err != nil {
		t.Fatal(err)
	}
	expect(verbs.EventPortActive)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchAsyncEvents after cancel = %v, want context.Canceled", err)
	}
	// Closing the context ends a watch too.
	go func() { done <- c.WatchAsyncEvents(context.Background(), func(verbs.AsyncEvent) {}) }()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("WatchAsyncEvents after Close = %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchAsyncEvents did not return after Close")
	}
}

// TestVerbsMRPool registers the pool's classes on rxe0, moves data by RDMA
// WRITE from one pool buffer into another with the pool's keys, and runs
// the registration canary.
func TestVerbsMRPool(t *testing.T) {
	verbsRequireVM(t)
	p, err := mrpool.New(mrpool.Config{Classes: []mrpool.Class{{Size: 4 << 10, Count: 256}, {Size: 1 << 20, Count: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.AddDevice(verbsDev); err != nil {
		t.Fatal(err)
	}
	d := p.Device(verbsDev)
	if d == nil {
		t.Fatal("Device(rxe0) = nil after AddDevice")
	}
	src, ok1 := d.Get(100)
	dst, ok2 := d.Get(100)
	big, ok3 := d.Get(512 << 10)
	if !ok1 || !ok2 || !ok3 || src.Size() != 4<<10 || big.Size() != 1<<20 {
		t.Fatalf("Get: %v %v %v sizes %d %d", ok1, ok2, ok3, src.Size(), big.Size())
	}
	copy(src.Bytes(), "from the pool")
	// An RC pair in the pool's PD proves the keys are live.
	c := d.Context()
	ch, err := c.NewCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := c.NewCQ(8, ch)
	if err != nil {
		t.Fatal(err)
	}
	pa, _ := c.QueryPort(1)
	table, _ := c.GIDTable(1)
	g, _ := verbs.PickGID(table, pa.LinkLayer)
	path := verbs.Path{Port: 1, GIDIndex: g.Index, Global: true, MTU: pa.ActiveMTU, RemoteGID: g.GID}
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	var qps [2]*verbs.QP
	for i := range qps {
		if qps[i], err = d.PD().NewQP(verbs.QPConfig{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4}); err != nil {
			t.Fatal(err)
		}
	}
	for i, q := range qps {
		if err := q.Init(1, acc, 0); err != nil {
			t.Fatal(err)
		}
		if err := q.ReadyToReceive(path, verbs.Remote{QPN: qps[1-i].Num()}); err != nil {
			t.Fatal(err)
		}
		if err := q.ReadyToSend(0, 14, 7); err != nil {
			t.Fatal(err)
		}
	}
	if err := qps[0].PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGE: src.SGE(13), RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]verbs.WorkCompletion, 1)
	if _, err := cq.PollWait(ctx, wcs, 0); err != nil || wcs[0].Err() != nil {
		t.Fatalf("WRITE between pool buffers: %v %v", err, wcs[0].Err())
	}
	if got := string(dst.Bytes()[:13]); got != "from the pool" {
		t.Errorf("pool WRITE delivered %q", got)
	}
	for _, q := range qps {
		q.Close()
	}
	cq.Close()
	ch.Close()

	p.Tick() // one canary round
	st := p.Stats()
	if len(st) != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	s := st[0]
	if !s.Registered || s.RegisteredBytes != 256*4<<10+8<<20 || s.InUse != 3 || s.Canary.Registrations != 1 || s.Canary.LastLatency <= 0 {
		t.Errorf("Stats = %+v; want 9MiB registered, 3 in use, one canary registration", s)
	}
	t.Logf("canary registration+deregistration of 64KiB: %v", s.Canary.LastLatency)
	d.Put(src)
	d.Put(dst)
	d.Put(big)
}

// BenchmarkVerbsRegMR is what the MR pool saves: ibv_reg_mr followed by
// ibv_dereg_mr on rxe0.
func BenchmarkVerbsRegMR(b *testing.B) {
	verbsRequireVM(b)
	c := verbsOpen(b)
	pd, err := c.AllocPD()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(size.Size(n).String(), func(b *testing.B) {
			buf, err := verbs.AllocBuffer(n)
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Close()
			for b.Loop() {
				mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
				if err != nil {
					b.Fatal(err)
				}
				mr.Close()
			}
		})
	}
}

// BenchmarkVerbsPoolGetPut is the pool's Get+Put on a registered rxe0 pool,
// in the same binary and VM as BenchmarkVerbsRegMR.
func BenchmarkVerbsPoolGetPut(b *testing.B) {
	verbsRequireVM(b)
	p, err := mrpool.New(mrpool.Config{Classes: []mrpool.Class{{Size: 4 << 10, Count: 16}, {Size: 64 << 10, Count: 16}, {Size: 1 << 20, Count: 4}}})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if err := p.AddDevice(verbsDev); err != nil {
		b.Fatal(err)
	}
	d := p.Device(verbsDev)
	for _, n := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run(size.Size(n).String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				x, ok := d.Get(n)
				if !ok {
					b.Fatal("pool exhausted")
				}
				d.Put(x)
			}
		})
	}
}

func uintptrOfVerbs(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
