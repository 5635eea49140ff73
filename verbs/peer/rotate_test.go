package peer

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rdmad/rdmad/probe/ud"
)

// TestKeyRotation (#24 item 9): during a rotation a node tags with its
// first key and takes tags of each of its keys, so probes flow both ways
// between nodes at neighbouring steps of the rollout, tags required all
// the while; a key neither holds is still refused.
func TestKeyRotation(t *testing.T) {
	oldKey, newKey := []byte("the old fleet key, 32 bytes long"), []byte("the new fleet key, 32 bytes long")
	ea, a, eb, b := pair(t, oldKey, true)
	// Step 1 on A (tags old, takes old and new); B is still on the old key.
	ea.SetAuthKeys([][]byte{oldKey, newKey}, true)
	round := func(what string, from *udPort, to *udPort, fromGID, toGID [16]byte, fromQPN, toQPN uint32, seq uint64) bool {
		t.Helper()
		pb, err := probe(from, ud.Target{Dst: ud.Endpoint{GID: toGID, QPN: toQPN, QKey: 9}, Seq: seq, Auth: true}, 100)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		deliver(to, fromGID, fromQPN, pb, 200)
		return queued(to) > 0
	}
	if !round("A (old, new) to B (old)", a, b, gidA, gidB, qpnA, qpnB, 1) {
		t.Errorf("B on the old key refused A's probe tagged with the old key")
	}
	drain(b)
	// Step 2 on B: tags new, takes new and old. A (step 1) takes new.
	eb.SetAuthKeys([][]byte{newKey, oldKey}, true)
	if err := ea.Admit("a/1", ud.Endpoint{GID: gidB, QPN: qpnB, QKey: 9}, netip.MustParseAddr("192.0.2.2"), false, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if !round("B (new, old) to A (old, new)", b, a, gidB, gidA, qpnB, qpnA, 2) {
		t.Errorf("A at step 1 refused B's probe tagged with the new key")
	}
	drain(a)
	if !round("A (old, new) to B (new, old)", a, b, gidA, gidB, qpnA, qpnB, 3) {
		t.Errorf("B at step 2 refused A's probe tagged with the old key")
	}
	drain(b)
	// Step 3 on B: the new key alone. A probe with another key: refused.
	eb.SetAuthKeys([][]byte{newKey}, true)
	before := eb.Stats().BadTag
	if round("A (old, new) to B (new)", a, b, gidA, gidB, qpnA, qpnB, 4) || eb.Stats().BadTag != before+1 {
		t.Errorf("B with the new key alone took a probe tagged with the old one")
	}
	ea.SetAuthKeys([][]byte{[]byte("a third fleet's key, 32 bytes!!!"), oldKey}, true)
	before = eb.Stats().BadTag
	if round("A (third) to B (new)", a, b, gidA, gidB, qpnA, qpnB, 5) || eb.Stats().BadTag != before+1 {
		t.Errorf("a key B does not hold was taken")
	}
	ea.SetAuthKeys(nil, true)
	if _, err := probe(a, ud.Target{Dst: toB, Seq: 6, Auth: true}, 10); err == nil {
		t.Errorf("no keys: a tagged probe was sent")
	}
}

// drain drops the answers p queued.
func drain(p *udPort) {
	p.mu.Lock()
	p.out = p.out[:0]
	p.mu.Unlock()
}
