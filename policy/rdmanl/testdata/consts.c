/* Prints the RDMA netlink ABI policy/rdmanl uses, one "name value" a
 * line, from the installed uapi header. consts_test.go runs it. */
#include <stdio.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#define P(x) printf("%s %ld\n", #x, (long)(x))

int main(void)
{
	P(RDMA_NL_NLDEV);
	P(RDMA_NLDEV_CMD_GET);
	P(RDMA_NLDEV_CMD_SET);
	P(RDMA_NLDEV_ATTR_DEV_INDEX);
	P(RDMA_NLDEV_ATTR_DEV_NAME);
	P(RDMA_NLDEV_ATTR_DEV_DIM);
	P(RDMA_NLDEV_CMD_SYS_GET);
	P(RDMA_NLDEV_CMD_SYS_SET);
	P(RDMA_NLDEV_SYS_ATTR_NETNS_MODE);
	P(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_SET));
	return 0;
}
