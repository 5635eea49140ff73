package dcb

// Values from the kernel's uapi headers <linux/rtnetlink.h> and
// <linux/dcbnl.h>. They are spelled out here rather than taken from
// golang.org/x/sys/unix because x/sys lacks most of the dcbnl enums;
// TestLayoutMatchesKernelHeader compiles a C program against the installed
// header and compares every value below with it.
const (
	rtmGetDCB = 78 // RTM_GETDCB
	rtmSetDCB = 79 // RTM_SETDCB

	// enum dcbnl_commands
	cmdGState  = 1  // DCB_CMD_GSTATE
	cmdIEEESet = 20 // DCB_CMD_IEEE_SET
	cmdIEEEGet = 21 // DCB_CMD_IEEE_GET
	cmdIEEEDel = 27 // DCB_CMD_IEEE_DEL

	// enum dcbnl_attrs
	attrIfname = 1  // DCB_ATTR_IFNAME
	attrState  = 2  // DCB_ATTR_STATE
	attrIEEE   = 13 // DCB_ATTR_IEEE
	attrDCBX   = 14 // DCB_ATTR_DCBX

	// enum ieee_attrs
	attrIEEEETS        = 1  // DCB_ATTR_IEEE_ETS
	attrIEEEPFC        = 2  // DCB_ATTR_IEEE_PFC
	attrIEEEAppTable   = 3  // DCB_ATTR_IEEE_APP_TABLE
	attrIEEEPeerETS    = 4  // DCB_ATTR_IEEE_PEER_ETS
	attrIEEEPeerPFC    = 5  // DCB_ATTR_IEEE_PEER_PFC
	attrIEEEPeerApp    = 6  // DCB_ATTR_IEEE_PEER_APP
	attrIEEEMaxrate    = 7  // DCB_ATTR_IEEE_MAXRATE
	attrDCBBuffer      = 10 // DCB_ATTR_DCB_BUFFER
	attrDCBTrustTable  = 11 // DCB_ATTR_DCB_APP_TRUST_TABLE (Linux 6.3+)
	attrDCBRewrTable   = 12 // DCB_ATTR_DCB_REWR_TABLE (Linux 6.3+)
	attrIEEEAppUnspec  = 0  // DCB_ATTR_IEEE_APP_UNSPEC
	attrIEEEApp        = 1  // DCB_ATTR_IEEE_APP: an APP entry with an IEEE selector
	attrDCBApp         = 2  // DCB_ATTR_DCB_APP: an APP entry with a non-standard selector (PCP)
	maxTCs             = 8  // IEEE_8021QAZ_MAX_TCS
	sizeofDCBMsg       = 4  // sizeof(struct dcbmsg)
	sizeofDCBApp       = 4  // sizeof(struct dcb_app)
	sizeofIEEEPFC      = 136
	sizeofIEEEETS      = 59
	offsetofPFCDelay   = 4 // offsetof(struct ieee_pfc, delay)
	offsetofPFCReqs    = 8 // offsetof(struct ieee_pfc, requests)
	offsetofPFCInds    = 72
	offsetofETSPrioTC  = 27 // offsetof(struct ieee_ets, prio_tc)
	offsetofETSTCTSA   = 19 // offsetof(struct ieee_ets, tc_tsa)
	offsetofETSTCTxBW  = 3
	offsetofETSTCRxBW  = 11
	offsetofETSRecoBW  = 35
	offsetofETSRecoTSA = 43
	offsetofETSRecoPTC = 51
)

// APP selectors (struct dcb_app.selector). The IEEE 802.1Qaz values come
// from IEEE_8021QAZ_APP_SEL_*; SelectorPCP is the kernel's non-standard
// DCB_APP_SEL_PCP, used in trust tables to name "trust the VLAN PCP".
const (
	SelectorEthertype uint8 = 1   // IEEE_8021QAZ_APP_SEL_ETHERTYPE
	SelectorStream    uint8 = 2   // IEEE_8021QAZ_APP_SEL_STREAM (TCP/SCTP port)
	SelectorDgram     uint8 = 3   // IEEE_8021QAZ_APP_SEL_DGRAM (UDP/DCCP port)
	SelectorAny       uint8 = 4   // IEEE_8021QAZ_APP_SEL_ANY (any transport port)
	SelectorDSCP      uint8 = 5   // IEEE_8021QAZ_APP_SEL_DSCP
	SelectorPCP       uint8 = 255 // DCB_APP_SEL_PCP (Linux 6.3+)
)

// MaxPriorities is the number of 802.1p priorities (and PFC bits).
const MaxPriorities = maxTCs
