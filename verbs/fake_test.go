//go:build linux && verbsfake

package verbs

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// fakeDevice adds a device for the test and removes everything at its end,
// failing the test if it left an object open.
func fakeDevice(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := FakeAddDevice(FakeDevice{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		FakeReset()
		if live := FakeLive(); len(live) != 0 {
			t.Errorf("objects left open: %v", live)
		}
	})
}

// end is one side of a test connection: its context, memory and one QP.
type end struct {
	c   *Context
	buf *Buffer
	pd  *PD
	mr  *MR
	ch  *CompChannel
	cq  *CQ
	qp  *QP
	gid GIDEntry
}

func newEnd(t *testing.T, dev string, typ QPType, access Access) *end {
	t.Helper()
	e := &end{}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.c, err = Open(dev)
	must(err)
	t.Cleanup(func() {
		if err := e.c.Close(); err != nil {
			t.Errorf("close %s: %v", dev, err)
		}
		e.buf.Close()
	})
	e.buf, err = AllocBuffer(4096)
	must(err)
	e.pd, err = e.c.AllocPD()
	must(err)
	e.mr, err = e.pd.RegMR(e.buf, access)
	must(err)
	e.ch, err = e.c.NewCompChannel()
	must(err)
	e.cq, err = e.c.NewCQ(16, e.ch)
	must(err)
	e.qp, err = e.pd.NewQP(QPConfig{Type: typ, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 4, MaxRecvWR: 4})
	must(err)
	table, err := e.c.GIDTable(1)
	must(err)
	var ok bool
	if e.gid, ok = PickGID(table, LinkLayerEthernet); !ok {
		t.Fatal("no GID")
	}
	return e
}

func (e *end) sge(off, n int) SGE {
	return SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func connect(t *testing.T, a, b *end, access Access, timeout, retry uint8) {
	t.Helper()
	for _, p := range [][2]*end{{a, b}, {b, a}} {
		q, r := p[0], p[1]
		path := Path{Port: 1, GIDIndex: q.gid.Index, Global: true, MTU: 3, RemoteGID: r.gid.GID}
		if err := q.qp.Init(1, access, 0); err != nil {
			t.Fatal(err)
		}
		if err := q.qp.ReadyToReceive(path, Remote{QPN: r.qp.Num()}); err != nil {
			t.Fatal(err)
		}
		if err := q.qp.ReadyToSend(0, timeout, retry); err != nil {
			t.Fatal(err)
		}
	}
}

func poll1(t *testing.T, cq *CQ) WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wcs := make([]WorkCompletion, 1)
	if _, err := cq.PollWait(ctx, wcs, 0); err != nil {
		t.Fatalf("wait for a completion: %v", err)
	}
	return wcs[0]
}

