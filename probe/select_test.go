package probe

import (
	"fmt"
	"testing"
)

// TestSelectCoverage simulates a fleet: every node selects its peers for
// each epoch, and the test checks that every pair of nodes was probed (in
// one direction or the other) within the bound docs/PROBES.md derives,
// that no node probes more than max_peers, and that no node draws far more
// probes than the average.
func TestSelectCoverage(t *testing.T) {
	tests := []struct {
		name      string
		nodes     int
		groupSize int // 0: no groups
		max       int
		bound     int // epochs within which every pair must be covered
	}{
		// 29 other groups over a budget of 32-19=13: cycle 3, groups of
		// 20: bound 3*20 = 60 epochs.
		{"600 nodes in ToRs of 20, max 32", 600, 20, 32, 60},
		// 499 singleton groups over 16: cycle 32 epochs.
		{"500 nodes without groups, max 16", 500, 0, 16, 32},
		{"small fleet fits: full mesh", 50, 0, 64, 1},
		// Groups larger than the budget: 11 of 40 go to the 2 other
		// groups, 5 members each per epoch: 100/5 = 20 epochs; the
		// own group (99 over 29) in 4.
		{"groups larger than max", 300, 100, 40, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if testing.Short() && tt.nodes >= 500 {
				t.Skip("long simulation; run without -short")
			}
			all := make([]Candidate, tt.nodes)
			for i := range all {
				all[i].Name = fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
				if tt.groupSize > 0 {
					all[i].Group = fmt.Sprintf("tor-%d", i/tt.groupSize)
				}
			}
			n := tt.nodes
			covered := make([]bool, n*n)
			left := n * (n - 1) / 2
			epoch := 0
			for ; left > 0 && epoch < tt.bound; epoch++ {
				inDeg := make([]int, n)
				for self := 0; self < n; self++ {
					// Each node's list excludes itself, as the manager's
					// local-address filter does.
					others := make([]Candidate, 0, n-1)
					idx := make([]int, 0, n-1)
					for j := range all {
						if j != self {
							others = append(others, all[j])
							idx = append(idx, j)
						}
					}
					sel := Select(uint64(self)*0x9e3779b97f4a7c15+1, all[self].Group, others, tt.max, uint64(1000+epoch))
					if len(sel) > tt.max {
						t.Fatalf("epoch %d: node %d selected %d peers, max %d", epoch, self, len(sel), tt.max)
					}
					for _, k := range sel {
						j := idx[k]
						inDeg[j]++
						a, b := min(self, j), max(self, j)
						if !covered[a*n+b] {
							covered[a*n+b] = true
							left--
						}
					}
				}
				avg, most := 0, 0
				for _, d := range inDeg {
					avg += d
					most = max(most, d)
				}
				avg /= n
				if most > 3*avg+3 {
					t.Errorf("epoch %d: a node draws %d probers, average %d", epoch, most, avg)
				}
			}
			if left > 0 {
				t.Errorf("%d of %d pairs not probed within %d epochs", left, n*(n-1)/2, tt.bound)
			} else {
				t.Logf("every pair probed within %d epochs (bound %d)", epoch, tt.bound)
			}
		})
	}
}
