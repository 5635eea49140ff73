package probe

import (
	"net/netip"
	"testing"

	"github.com/rdmad/rdmad/probe/wire"
)

// TestControlKeyRotation (#24 item 9): a node in the middle of a rotation
// ([probe] key_file with two keys) answers queries tagged with either key,
// always tags with its first, and still refuses a key it does not hold and
// untagged queries (auth required throughout: the rollout never passes
// through unauthenticated operation).
func TestControlKeyRotation(t *testing.T) {
	newKey := []byte("the new fleet key, 32 bytes long")
	q := wire.Message{Version: 2, Type: wire.TypeQuery, Nonce: 99, Count: 1, QPN: 0x22, QKey: 0x55, GID: [16]byte{15: 2}}
	enc := func(key []byte) []byte {
		b, err := q.Append(nil, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	oldCK, newCK, wrong := wire.ControlKey(fleetKey), wire.ControlKey(newKey), wire.ControlKey(otherKey)
	// Step 2 of the rollout: tag with the new key, take the old one too.
	c, admitted := controlFor(t, "127.0.0.2:0", Auth{Key: newKey, Others: [][]byte{fleetKey}, Require: true})
	cl := udpFrom(t, "127.0.0.4", 0)
	for name, key := range map[string][]byte{"the old key": oldCK, "the new key": newCK} {
		a := exchange(t, cl, c.Addr(), enc(key))
		if a == nil {
			t.Fatalf("a query tagged with %s got no answer", name)
		}
		if m, err := wire.Decode(a, newCK); err != nil || !m.Authenticated {
			t.Errorf("answer to a query tagged with %s: %v; want it tagged with the first key", name, err)
		}
		// A node still at step 1 (old first) takes it.
		if m, err := wire.DecodeKeys(a, oldCK, newCK); err != nil || !m.Authenticated {
			t.Errorf("a node at step 1 cannot read the answer: %v", err)
		}
	}
	if a := exchange(t, cl, c.Addr(), enc(wrong)); a != nil {
		t.Errorf("a query tagged with a key neither holds was answered")
	}
	if a := exchange(t, cl, c.Addr(), enc(nil)); a != nil {
		t.Errorf("an untagged query was answered during the rotation")
	}
	if n := admitted()[netip.MustParseAddr("127.0.0.4")]; n != 2 {
		t.Errorf("%d admissions; want 2 (old and new key)", n)
	}
	if s := c.Stats(); s.BadTag != 1 || s.Unauthenticated != 1 {
		t.Errorf("stats %+v; want 1 bad tag, 1 unauthenticated", s)
	}
}
