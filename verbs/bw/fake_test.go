//go:build linux && verbsfake

package bw

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
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
	// Several queue pairs in parallel: the responder connects one to
	// each of the requester's (wire.ExtBWQPs).
	for _, op := range []wire.BWOp{wire.BWWrite, wire.BWRead, wire.BWSend} {
		t.Run(op.String()+" 4 QPs", func(t *testing.T) {
			before := verbs.FakeBytesMoved()
			res, err := req.Run(context.Background(), Request{Peer: peer, Name: "peer", Op: op, Size: 4096, Duration: wire.MinBWDuration, QPs: 4})
			if err != nil {
				t.Fatal(err)
			}
			moved := verbs.FakeBytesMoved() - before
			if res.QPs != 4 || res.Messages == 0 || res.Bytes != res.Messages*4096 || res.Bytes != moved {
				t.Errorf("result %+v; the fake moved %d bytes", res, moved)
			}
			// The responder frees its slot, then its QPs (endResponder).
			deadline := time.Now().Add(5 * time.Second)
			for len(verbs.FakeLive()) != 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if live := verbs.FakeLive(); len(live) != 0 {
				t.Errorf("verbs objects left after the test: %v", live)
			}
		})
	}
	if _, err := req.Run(context.Background(), Request{Peer: peer, Op: wire.BWWrite, Size: 4096, Duration: wire.MinBWDuration, QPs: MaxQPs + 1}); err == nil || !strings.Contains(err.Error(), "17 queue pairs is out of range") {
		t.Errorf("Run with 17 QPs = %v; want the bound", err)
	}
	resp.Close()
	if s := resp.Stats(); s.Served != 6 {
		t.Errorf("responder served %d tests, want 6", s.Served)
	}
}

// TestFakeBandwidthOldResponder: a responder that does not know
// wire.ExtBWQPs (an older rdmad) answers a request for several queue
// pairs with one; the requester refuses to run on it, says why, and frees
// the responder's side with its done message.
func TestFakeBandwidthOldResponder(t *testing.T) {
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
	peer := serveControlWith(t, resp, func(m wire.Message) wire.Message {
		var keep []wire.Ext
		for _, e := range m.Ext {
			if e.Type != wire.ExtBWQPs {
				keep = append(keep, e)
			}
		}
		m.Ext = keep
		return m
	})
	req := New(Config{NodeID: 1})
	defer req.Close()
	_, err := req.Run(context.Background(), Request{Peer: peer, Op: wire.BWWrite, Size: 4096, Duration: time.Second, QPs: 2})
	if err == nil || !strings.Contains(err.Error(), "answered with one queue pair, asked 2") || !strings.Contains(err.Error(), "--qps 1") {
		t.Errorf("Run with 2 QPs against an old responder = %v; want a refusal that says why", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for resp.busyWith() != "" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b := resp.busyWith(); b != "" {
		t.Errorf("the old responder is still busy with %q: the done message did not free it", b)
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
	return serveControlWith(t, n, nil)
}

// serveControlWith is serveControl with each decoded message changed by
// edit (nil: as it came) before n handles it.
func serveControlWith(t *testing.T, n *Node, edit func(wire.Message) wire.Message) netip.AddrPort {
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
			if edit != nil {
				m = edit(m)
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
