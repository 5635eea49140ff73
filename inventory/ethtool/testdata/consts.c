/* Prints the kernel ABI inventory/ethtool uses, one "name value" a line,
 * from the installed uapi headers (linux-libc-dev). consts_test.go
 * compiles and runs it. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <net/if.h>
#include <linux/ethtool.h>
#include <linux/ethtool_netlink.h>
#include <linux/sockios.h>

#define P(x) printf("%s %ld\n", #x, (long)(x))

int main(void)
{
	printf("ETHTOOL_GENL_NAME %s\n", ETHTOOL_GENL_NAME);
	P(ETHTOOL_GENL_VERSION);
	P(ETHTOOL_MSG_PAUSE_GET);
	P(ETHTOOL_MSG_PAUSE_GET_REPLY);
	P(ETHTOOL_A_HEADER_DEV_INDEX);
	P(ETHTOOL_A_HEADER_DEV_NAME);
	P(ETHTOOL_A_HEADER_FLAGS);
	P(ETHTOOL_FLAG_STATS);
	P(ETHTOOL_A_PAUSE_HEADER);
	P(ETHTOOL_A_PAUSE_AUTONEG);
	P(ETHTOOL_A_PAUSE_RX);
	P(ETHTOOL_A_PAUSE_TX);
	P(ETHTOOL_A_PAUSE_STATS);
	P(ETHTOOL_A_PAUSE_STAT_PAD);
	P(ETHTOOL_A_PAUSE_STAT_TX_FRAMES);
	P(ETHTOOL_A_PAUSE_STAT_RX_FRAMES);
	P(SIOCETHTOOL);
	P(ETHTOOL_GSSET_INFO);
	P(ETHTOOL_GSTRINGS);
	P(ETHTOOL_GSTATS);
	P(ETH_SS_STATS);
	P(ETH_GSTRING_LEN);
	P(offsetof(struct ethtool_sset_info, sset_mask));
	P(offsetof(struct ethtool_sset_info, data));
	P(offsetof(struct ethtool_gstrings, len));
	P(offsetof(struct ethtool_gstrings, data));
	P(offsetof(struct ethtool_stats, n_stats));
	P(offsetof(struct ethtool_stats, data));
	P(IFNAMSIZ);
	P(sizeof(struct ifreq));
	P(offsetof(struct ifreq, ifr_data));
	return 0;
}
