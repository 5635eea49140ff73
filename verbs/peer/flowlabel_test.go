package peer

import (
	"math/rand/v2"
	"testing"

	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/verbs"
)

// TestFlowLabelSourcePort checks the port against rdma-core's
// ibv_flow_label_to_udp_sport (verbs.h): the label's low 14 bits, XOR its
// high 6 bits, in 0xC000-0xFFFF.
func TestFlowLabelSourcePort(t *testing.T) {
	for l, want := range map[uint32]uint16{0x00001: 0xc001, 0x12345: 0xc000 | (0x2345 ^ 0x4), 0xfffff: 0xc000 | (0x3fff ^ 0x3f), 0x04000: 0xc001} {
		if got := FlowLabelSourcePort(l); got != want {
			t.Errorf("FlowLabelSourcePort(%#x) = %#x, want %#x", l, got, want)
		}
	}
}

// TestFlowLabelsDistinct: for any two GIDs and destination QPN, the flows
// 0..MaxFlows-1 get distinct non-zero 20-bit labels with distinct source
// ports, and the same inputs give the same label (a flow keeps its path).
func TestFlowLabelsDistinct(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var src, dst verbs.GID
		for i := range src {
			src[i], dst[i] = byte(r.Uint32()), byte(r.Uint32())
		}
		qpn := r.Uint32() & 0xffffff
		ports := map[uint16]bool{}
		for f := range uint8(ud.MaxFlows) {
			l := flowLabel(src, dst, qpn, f)
			if l == 0 || l > 0xfffff {
				t.Fatalf("label %#x for flow %d", l, f)
			}
			if l != flowLabel(src, dst, qpn, f) {
				t.Fatal("flowLabel is not a function of its inputs")
			}
			ports[FlowLabelSourcePort(l)] = true
		}
		if len(ports) != ud.MaxFlows {
			t.Fatalf("%s -> %s qpn %d: %d source ports for %d flows", src, dst, qpn, len(ports), ud.MaxFlows)
		}
	}
}

func BenchmarkFlowLabel(b *testing.B) {
	var src, dst verbs.GID
	src[15], dst[15] = 1, 2
	for i := 0; b.Loop(); i++ {
		_ = flowLabel(src, dst, 7, uint8(i&3))
	}
}
