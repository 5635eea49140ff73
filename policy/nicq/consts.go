package nicq

// The kernel ABI this package speaks, from <linux/ethtool_netlink.h>.
// TestConstantsMatchKernelHeader compiles testdata/consts.c against the
// installed header (linux-libc-dev) and compares.
const (
	msgRingsGet         = 15 // ETHTOOL_MSG_RINGS_GET
	msgRingsSet         = 16 // ETHTOOL_MSG_RINGS_SET
	msgChannelsGet      = 17 // ETHTOOL_MSG_CHANNELS_GET
	msgChannelsSet      = 18 // ETHTOOL_MSG_CHANNELS_SET
	msgCoalesceGet      = 19 // ETHTOOL_MSG_COALESCE_GET
	msgCoalesceSet      = 20 // ETHTOOL_MSG_COALESCE_SET
	msgRingsGetReply    = 16 // ETHTOOL_MSG_RINGS_GET_REPLY
	msgChannelsGetReply = 18 // ETHTOOL_MSG_CHANNELS_GET_REPLY
	msgCoalesceGetReply = 20 // ETHTOOL_MSG_COALESCE_GET_REPLY

	// ETHTOOL_A_HEADER_*, nested as attribute 1 of every message.
	attrHeader        = 1 // ETHTOOL_A_{RINGS,CHANNELS,COALESCE}_HEADER
	attrHeaderDevName = 2 // ETHTOOL_A_HEADER_DEV_NAME

	attrRingsRXMax = 2 // ETHTOOL_A_RINGS_RX_MAX, u32
	attrRingsTXMax = 5 // ETHTOOL_A_RINGS_TX_MAX
	attrRingsRX    = 6 // ETHTOOL_A_RINGS_RX
	attrRingsTX    = 9 // ETHTOOL_A_RINGS_TX

	attrChannelsRXMax       = 2 // ETHTOOL_A_CHANNELS_RX_MAX, u32
	attrChannelsTXMax       = 3 // ETHTOOL_A_CHANNELS_TX_MAX
	attrChannelsCombinedMax = 5 // ETHTOOL_A_CHANNELS_COMBINED_MAX
	attrChannelsRX          = 6 // ETHTOOL_A_CHANNELS_RX_COUNT
	attrChannelsTX          = 7 // ETHTOOL_A_CHANNELS_TX_COUNT
	attrChannelsCombined    = 9 // ETHTOOL_A_CHANNELS_COMBINED_COUNT

	attrCoalesceRXUsecs    = 2  // ETHTOOL_A_COALESCE_RX_USECS, u32
	attrCoalesceTXUsecs    = 6  // ETHTOOL_A_COALESCE_TX_USECS, u32
	attrCoalesceAdaptiveRX = 11 // ETHTOOL_A_COALESCE_USE_ADAPTIVE_RX, u8
	attrCoalesceAdaptiveTX = 12 // ETHTOOL_A_COALESCE_USE_ADAPTIVE_TX, u8
)
