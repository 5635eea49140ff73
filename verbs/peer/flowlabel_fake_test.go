//go:build linux && verbsfake

package peer

import (
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// TestFakeFlowsOwnAddressHandles is #39 item 1 on the fake NIC: K flows to
// one peer post through K address handles with K distinct GRH flow labels,
// which give K distinct UDP source ports where the provider derives the
// port from the label (mlx5, hns: ibv_flow_label_to_udp_sport). Before,
// every flow to a peer named one handle, so on ConnectX the four default
// flows took one source port and one ECMP path. The answers to the K flows
// go back on K labels of their own; a second round reuses the handles.
func TestFakeFlowsOwnAddressHandles(t *testing.T) {
	a, b := fakeNodesFlows(t, 4)
	pa, pb := a.port(t), b.port(t)
	for _, f := range pa.Flows {
		src := pa.Endpoint
		src.QPN = f.QPN
		if err := b.e.Admit(pb.Key, src, ctlAddr, false, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	stop := verbs.FakeRecordUDSends()
	for round := range 2 {
		ts := make([]ud.Target, 0, 4)
		for f := range 4 {
			ts = append(ts, ud.Target{Dst: pb.Endpoint, Seq: uint64(100 + 4*round + f), Flow: uint8(f)})
		}
		if n := a.e.ProbeBatch(pa.Key, ts); n != 4 {
			t.Fatalf("ProbeBatch = %d: %+v", n, ts)
		}
		waitFor(t, "the round's replies", func() (int, bool) { n := a.nReplies(); return n, n == 4*(round+1) })
	}
	sends := stop()

	probes := map[uint32]map[uint64]uint32{} // source QPN -> AH -> label
	answers := map[uint32]uint32{}           // destination QPN -> label
	for _, s := range sends {
		switch {
		case s.Device == "fake0" && s.RemoteQPN == pb.QPN:
			if probes[s.QPN] == nil {
				probes[s.QPN] = map[uint64]uint32{}
			}
			probes[s.QPN][s.AH] = s.FlowLabel
		case s.Device == "fake1":
			if l, ok := answers[s.RemoteQPN]; ok && l != s.FlowLabel {
				t.Errorf("answers to QPN %d on labels %#x and %#x: want one", s.RemoteQPN, l, s.FlowLabel)
			}
			answers[s.RemoteQPN] = s.FlowLabel
		}
	}
	if len(probes) != 4 {
		t.Fatalf("probes from %d QPs, want the 4 flows': %+v", len(probes), sends)
	}
	ahs, labels, ports := map[uint64]bool{}, map[uint32]bool{}, map[uint16]bool{}
	for qpn, byAH := range probes {
		if len(byAH) != 1 {
			t.Errorf("flow QP %d posted through %d handles over two rounds, want 1 (reused)", qpn, len(byAH))
		}
		for ah, l := range byAH {
			ahs[ah], labels[l], ports[FlowLabelSourcePort(l)] = true, true, true
			if l == 0 || l > 0xfffff {
				t.Errorf("flow QP %d: label %#x, want a non-zero 20-bit label", qpn, l)
			}
		}
	}
	if len(ahs) != 4 || len(labels) != 4 || len(ports) != 4 {
		t.Errorf("4 flows to one peer: %d handles, %d labels, %d source ports; want 4 of each", len(ahs), len(labels), len(ports))
	}
	if len(answers) != 4 {
		t.Errorf("answers to %d of the prober's QPs, want 4", len(answers))
	}
	ansLabels := map[uint32]bool{}
	for _, l := range answers {
		ansLabels[l] = true
	}
	if len(ansLabels) != 4 {
		t.Errorf("answers on %d labels, want 4 (one per flow of the prober)", len(ansLabels))
	}
}
