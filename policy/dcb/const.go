package dcb

import "fmt"

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

// Transmission selection algorithms of an ETS traffic class
// (struct ieee_ets.tc_tsa), from IEEE_8021QAZ_TSA_*.
const (
	TSAStrict   uint8 = 0   // IEEE_8021QAZ_TSA_STRICT: strict priority
	TSACBShaper uint8 = 1   // IEEE_8021QAZ_TSA_CB_SHAPER: credit-based shaper
	TSAETS      uint8 = 2   // IEEE_8021QAZ_TSA_ETS: a share of the bandwidth
	TSAVendor   uint8 = 255 // IEEE_8021QAZ_TSA_VENDOR: vendor specific
)

// TSAName names a transmission selection algorithm as mlnx_qos and
// iproute2's dcb print it: "strict", "cbs", "ets", "vendor", else
// "tsa-<n>".
func TSAName(tsa uint8) string {
	switch tsa {
	case TSAStrict:
		return "strict"
	case TSACBShaper:
		return "cbs"
	case TSAETS:
		return "ets"
	case TSAVendor:
		return "vendor"
	}
	return fmt.Sprintf("tsa-%d", tsa)
}

// DCBX mode bits (DCB_ATTR_DCBX, DCB_CAP_DCBX_*): who negotiates DCB with
// the switch and which protocol versions.
const (
	DCBXHost       uint8 = 0x01 // DCB_CAP_DCBX_HOST: the host (an LLDP agent, or nobody) owns the settings
	DCBXLLDManaged uint8 = 0x02 // DCB_CAP_DCBX_LLD_MANAGED: the NIC's firmware negotiates them
	DCBXVerCEE     uint8 = 0x04 // DCB_CAP_DCBX_VER_CEE
	DCBXVerIEEE    uint8 = 0x08 // DCB_CAP_DCBX_VER_IEEE
	DCBXStatic     uint8 = 0x10 // DCB_CAP_DCBX_STATIC: no negotiation
)

// DCBXNames names the bits of a DCBX mode, in bit order: "host",
// "lld-managed", "cee", "ieee", "static" (the names of iproute2's dcb dcbx).
func DCBXNames(mode uint8) []string {
	names := []string{}
	for _, b := range []struct {
		bit  uint8
		name string
	}{{DCBXHost, "host"}, {DCBXLLDManaged, "lld-managed"}, {DCBXVerCEE, "cee"}, {DCBXVerIEEE, "ieee"}, {DCBXStatic, "static"}} {
		if mode&b.bit != 0 {
			names = append(names, b.name)
		}
	}
	return names
}
