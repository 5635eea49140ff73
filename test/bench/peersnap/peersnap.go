// Package peersnap builds rdmad snapshots holding many probed peers, shaped
// as probe publishes them, for the benchmarks of what reads them at
// scale: the D-Bus view (daemon/bus), the metrics (daemon/metrics) and the
// status API (daemon/api). docs/BENCHMARKS.md, "Peer probes at scale
// (host)".
package peersnap

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// Local is the probing port of the snapshots' node.
const Local = "mlx5_0/1"

// t0 is when the snapshots' node started.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fingerprint is the one every peer sends: a homogeneous fleet, shared by
// the peers as probe shares it.
var fingerprint = func() *apitype.Fingerprint {
	tos := 106
	return &apitype.Fingerprint{Version: "1.4.0", Kernel: "6.1.0-28-amd64", Ports: []apitype.FingerprintPort{{Key: Local, Netdev: "ens1f0np0",
		MTU: 4200, ActiveMTU: 4096, LinkLayer: "Ethernet", Firmware: "22.39.1002", Driver: "mlx5_core", RoCEMode: "v2", RoCEToS: &tos, Trust: "dscp", PFC: "3"}}}
}()

// Peers returns the peers' part of a snapshot of n peers (1 path each, 40
// peers per group), in name order, after round seconds of probing at 1 Hz:
// the statistics move with round, as they do from one publish to the next.
// One peer in 97 is degraded and one in 499 down, with their reasons.
func Peers(n, round int) apitype.Peers {
	out := apitype.Peers{NodeID: "5a1e0f00d", Configured: n, Ports: []apitype.PeerPort{{Key: Local, GID: "::ffff:10.0.0.1", QPN: 0x11}},
		Peers: make([]apitype.Peer, 0, n), GroupFaults: []apitype.GroupFault{}, ControlPort: 18516, Fingerprint: fingerprint,
		Counters: apitype.PeerCounters{ControlAnswered: uint64(round * n / 60), ProbesAnswered: uint64(round * n)}}
	paths := make([]apitype.PeerPath, n)
	for i := range n {
		addr := Addr(i)
		st, reason := apitype.PeerUp, ""
		loss, lost := 0.0, uint64(round/1000)
		switch {
		case i%499 == 498:
			st, reason = apitype.PeerDown, Local+": 3 probes in a row unanswered"
			loss, lost = 3, lost+3
		case i%97 == 96:
			st, reason = apitype.PeerDegraded, Local+": loss 2.0% over the last 100 probes (threshold 1.0%)"
			loss, lost = 2, lost+2
		}
		rtt := time.Duration(4000 + (i*7919+round*104729)%3000)
		paths[i] = apitype.PeerPath{Local: Local, RemoteGID: netip.AddrFrom16(addr.As16()).String(), RemoteQPN: uint32(0x1000 + i), State: st, Since: t0,
			RTTP50: rtt, RTTP99: rtt + 2100, HostDelayP99: 900, LastRTT: rtt + time.Duration(round%7)*10, LossPct: loss, Samples: 100,
			Sent: uint64(round + 100), Lost: lost}
		out.Peers = append(out.Peers, apitype.Peer{Name: addr.String(), Address: addr.String(), Group: fmt.Sprintf("tor-%03d", i/40),
			NodeID: fmt.Sprintf("%x", 0x6b1d0000+i), State: st, Reason: reason, Since: t0, Paths: paths[i : i+1 : i+1],
			WireVersion: 2, Fingerprint: fingerprint})
	}
	return out
}

// Addr is the address of peer i: 10.1.0.1 and on, in name order.
func Addr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 1 + byte(i/65000), byte(i % 65000 / 250), byte(i%250 + 1)})
}

// Snapshot returns a whole snapshot (one RDMA device, the usual components)
// holding Peers(n, round), as the daemon publishes it.
func Snapshot(n, round int) *apitype.Snapshot {
	ok := apitype.Component{State: apitype.OK}
	return &apitype.Snapshot{Seq: uint64(round + 1), Version: "1.4.0", State: apitype.Running, Summary: "running", PID: 4242,
		StartedAt: t0, UpdatedAt: t0.Add(time.Duration(round) * time.Second),
		Config: apitype.Config{Path: "/etc/rdmad/rdmad.toml", Files: []string{"/etc/rdmad/rdmad.toml"}, Generation: 1, LoadedAt: t0},
		Devices: []apitype.Device{{Name: "mlx5_0", NodeType: "CA", FWVer: "22.39.1002", NodeGUID: "b8ce:f603:00a1:b2c4",
			Ports: []apitype.Port{{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "Ethernet", Netdev: "ens1f0np0", Rate: "100 Gb/sec (4X EDR)"}}}},
		Components: map[string]apitype.Component{"config": ok, "inventory": ok, "api": ok, "dbus": ok, "peers": ok, "loopback": ok, "mrpool": ok},
		Peers:      Peers(n, round), Loopback: []apitype.LoopbackPort{}, MRPool: []apitype.PoolDevice{}, ECN: []apitype.NetdevECN{}}
}