func TestFakeRC(t *testing.T) {
	fakeDevice(t, "fake0", "fake1")
	all := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
	a, b := newEnd(t, "fake0", QPTypeRC, all), newEnd(t, "fake1", QPTypeRC, all)
	connect(t, a, b, all, 14, 7)
	am, bm := a.buf.Bytes(), b.buf.Bytes()

	copy(am[0:5], "write")
	if err := a.qp.PostSend(SendWR{ID: 1, Opcode: OpRDMAWrite, SGE: a.sge(0, 5), RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.cq); wc.Err() != nil || wc.WRID != 1 || wc.Opcode != WCOpRDMAWrite {
		t.Errorf("WRITE completion %+v", wc)
	}
	if string(bm[100:105]) != "write" {
		t.Errorf("WRITE moved %q", bm[100:105])
	}

	copy(bm[200:204], "read")
	if err := a.qp.PostSend(SendWR{ID: 2, Opcode: OpRDMARead, SGE: a.sge(10, 4), RemoteAddr: b.mr.Addr() + 200, RKey: b.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	if wc := poll1(t, a.cq); wc.Err() != nil || wc.WRID != 2 {
		t.Errorf("READ completion %+v", wc)
	}
	if string(am[10:14]) != "read" {
		t.Errorf("READ moved %q", am[10:14])
	}

	// A SEND before the receive waits for it (infinite RNR retry); the
	// receiver sleeps on its channel's fd until the data lands.
	copy(am[20:24], "send")
	got := make(chan WorkCompletion, 1)
	go func() { got <- poll1(t, b.cq) }()
	if err := a.qp.PostSend(SendWR{ID: 3, Opcode: OpSend, SGE: a.sge(20, 4), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, _ := a.cq.Poll(make([]WorkCompletion, 1)); n != 0 {
		t.Error("SEND completed without a receive at the peer")
	}
	if err := b.qp.PostRecv(9, b.sge(300, 64)); err != nil {
		t.Fatal(err)
	}
	if wc := <-got; wc.Err() != nil || wc.WRID != 9 || wc.Opcode != WCOpRecv || wc.ByteLen != 4 || wc.SrcQP != a.qp.Num() {
		t.Errorf("receive completion %+v", wc)
	}
	if string(bm[300:304]) != "send" {
		t.Errorf("SEND moved %q", bm[300:304])
	}
	if wc := poll1(t, a.cq); wc.Err() != nil || wc.WRID != 3 {
		t.Errorf("SEND completion %+v", wc)
	}
}

func TestFakeRCErrors(t *testing.T) {
	fakeDevice(t, "fake0")
	all := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
	a, b := newEnd(t, "fake0", QPTypeRC, all), newEnd(t, "fake0", QPTypeRC, AccessLocalWrite|AccessRemoteWrite)
	connect(t, a, b, all, 14, 7)
	var wce *WCError
	for _, tc := range []struct {
		name string
		wr   SendWR
		want WCStatus
	}{
		{"wrong rkey", SendWR{Opcode: OpRDMAWrite, SGE: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1}, wcRemAccess},
		{"beyond the region", SendWR{Opcode: OpRDMAWrite, SGE: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 4090, RKey: b.mr.RKey()}, wcRemAccess},
		{"READ of a region without remote read", SendWR{Opcode: OpRDMARead, SGE: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}, wcRemAccess},
		{"wrong lkey", SendWR{Opcode: OpRDMAWrite, SGE: SGE{Addr: a.mr.Addr(), Length: 8, LKey: 77}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}, wcLocProtErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := a.qp.PostSend(tc.wr); err != nil {
				t.Fatal(err)
			}
			wc := poll1(t, a.cq)
			if wc.Status != tc.want || !errors.As(wc.Err(), &wce) {
				t.Errorf("completion %+v, want status %d", wc, tc.want)
			}
			if st, _ := a.qp.State(); st != QPStateErr {
				t.Errorf("QP state %s after an error completion, want ERR", st)
			}
			// In ERR a post completes flushed; RESET and a new connection
			// make the QP work again.
			if err := a.qp.PostSend(SendWR{ID: 5, Opcode: OpRDMAWrite, SGE: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := poll1(t, a.cq); wc.Status != WCFlushErr || wc.WRID != 5 {
				t.Errorf("post in ERR completed %+v, want flushed", wc)
			}
			for _, q := range []*QP{a.qp, b.qp} {
				if err := q.SetState(QPStateReset); err != nil {
					t.Fatal(err)
				}
			}
			connect(t, a, b, all, 14, 7)
		})
	}
	// A post outside RTS is refused as the kernel refuses it.
	a.qp.SetState(QPStateReset)
	if err := a.qp.PostSend(SendWR{Opcode: OpSend}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("post in RESET = %v, want EINVAL", err)
	}
	if err := a.qp.ReadyToSend(0, 14, 7); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("RESET->RTS = %v, want EINVAL", err)
	}
}

// TestFakeRetry: an RC request to a peer whose packets are dropped is
// retried every ACK timeout and fails after the retries, as hardware's.
func TestFakeRetry(t *testing.T) {
	fakeDevice(t, "fake0", "fake1")
	all := AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
	a, b := newEnd(t, "fake0", QPTypeRC, all), newEnd(t, "fake1", QPTypeRC, all)
	connect(t, a, b, all, 12, 3) // 16.8 ms timeout, 4 tries: about 67 ms
	FakeDrop(b.gid.GID, true)
	start := time.Now()
	if err := a.qp.PostSend(SendWR{ID: 7, Opcode: OpRDMAWrite, SGE: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	wc := poll1(t, a.cq)
	if took := time.Since(start); wc.Status != wcRetryExc || took < 60*time.Millisecond {
		t.Errorf("completion %+v after %v, want retry exceeded after about 67 ms", wc, took)
	}
	if wc.StatusText != "transport retry counter exceeded" {
		t.Errorf("status text %q", wc.StatusText)
	}
}

func TestFakeUD(t *testing.T) {
	fakeDevice(t, "fake0", "fake1")
	a, b := newEnd(t, "fake0", QPTypeUD, AccessLocalWrite), newEnd(t, "fake1", QPTypeUD, AccessLocalWrite)
	for _, e := range []*end{a, b} {
		if err := e.qp.Init(1, 0, 0x1234); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.ReadyToReceive(Path{}, Remote{}); err != nil {
			t.Fatal(err)
		}
		if err := e.qp.ReadyToSend(0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := a.pd.NewAH(Path{Port: 1, GIDIndex: a.gid.Index, Global: true, RemoteGID: b.gid.GID, TClass: 0x68})
	if err != nil {
		t.Fatal(err)
	}
	copy(a.buf.Bytes(), "probe")
	send := func(qkey uint32) {
		t.Helper()
		if err := a.qp.PostSend(SendWR{ID: 1, Opcode: OpSend, SGE: a.sge(0, 5), AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: qkey, Signaled: true}); err != nil {
			t.Fatal(err)
		}
		if wc := poll1(t, a.cq); wc.Err() != nil {
			t.Fatalf("send completion %+v", wc)
		}
	}
	if err := b.qp.PostRecv(4, b.sge(0, 128)); err != nil {
		t.Fatal(err)
	}
	send(0x1234)
	wc := poll1(t, b.cq)
	if wc.Err() != nil || wc.ByteLen != 45 || wc.Flags&WCGRH == 0 || wc.SrcQP != a.qp.Num() {
		t.Errorf("receive %+v", wc)
	}
	m := b.buf.Bytes()
	// RoCE v2 over IPv4: the IPv4 header in bytes 20..39, with the class
	// and both addresses, and the payload behind the 40 bytes.
	ip := m[20:40]
	if ip[0] != 0x45 || ip[1] != 0x68 || !bytes.Equal(ip[12:16], a.gid.GID[12:]) || !bytes.Equal(ip[16:20], b.gid.GID[12:]) || ipv4Sum(ip) != 0 {
		t.Errorf("IPv4 header % x", ip)
	}
	if string(m[40:45]) != "probe" {
		t.Errorf("payload %q", m[40:45])
	}
	// From the link-local RoCE v2 GID (index 1) to B's: the IPv6 header's
	// layout, both GIDs in it.
	ll, _ := b.c.GIDTable(1)
	ah6, err := a.pd.NewAH(Path{Port: 1, GIDIndex: 1, Global: true, RemoteGID: ll[1].GID})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(6, b.sge(0, 128)); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{ID: 2, Opcode: OpSend, SGE: a.sge(0, 5), AH: ah6, RemoteQPN: b.qp.Num(), RemoteQKey: 0x1234}); err != nil {
		t.Fatal(err)
	}
	a6, _ := a.c.GIDTable(1)
	if wc := poll1(t, b.cq); wc.Err() != nil || wc.Flags&WCGRH == 0 || m[0]>>4 != 6 || !bytes.Equal(m[8:24], a6[1].GID[:]) || !bytes.Equal(m[24:40], ll[1].GID[:]) {
		t.Errorf("receive %+v behind GRH % x", wc, m[:40])
	}

	// A wrong qkey, a drop, and no receive posted: lost, the send completes.
	for _, c := range []struct {
		name string
		qkey uint32
		drop bool
		recv bool
	}{{"wrong qkey", 0x999, false, true}, {"dropped", 0x1234, true, true}, {"no receive", 0x1234, false, false}} {
		FakeDrop(b.gid.GID, c.drop)
		if c.recv {
			if err := b.qp.PostRecv(5, b.sge(0, 128)); err != nil {
				t.Fatal(err)
			}
		}
		send(c.qkey)
		if n, _ := b.cq.Poll(make([]WorkCompletion, 1)); n != 0 {
			t.Errorf("%s: delivered", c.name)
		}
		FakeDrop(b.gid.GID, false)
		if c.recv {
			b.qp.SetState(QPStateReset) // drop the receive
			b.qp.Init(1, 0, 0x1234)
			b.qp.ReadyToReceive(Path{}, Remote{})
			b.qp.ReadyToSend(0, 0, 0)
		}
	}
}

func TestFakeEventsAndRemoval(t *testing.T) {
	fakeDevice(t, "fake0")
	c, err := Open("fake0")
	if err != nil {
		t.Fatal(err)
	}
	evs := make(chan AsyncEvent, 4)
	done := make(chan error, 1)
	go func() { done <- c.WatchAsyncEvents(context.Background(), func(ev AsyncEvent) { evs <- ev }) }()
	FakeSetPortState("fake0", 1, PortDown)
	if ev := <-evs; ev.Type != EventPortErr || ev.Port != 1 || ev.Device != "fake0" {
		t.Errorf("event %v, want fake0 port 1 PORT_ERR", ev)
	}
	if pa, _ := c.QueryPort(1); pa.State != PortDown {
		t.Errorf("port state %s, want DOWN", pa.State)
	}
	FakeDeviceFatal("fake0")
	if ev := <-evs; ev.Type != EventDeviceFatal {
		t.Errorf("event %v, want DEVICE_FATAL", ev)
	}
	if _, err := c.AllocPD(); !errors.Is(err, syscall.EIO) {
		t.Errorf("AllocPD after DEVICE_FATAL = %v, want EIO", err)
	}
	FakeRemoveDevice("fake0")
	if c.Alive() {
		t.Error("a removed device is alive")
	}
	if _, err := Open("fake0"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Open of the removed (last) device = %v, want unavailable", err)
	}
	c.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Errorf("WatchAsyncEvents after Close = %v, want ErrClosed", err)
	}
}

// TestFakeQPError: FakeQPError moves the QP to ERR, flushes its receives
// and tells its context QP_FATAL.
func TestFakeQPError(t *testing.T) {
	fakeDevice(t, "fake0")
	e := newEnd(t, "fake0", QPTypeUD, AccessLocalWrite)
	e.qp.Init(1, 0, 1)
	if err := e.qp.PostRecv(3, e.sge(0, 128)); err != nil {
		t.Fatal(err)
	}
	evs := make(chan AsyncEvent, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.c.WatchAsyncEvents(ctx, func(ev AsyncEvent) { evs <- ev }) }()
	if got := FakeQPs("fake0"); len(got) != 1 || got[0] != e.qp.Num() {
		t.Fatalf("FakeQPs = %v, want [%#x]", got, e.qp.Num())
	}
	if err := FakeQPError("fake0", e.qp.Num()); err != nil {
		t.Fatal(err)
	}
	if ev := <-evs; ev.Type != EventQPFatal || ev.QPNum != e.qp.Num() {
		t.Errorf("event %v, want QP_FATAL of QP %#x", ev, e.qp.Num())
	}
	if wc := poll1(t, e.cq); wc.Status != WCFlushErr || wc.WRID != 3 || wc.StatusText != "Work Request Flushed Error" {
		t.Errorf("completion %+v, want the receive flushed", wc)
	}
	if st, _ := e.qp.State(); st != QPStateErr {
		t.Errorf("state %s, want ERR", st)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchAsyncEvents after cancel = %v", err)
	}
}
