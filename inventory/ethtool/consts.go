package ethtool

// The kernel ABI this package speaks, from the uapi headers
// <linux/ethtool_netlink.h>, <linux/ethtool.h>, <linux/sockios.h> and
// <net/if.h>. TestConstantsMatchKernelHeaders compiles testdata/consts.c
// against the installed headers (linux-libc-dev) and compares.
const (
	// Generic netlink family "ethtool" (ETHTOOL_GENL_NAME, _VERSION).
	genlName    = "ethtool"
	genlVersion = 1

	msgPauseGet      = 21 // ETHTOOL_MSG_PAUSE_GET (user to kernel)
	msgPauseGetReply = 22 // ETHTOOL_MSG_PAUSE_GET_REPLY (kernel to user)

	// ETHTOOL_A_HEADER_*: the request/reply header nested in every message.
	attrHeaderDevIndex = 1 // u32
	attrHeaderDevName  = 2 // string
	attrHeaderFlags    = 3 // u32, ETHTOOL_FLAG_*

	flagStats = 1 << 2 // ETHTOOL_FLAG_STATS: include the statistics

	// ETHTOOL_A_PAUSE_*.
	attrPauseHeader  = 1 // nest, ETHTOOL_A_HEADER_*
	attrPauseAutoneg = 2 // u8
	attrPauseRX      = 3 // u8
	attrPauseTX      = 4 // u8
	attrPauseStats   = 5 // nest, ETHTOOL_A_PAUSE_STAT_*

	// ETHTOOL_A_PAUSE_STAT_*.
	attrPauseStatPad      = 1 // padding for 64-bit alignment, no data
	attrPauseStatTXFrames = 2 // u64
	attrPauseStatRXFrames = 3 // u64

	// SIOCETHTOOL and its commands (ethtool -S).
	siocEthtool  = 0x8946 // SIOCETHTOOL
	cmdGSSetInfo = 0x37   // ETHTOOL_GSSET_INFO
	cmdGStrings  = 0x1b   // ETHTOOL_GSTRINGS
	cmdGStats    = 0x1d   // ETHTOOL_GSTATS
	ssStats      = 1      // ETH_SS_STATS, the string set of ethtool -S
	gstringLen   = 32     // ETH_GSTRING_LEN

	// Layouts: struct ethtool_sset_info {u32 cmd, reserved; u64
	// sset_mask; u32 data[]}, struct ethtool_gstrings {u32 cmd,
	// string_set, len; u8 data[]}, struct ethtool_stats {u32 cmd,
	// n_stats; u64 data[]}, struct ifreq {char name[16]; union {...
	// void *ifr_data}}.
	ssetInfoMaskOff = 8
	ssetInfoDataOff = 16
	gstringsLenOff  = 8
	gstringsDataOff = 12
	statsNOff       = 4
	statsDataOff    = 8
	ifNameSize      = 16 // IFNAMSIZ
	ifreqSize       = 40
	ifreqDataOff    = 16
)
