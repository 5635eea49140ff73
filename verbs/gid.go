package verbs

// PickGID chooses the source GID a probe or connection should use on a
// port: for RoCE a RoCE v2 GID (routable, what current fabrics run), IPv4
// mapped first because that is what `rdma link add` and most NICs set up
// from the netdev's address; else RoCE v1; for InfiniBand the first IB GID
// (the link-local default GID at index 0). It reports false if the table
// has no usable entry.
func PickGID(table []GIDEntry, ll LinkLayer) (GIDEntry, bool) {
	best, bestRank := GIDEntry{}, 0
	for _, e := range table {
		if e.GID.IsZero() {
			continue
		}
		r := gidRank(e, ll)
		if r > bestRank || (r == bestRank && r > 0 && e.Index < best.Index) {
			best, bestRank = e, r
		}
	}
	return best, bestRank > 0
}

func gidRank(e GIDEntry, ll LinkLayer) int {
	if ll == LinkLayerInfiniBand {
		if e.Type == GIDTypeIB {
			return 1
		}
		return 0
	}
	switch e.Type {
	case GIDTypeRoCEv2:
		if isV4Mapped(e.GID) {
			return 4
		}
		return 3
	case GIDTypeRoCEv1:
		return 2
	case GIDTypeIB:
		// Providers that do not report types (older kernels) say IB; still
		// usable as RoCE v1.
		return 1
	}
	return 0
}

func isV4Mapped(g GID) bool {
	for _, b := range g[:10] {
		if b != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}
