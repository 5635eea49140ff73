package peer

import "github.com/rdmad/rdmad/verbs"

// grhSource returns the source GID of a UD receive from the 40 bytes in
// front of its payload, which the adapter writes from the packet's headers
// (never from anything the sending application chose). That region holds
// either a GRH (InfiniBand, RoCE v1, RoCE v2 over IPv6: the IPv6 header's
// layout, sgid at bytes 8..23) or, for RoCE v2 over IPv4, the IPv4 header
// in its last 20 bytes with the first 20 undefined (zero on rxe). Which one
// it is follows the rules of rdma-core's ibv_init_ah_from_wc: an IPv6
// version nibble means GRH unless bytes 20..39 are an option-less IPv4
// header whose checksum is right (the undefined half could read 6 by
// chance; a right checksum by chance is what rdma-core accepts too). An
// IPv4 source address is returned as the IPv4-mapped GID, which is how
// RoCE v2 GIDs of IPv4 addresses look. It reports false for anything else.
func grhSource(grh []byte) (verbs.GID, bool) {
	var g verbs.GID
	if len(grh) < grhSize {
		return g, false
	}
	ip4 := grh[20:40]
	isV4 := false
	switch {
	case grh[0]>>4 != 6:
		isV4 = ip4[0]>>4 == 4
		if !isV4 {
			return g, false
		}
	case ip4[0] == 0x45 && ipv4Checksum(ip4) == 0:
		isV4 = true
	}
	if isV4 {
		g[10], g[11] = 0xff, 0xff
		copy(g[12:], ip4[12:16])
		return g, true
	}
	copy(g[:], grh[8:24])
	return g, true
}

// ipv4Checksum returns the one's complement sum of the header h, folded and
// complemented: 0 when h's checksum field is right.
func ipv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
