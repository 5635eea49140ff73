package apitype

// RoCE v2 headers around an RDMA payload: GRH (40), UDP (8), BTH (12),
// XRC ETH (4), AtomicETH (28) and ICRC (4), as the kernel's iboe_get_mtu
// subtracts them from the netdev MTU.
const roceOverhead = 40 + 8 + 12 + 4 + 28 + 4

// RoCEActiveMTU returns the RDMA path MTU (256, 512, 1024, 2048 or 4096) a
// RoCE port gets from a netdev MTU, or 0 when the netdev MTU is too small
// for any: what a port's active MTU should be, for the metrics and the
// doctor's MTU check to compare with what the port reports.
func RoCEActiveMTU(netdevMTU int) int {
	for m := 4096; m >= 256; m /= 2 {
		if netdevMTU-roceOverhead >= m {
			return m
		}
	}
	return 0
}
