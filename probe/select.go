package probe

import (
	"hash/fnv"
	"slices"
	"strconv"
)

// A Candidate is a peer the selection may pick.
type Candidate struct {
	Name  string
	Group string // ToR or pod label; empty: a group of its own
}

// Select returns the indices (into all) of the peers node self of group
// selfGroup probes during epoch, at most limit of them (limit <= 0: no
// bound).
//
// A full mesh is O(n²); Select bounds each node's share the Pingmesh way:
//   - every peer of the node's own group (intra-ToR full mesh), unless the
//     group alone exceeds three quarters of max: then a sliding window of it;
//   - the rest of the budget goes to the other groups (each peer without a
//     group is a group of one): if they all fit, budget/groups members of
//     each, advancing every epoch; otherwise one representative each of a
//     window of groups that slides every epoch, so that every group is
//     visited once per cycle of ceil(groups/budget) epochs, and the
//     representative rotates by one member per visit.
//
// Every order is a deterministic permutation seeded by the node's identity,
// so nodes start at different places and no peer draws everyone's probes.
// Every pair of nodes in different groups is therefore probed at least
// once within cycle × (largest group) epochs, and same-group pairs in every
// epoch; docs/PROBES.md works out the numbers for 10,000 nodes.
func Select(self uint64, selfGroup string, all []Candidate, limit int, epoch uint64) []int {
	max := limit
	if max <= 0 || len(all) <= max {
		out := make([]int, len(all))
		for i := range out {
			out[i] = i
		}
		return out
	}
	type unit struct {
		key     string
		members []int
		seed    uint64
	}
	var intra []int
	byGroup := map[string]*unit{}
	var units []*unit
	for i, c := range all {
		if c.Group != "" && c.Group == selfGroup {
			intra = append(intra, i)
			continue
		}
		key := "g:" + c.Group
		if c.Group == "" {
			key = "p:" + c.Name
		}
		u := byGroup[key]
		if u == nil {
			u = &unit{key: key, seed: mix(self, key)}
			byGroup[key] = u
			units = append(units, u)
		}
		u.members = append(u.members, i)
	}
	budget := max - len(intra)
	if len(units) > 0 && budget < max/4+1 {
		// A group as large as the budget would crowd out every other
		// group: keep a quarter for them and rotate inside the group.
		budget = max/4 + 1
		intra = slide(intra, max-budget, epoch, mix(self, "intra"))
	}
	out := intra
	slices.SortFunc(units, func(a, b *unit) int {
		if a.seed != b.seed {
			if a.seed < b.seed {
				return -1
			}
			return 1
		}
		if a.key < b.key {
			return -1
		}
		return 1
	})
	if len(units) <= budget {
		// Every group fits: spread the budget over them, several
		// consecutive members each, advancing every epoch.
		per := uint64(budget / len(units))
		for _, u := range units {
			n := uint64(len(u.members))
			for k := uint64(0); k < min(per, n); k++ {
				out = append(out, u.members[(u.seed+epoch*per+k)%n])
			}
		}
	} else {
		cycle := uint64((len(units) + budget - 1) / budget)
		visit := epoch / cycle // how many times each unit was visited before
		start := int(epoch%cycle) * budget
		for k := 0; k < budget; k++ {
			u := units[(start+k)%len(units)]
			out = append(out, u.members[(u.seed+visit)%uint64(len(u.members))])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// slide returns n of idx, a window that slides by n every epoch over a
// permutation of idx seeded by seed.
func slide(idx []int, n int, epoch, seed uint64) []int {
	p := slices.Clone(idx)
	slices.SortFunc(p, func(a, b int) int {
		ha, hb := mix(seed, strconv.Itoa(a)), mix(seed, strconv.Itoa(b))
		if ha < hb {
			return -1
		}
		if ha > hb {
			return 1
		}
		return a - b
	})
	start := int(epoch%uint64((len(p)+n-1)/n)) * n
	out := make([]int, 0, n)
	for k := 0; k < n; k++ {
		out = append(out, p[(start+k)%len(p)])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// mix hashes a node identity with a key. The final avalanche matters:
// identities that differ in a few bits must give unrelated orders, or
// nodes would pile their probes on the same peers.
func mix(seed uint64, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return splitmix(h.Sum64() ^ splitmix(seed))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
