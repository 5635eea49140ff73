package rdmares

// The kernel ABI this package speaks: RDMA netlink (NETLINK_RDMA), client
// RDMA_NL_NLDEV, from the uapi header <rdma/rdma_netlink.h>.
// TestConstantsMatchHeader parses the copy in testdata/rdma_netlink.h
// (Linux 6.1, the test bed's kernel) and compares every value.
const (
	// netlinkRDMA is NETLINK_RDMA (<linux/netlink.h>), the protocol of
	// the socket.
	netlinkRDMA = 20

	// clientNLDEV is RDMA_NL_NLDEV, the RDMA device interface client.
	clientNLDEV = 5

	// RDMA_NLDEV_CMD_*, the operations. Each is a dump here.
	cmdResGet   = 9  // RDMA_NLDEV_CMD_RES_GET: per-device summary
	cmdResQPGet = 10 // RDMA_NLDEV_CMD_RES_QP_GET
	cmdResCQGet = 12 // RDMA_NLDEV_CMD_RES_CQ_GET
	cmdResMRGet = 13 // RDMA_NLDEV_CMD_RES_MR_GET
	cmdResPDGet = 14 // RDMA_NLDEV_CMD_RES_PD_GET

	// RDMA_NLDEV_ATTR_*, the attributes this package reads or sends.
	attrDevIndex        = 1  // u32
	attrDevName         = 2  // string
	attrResSummary      = 15 // nested table
	attrResSummaryEntry = 16 // nested table
	attrResSummaryName  = 17 // string
	attrResSummaryCurr  = 18 // u64
	attrResQP           = 19 // nested table
	attrResQPEntry      = 20 // nested table
	attrResLQPN         = 21 // u32
	attrResPID          = 28 // u32, absent for kernel objects
	attrResKernName     = 29 // string, only for kernel objects
	attrResCQ           = 35 // nested table
	attrResCQEntry      = 36 // nested table
	attrResMR           = 40 // nested table
	attrResMREntry      = 41 // nested table
	attrResMRLen        = 45 // u64
	attrResPD           = 46 // nested table
	attrResPDEntry      = 47 // nested table
	attrResPDN          = 60 // u32
	attrResCQN          = 61 // u32
	attrResMRN          = 62 // u32
	attrPad             = 0  // RDMA_NLDEV_ATTR_PAD: alignment of u64s, no data
)

// msgType is RDMA_NL_GET_TYPE(client, op): the netlink message type of an
// RDMA netlink operation.
func msgType(client, op int) uint16 { return uint16(client<<10 + op) }
