/*
 * Prints the dcbnl ABI facts package dcb relies on, as the installed uapi
 * header defines them: constants, struct sizes and offsets, and the bytes
 * of structs filled with known values. layout_test.go compiles and runs it
 * and compares every line with the Go side. One "name value" pair a line;
 * byte dumps are hex.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/rtnetlink.h>
#include <linux/dcbnl.h>

#define V(x) printf("%s %lld\n", #x, (long long)(x))

static void dump(const char *name, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	printf("%s ", name);
	for (i = 0; i < n; i++)
		printf("%02x", b[i]);
	printf("\n");
}

int main(void)
{
	struct ieee_pfc pfc;
	struct ieee_ets ets;
	struct dcb_app app;
	struct dcbmsg msg;
	size_t i;

	V(RTM_GETDCB);
	V(RTM_SETDCB);
	V(AF_UNSPEC);
	V(DCB_CMD_GSTATE);
	V(DCB_CMD_IEEE_SET);
	V(DCB_CMD_IEEE_GET);
	V(DCB_CMD_IEEE_DEL);
	V(DCB_ATTR_IFNAME);
	V(DCB_ATTR_STATE);
	V(DCB_ATTR_IEEE);
	V(DCB_ATTR_DCBX);
	V(DCB_ATTR_IEEE_ETS);
	V(DCB_ATTR_IEEE_PFC);
	V(DCB_ATTR_IEEE_APP_TABLE);
	V(DCB_ATTR_IEEE_PEER_ETS);
	V(DCB_ATTR_IEEE_PEER_PFC);
	V(DCB_ATTR_IEEE_PEER_APP);
	V(DCB_ATTR_IEEE_MAXRATE);
	V(DCB_ATTR_DCB_BUFFER);
	V(DCB_ATTR_IEEE_APP_UNSPEC);
	V(DCB_ATTR_IEEE_APP);
	V(IEEE_8021QAZ_MAX_TCS);
	V(IEEE_8021QAZ_APP_SEL_ETHERTYPE);
	V(IEEE_8021QAZ_APP_SEL_STREAM);
	V(IEEE_8021QAZ_APP_SEL_DGRAM);
	V(IEEE_8021QAZ_APP_SEL_ANY);
	V(IEEE_8021QAZ_APP_SEL_DSCP);
	V(IEEE_8021QAZ_TSA_STRICT);
	V(IEEE_8021QAZ_TSA_CB_SHAPER);
	V(IEEE_8021QAZ_TSA_ETS);
	V(IEEE_8021QAZ_TSA_VENDOR);
	V(DCB_CAP_DCBX_HOST);
	V(DCB_CAP_DCBX_LLD_MANAGED);
	V(DCB_CAP_DCBX_VER_CEE);
	V(DCB_CAP_DCBX_VER_IEEE);
	V(DCB_CAP_DCBX_STATIC);
	V(sizeof(struct dcbmsg));
	V(offsetof(struct dcbmsg, cmd));
	V(sizeof(struct dcb_app));
	V(offsetof(struct dcb_app, priority));
	V(offsetof(struct dcb_app, protocol));
	V(sizeof(struct ieee_pfc));
	V(offsetof(struct ieee_pfc, pfc_en));
	V(offsetof(struct ieee_pfc, mbc));
	V(offsetof(struct ieee_pfc, delay));
	V(offsetof(struct ieee_pfc, requests));
	V(offsetof(struct ieee_pfc, indications));
	V(sizeof(struct ieee_ets));
	V(offsetof(struct ieee_ets, tc_tx_bw));
	V(offsetof(struct ieee_ets, tc_rx_bw));
	V(offsetof(struct ieee_ets, tc_tsa));
	V(offsetof(struct ieee_ets, prio_tc));
	V(offsetof(struct ieee_ets, tc_reco_bw));
	V(offsetof(struct ieee_ets, tc_reco_tsa));
	V(offsetof(struct ieee_ets, reco_prio_tc));

	/* Linux 6.3 added the APP trust and rewrite tables together with the
	 * PCP selector; DCB_APP_SEL_PCP is the only one of them that is a
	 * macro, so it tells whether this header has them. */
#ifdef DCB_APP_SEL_PCP
	V(DCB_APP_SEL_PCP);
	V(DCB_ATTR_DCB_APP_TRUST_TABLE);
	V(DCB_ATTR_DCB_REWR_TABLE);
	V(DCB_ATTR_DCB_APP);
#endif

	memset(&msg, 0, sizeof(msg));
	msg.dcb_family = AF_UNSPEC;
	msg.cmd = DCB_CMD_IEEE_GET;
	dump("bytes.dcbmsg", &msg, sizeof(msg));

	memset(&app, 0, sizeof(app));
	app.selector = IEEE_8021QAZ_APP_SEL_DSCP;
	app.priority = 3;
	app.protocol = 0x1a2b;
	dump("bytes.dcb_app", &app, sizeof(app));

	memset(&pfc, 0, sizeof(pfc));
	pfc.pfc_cap = 8;
	pfc.pfc_en = 0x28;
	pfc.mbc = 1;
	pfc.delay = 0x1234;
	for (i = 0; i < IEEE_8021QAZ_MAX_TCS; i++) {
		pfc.requests[i] = 0x0102030405060700ULL + i;
		pfc.indications[i] = 0x1100000000000000ULL + i;
	}
	dump("bytes.ieee_pfc", &pfc, sizeof(pfc));

	for (i = 0; i < sizeof(ets); i++)
		((unsigned char *)&ets)[i] = (unsigned char)(i + 1);
	dump("bytes.ieee_ets", &ets, sizeof(ets));
	return 0;
}
