//go:build linux && verbsfake

package bw

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs"
)

// TestFakeBandwidth runs a requester and a responder against each other on
// the fake NIC (-tags verbsfake), negotiating over a loopback UDP socket as
// the control endpoint would: every operation moves exactly the bytes the
// result reports, and nothing is left open.
func TestFakeBandwidth(t *testing.T) {
	if err := verbs.FakeAddDevice(loopbackDevice()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the test left verbs objects open: %v", live)
		}
	})
	resp := New(Config{NodeID: 2})
	resp.SetEnabled(true)
	peer := serveControl(t, resp)
	req := New(Config{NodeID: 1})
	defer req.Close()

	for _, op := range []wire.BWOp{wire.BWWrite, wire.BWRead, wire.BWSend} {
		t.Run(op.String(), func(t *testing.T) {
			before := verbs.FakeBytesMoved()
			res, err := req.Run(context.Background(), Request{Peer: peer, Name: "peer", Op: op, Size: 4096, Duration: wire.MinBWDuration})
			if err != nil {
				t.Fatal(err)
			}
			moved := verbs.FakeBytesMoved() - before
			if res.Messages == 0 || res.Bytes != res.Messages*4096 || res.Bytes != moved || res.Gbps <= 0 || res.Local != "fake0/1" {
				t.Errorf("result %+v; the fake moved %d bytes", res, moved)
			}
			// The requester's done ends the responder's side.
			deadline := time.Now().Add(5 * time.Second)
			for resp.busyWith() != "" && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if b := resp.busyWith(); b != "" {
				t.Errorf("responder still busy with %q after the test", b)
			}
		})
	}
	resp.Close()
	if s := resp.Stats(); s.Served != 3 {
		t.Errorf("responder served %d tests, want 3", s.Served)
	}
}

// TestFakeBandwidthErrorCompletion: a request that completes in error
// mid-test (the fake's injected retry exceeded) ends the test, and Run
// returns that completion's error.
func TestFakeBandwidthErrorCompletion(t *testing.T) {
	if err := verbs.FakeAddDevice(loopbackDevice()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		verbs.FakeReset()
		if live := verbs.FakeLive(); len(live) != 0 {
			t.Errorf("the test left verbs objects open: %v", live)
		}
	})
	resp := New(Config{NodeID: 2})
	resp.SetEnabled(true)
	defer resp.Close()
	peer := serveControl(t, resp)
	req := New(Config{NodeID: 1})
	defer req.Close()
	go func() {
		// Once the test runs, fail the next request (retry exceeded).
		for resp.busyWith() == "" {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		verbs.FakeFailWork("fake0", 1, verbs.WCStatus(12))
	}()
	_, err := req.Run(context.Background(), Request{Peer: peer, Op: wire.BWWrite, Size: 4096, Duration: 2 * time.Second})
	var wce *verbs.WCError
	if !errors.As(err, &wce) || wce.Status != 12 {
		t.Errorf("Run = %v, want the error completion", err)
	}
}

// loopbackDevice is a fake RoCE device whose RoCE v2 GID is 127.0.0.1's,
// the address the tests' control endpoint answers on and sends from: a
// bandwidth test connects only to the peer's own address's GID (#24 item
// 2), on both sides.
func loopbackDevice() verbs.FakeDevice {
	var ll, v4 verbs.GID
	ll[0], ll[1], ll[15] = 0xfe, 0x80, 1
	v4[10], v4[11], v4[12], v4[15] = 0xff, 0xff, 127, 1
	return verbs.FakeDevice{Name: "fake0", Ports: []verbs.FakePort{{GIDs: []verbs.GIDEntry{
		{Index: 0, GID: ll, Type: verbs.GIDTypeRoCEv1, IfIndex: 1},
		{Index: 1, GID: ll, Type: verbs.GIDTypeRoCEv2, IfIndex: 1},
		{Index: 2, GID: v4, Type: verbs.GIDTypeRoCEv1, IfIndex: 1},
		{Index: 3, GID: v4, Type: verbs.GIDTypeRoCEv2, IfIndex: 1},
	}}}}
}

func (n *Node) busyWith() string { return n.slot.Holder() }

// serveControl answers bandwidth messages for n on a loopback UDP socket,
// as the peer control endpoint does after admitting them, until the test
// ends.
func serveControl(t *testing.T, n *Node) netip.AddrPort {
	t.Helper()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, wire.MaxSize+1)
		for {
			k, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			m, err := wire.Decode(buf[:k], nil)
			if err != nil {
				continue
			}
			if ans, ok := n.Handle(from, m); ok {
				if b, err := ans.Append(nil, nil); err == nil {
					conn.WriteToUDPAddrPort(b, from)
				}
			}
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return conn.LocalAddr().(*net.UDPAddr).AddrPort()
}
