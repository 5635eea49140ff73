// Package rdmares reads the RDMA objects the kernel tracks (its resource
// tracking, "restrack"): the queue pairs, completion queues, memory regions
// and protection domains of every RDMA device, each with the process that
// created it, and the length of each memory region, which is the memory it
// pins. It is what `rdma resource show qp|cq|mr|pd` (iproute2) prints, read
// the same way: over RDMA netlink (NETLINK_RDMA, the RDMA_NL_NLDEV client),
// RDMA_NLDEV_CMD_RES_GET dumps the devices, and RDMA_NLDEV_CMD_RES_QP_GET,
// _CQ_GET, _MR_GET and _PD_GET dump each device's objects.
//
// The socket is mdlayher/netlink's (netlink.Conn: the dumps' multipart
// answers, the sequence and port id checks, the kernel's error codes, the
// context's deadline and cancellation on the socket); the attributes are
// this package's own decoder. Without cgo, so that rdmactl links it and
// reads the kernel itself when rdmad does not answer (cmd/rdmactl/deps_test.go
// allows mdlayher/netlink and bounds rdmactl's size). Every constant is
// checked against the uapi header (testdata/rdma_netlink.h, Linux 6.1), the
// decoder against netlink bytes built as the kernel's nldev.c builds them,
// hostile ones included, and the dumps against nltest's scripted kernel.
//
// What the kernel tells, and what it does not:
//   - A process's object carries a pid (RDMA_NLDEV_ATTR_RES_PID) in the
//     reader's pid namespace, never a name, and the pid is the creating
//     thread's (a Go program registers memory from any of its threads):
//     the process is its thread group (/proc/PID/status Tgid) and the
//     command name /proc/TGID/comm. Both stay unknown (the thread's id, no
//     name) when the process is gone or hidden (a procfs mounted with
//     hidepid, as rdmad's sandbox has it, hides other users' processes).
//   - A kernel object carries its owner's name (RDMA_NLDEV_ATTR_RES_KERN_NAME,
//     a module such as "ib_core") and no pid; it is counted under that name
//     with pid 0, and only a reader in the initial pid namespace sees it.
//   - An object of a process that is exiting carries neither; it is counted
//     under pid 0 with no name.
//   - Any user may read the dumps (keys and addresses are left out for a
//     reader without CAP_NET_ADMIN; this package reads neither).
package rdmares
