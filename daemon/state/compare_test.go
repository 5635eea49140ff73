package state

import (
	"slices"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// TestComparePeers: the peer changes are those of matching the peers by
// name, whether the lists are one, hold the same peers in the same order
// (a publish of the peer manager), or not (a peer came, went, or moved).
func TestComparePeers(t *testing.T) {
	peer := func(name, st string) apitype.Peer { return apitype.Peer{Name: name, State: st, Reason: "r-" + name} }
	a := []apitype.Peer{peer("10.0.0.1", "up"), peer("10.0.0.2", "up"), peer("10.0.0.3", "down")}
	cases := map[string][2][]apitype.Peer{
		"one list":      {a, a},
		"none":          {nil, {}},
		"states moved":  {a, {peer("10.0.0.1", "down"), peer("10.0.0.2", "up"), peer("10.0.0.3", "up")}},
		"a peer came":   {a, {peer("10.0.0.1", "up"), peer("10.0.0.2", "up"), peer("10.0.0.3", "down"), peer("10.0.0.4", "up")}},
		"a peer went":   {a, {peer("10.0.0.1", "up"), peer("10.0.0.3", "up")}},
		"one replaced":  {a, {peer("10.0.0.1", "up"), peer("10.0.0.9", "up"), peer("10.0.0.3", "down")}},
		"reordered":     {a, {peer("10.0.0.3", "up"), peer("10.0.0.1", "up"), peer("10.0.0.2", "degraded")}},
		"from nothing":  {nil, a},
		"to nothing":    {a, nil},
		"last replaced": {a, {peer("10.0.0.1", "up"), peer("10.0.0.2", "down"), peer("10.0.0.7", "down")}},
	}
	for name, c := range cases {
		got, want := comparePeers(c[0], c[1]), peersByName(c[0], c[1])
		if !slices.Equal(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if got := comparePeers(a, slices.Clone(a)); got != nil {
		t.Errorf("an unchanged copy: %+v, want none", got)
	}
}
