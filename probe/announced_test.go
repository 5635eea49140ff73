package probe

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/wire"
)

// TestAnnouncedPorts: a peer's port is announced once its answer came (what
// a bandwidth test on InfiniBand may connect to); a query from the peer's
// address naming another port (what a spoofer can send) adds nothing.
func TestAnnouncedPorts(t *testing.T) {
	port := freePort(t)
	f := &fabric{byQPN: map[uint32]*fakeTransport{}}
	a := startNodeFP(t, f, "127.0.0.2", "127.0.0.3", port, 1, nil)
	defer a.stop(t)
	b := startNodeFP(t, f, "127.0.0.3", "127.0.0.2", port, 2, nil)
	defer b.stop(t)
	waitState(t, a, "127.0.0.3", apitype.PeerUp, 5*time.Second)
	peer := netip.MustParseAddr("127.0.0.3")
	lp, _ := b.pr.Ports()
	got := a.m.AnnouncedPorts(peer)
	if len(got) != 1 || got[0].GID != lp[0].GID || got[0].LID != lp[0].LID {
		t.Fatalf("announced ports of b = %+v; want b's one probe port %+v", got, lp[0].Endpoint)
	}
	if other := a.m.AnnouncedPorts(netip.MustParseAddr("127.0.0.9")); other != nil {
		t.Errorf("a stranger's ports = %+v; want none", other)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	spoof := wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: 5, Count: 1, QPN: 0x7777, QKey: 0x11, LID: 99,
		GID: netip.MustParseAddr("198.51.100.9").As16()}
	buf, _ := spoof.Append(nil, nil)
	conn.WriteToUDPAddrPort(buf, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port)))
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	conn.ReadFromUDPAddrPort(make([]byte, wire.MaxSize)) // answered: it was processed
	time.Sleep(100 * time.Millisecond)                   // a pass of a's after the query's
	for _, e := range a.m.AnnouncedPorts(peer) {
		if e.GID == spoof.GID || e.LID == 99 {
			t.Errorf("a query's port was announced: %+v", e)
		}
	}
}
