//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -libverbs
#cgo noescape rdmad_post_send_list
#cgo nocallback rdmad_post_send_list
#cgo noescape rdmad_post_poll
#cgo nocallback rdmad_post_poll
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// The functions below wrap libibverbs entry points that are static inline
// functions or macros (not callable from cgo) and build work requests on
// the C stack, so no Go pointer is ever kept by C.

static int rdmad_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
}

static struct ibv_mr *rdmad_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

static int rdmad_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index, struct ibv_gid_entry *e) {
	return ibv_query_gid_ex(c, port, index, e, 0);
}

static int rdmad_set_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return -1;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int rdmad_get_async_event(struct ibv_context *c, int *type, int *port, uint32_t *qpn) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(c, &ev) != 0) return -1;
	*type = ev.event_type;
	*port = 0;
	*qpn = 0;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qpn = ev.element.qp ? ev.element.qp->qp_num : 0;
		break;
	case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE: case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

static int rdmad_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq) {
	void *ctx;
	if (ibv_get_cq_event(ch, cq, &ctx) != 0) return -1;
	ibv_ack_cq_events(*cq, 1);
	return 0;
}

static int rdmad_req_notify_cq(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

static int rdmad_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return ibv_poll_cq(cq, n, wc); }

// One send work request as Go hands it over: flat, and with no pointer into
// Go memory (the address handle is C memory).
struct rdmad_swr {
	uint64_t id, addr, raddr;
	struct ibv_ah *ah;
	uint32_t len, lkey, rkey, rqpn, rqkey;
	int opcode, flags;
};

#define RDMAD_MAX_SEND_LIST 32

// rdmad_post_send_list posts n requests as one chain: one call into the
// provider and one doorbell (one system call on Soft-RoCE) for all of them.
// *posted is how many the provider took; on an error the rest were not
// posted.
static int rdmad_post_send_list(struct ibv_qp *qp, const struct rdmad_swr *w, int n, int *posted) {
	struct ibv_send_wr wr[RDMAD_MAX_SEND_LIST], *bad = NULL;
	struct ibv_sge sge[RDMAD_MAX_SEND_LIST];
	*posted = 0;
	if (n < 1 || n > RDMAD_MAX_SEND_LIST)
		return EINVAL;
	memset(wr, 0, n * sizeof wr[0]);
	for (int i = 0; i < n; i++) {
		sge[i].addr = w[i].addr;
		sge[i].length = w[i].len;
		sge[i].lkey = w[i].lkey;
		wr[i].wr_id = w[i].id;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = w[i].len ? 1 : 0;
		wr[i].opcode = w[i].opcode;
		wr[i].send_flags = w[i].flags;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		if (w[i].ah) {
			wr[i].wr.ud.ah = w[i].ah;
			wr[i].wr.ud.remote_qpn = w[i].rqpn;
			wr[i].wr.ud.remote_qkey = w[i].rqkey;
		} else {
			wr[i].wr.rdma.remote_addr = w[i].raddr;
			wr[i].wr.rdma.rkey = w[i].rkey;
		}
	}
	int r = ibv_post_send(qp, wr, &bad);
	*posted = r == 0 ? n : (bad ? (int)(bad - wr) : 0);
	return r;
}

static int64_t rdmad_mono_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// rdmad_post_poll posts one request and polls cq until want completions
// came or spin_ns passed, in one call from Go: the clock is read right
// before ibv_post_send (*t0) and right after the last completion (*t1, 0
// when they did not all come within the spin), so that the time between is
// what the provider and the NIC take, without the cost of entering and
// leaving C around each verb. The completions go to wc (at most wcn);
// *got is how many. It returns the post's errno (then nothing was polled),
// -1 when the CQ failed, else 0. The clock is read every 32 polls, as
// CQ.PollWait does.
static int rdmad_post_poll(struct ibv_qp *qp, const struct rdmad_swr *w, struct ibv_cq *cq, int want,
		int64_t spin_ns, struct ibv_wc *wc, int wcn, int *got, int64_t *t0, int64_t *t1) {
	int posted;
	*got = 0;
	*t1 = 0;
	*t0 = rdmad_mono_ns();
	int r = rdmad_post_send_list(qp, w, 1, &posted);
	if (r != 0)
		return r;
	int64_t deadline = *t0 + spin_ns;
	for (unsigned i = 1;; i++) {
		int n = ibv_poll_cq(cq, wcn - *got, wc + *got);
		if (n < 0)
			return -1;
		*got += n;
		if (*got >= want || *got >= wcn) {
			*t1 = rdmad_mono_ns();
			return 0;
		}
		if (i % 32 == 0 && rdmad_mono_ns() >= deadline)
			return 0;
	}
}

static int rdmad_post_recv(struct ibv_qp *qp, uint64_t id, uint64_t addr, uint32_t len, uint32_t lkey) {
	struct ibv_sge sge = { .addr = addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

static struct ibv_qp *rdmad_create_qp(struct ibv_pd *pd, int type, struct ibv_cq *scq, struct ibv_cq *rcq,
		uint32_t max_send_wr, uint32_t max_recv_wr, uint32_t max_sge, uint32_t max_inline) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = type;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = max_send_wr;
	a.cap.max_recv_wr = max_recv_wr;
	a.cap.max_send_sge = max_sge;
	a.cap.max_recv_sge = max_sge;
	a.cap.max_inline_data = max_inline;
	a.sq_sig_all = 0;
	return ibv_create_qp(pd, &a);
}

static uint32_t rdmad_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

static int rdmad_qp_to_init(struct ibv_qp *qp, uint8_t port, uint16_t pkey_index, int access, int ud, uint32_t qkey) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = pkey_index;
	a.port_num = port;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (ud) {
		a.qkey = qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int rdmad_qp_to_rtr(struct ibv_qp *qp, int ud, int mtu, uint32_t dqpn, uint32_t rq_psn,
		uint8_t port, int global, const uint8_t *dgid, uint8_t sgid_index, uint16_t dlid,
		uint8_t sl, uint8_t tclass, uint8_t hop_limit, uint8_t max_dest_rd_atomic, uint8_t min_rnr_timer) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	if (ud) return ibv_modify_qp(qp, &a, IBV_QP_STATE);
	a.path_mtu = mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.max_dest_rd_atomic = max_dest_rd_atomic;
	a.min_rnr_timer = min_rnr_timer;
	a.ah_attr.port_num = port;
	a.ah_attr.dlid = dlid;
	a.ah_attr.sl = sl;
	if (global) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
		a.ah_attr.grh.sgid_index = sgid_index;
		a.ah_attr.grh.hop_limit = hop_limit;
		a.ah_attr.grh.traffic_class = tclass;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static int rdmad_qp_to_rts(struct ibv_qp *qp, int ud, uint32_t sq_psn, uint8_t timeout, uint8_t retry,
		uint8_t rnr_retry, uint8_t max_rd_atomic) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	if (ud) return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = max_rd_atomic;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int rdmad_qp_set_state(struct ibv_qp *qp, int state) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = state;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int rdmad_qp_state(struct ibv_qp *qp, int *state) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int r = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);
	if (r == 0) *state = a.qp_state;
	return r;
}

static struct ibv_ah *rdmad_create_ah(struct ibv_pd *pd, uint8_t port, int global, const uint8_t *dgid,
		uint8_t sgid_index, uint16_t dlid, uint8_t sl, uint8_t tclass, uint8_t hop_limit) {
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof a);
	a.port_num = port;
	a.dlid = dlid;
	a.sl = sl;
	if (global) {
		a.is_global = 1;
		memcpy(a.grh.dgid.raw, dgid, 16);
		a.grh.sgid_index = sgid_index;
		a.grh.hop_limit = hop_limit;
		a.grh.traffic_class = tclass;
	}
	return ibv_create_ah(pd, &a);
}

static struct ibv_device *rdmad_dev_at(struct ibv_device **l, int i) { return l[i]; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmad/rdmad/internal/size"
	"golang.org/x/sys/unix"
)

// Devices lists the RDMA devices of this machine. It rescans sysfs on every
// call, so devices that appeared or disappeared since the last call are
// seen. When the kernel has no uverbs support or there is no device it
// returns an error matching ErrUnavailable.
func Devices() ([]DeviceInfo, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, unavailableFromList(err)
	}
	defer C.ibv_free_device_list(list)
	out := make([]DeviceInfo, 0, int(n))
	for i := 0; i < int(n); i++ {
		d := C.rdmad_dev_at(list, C.int(i))
		out = append(out, deviceInfo(d))
	}
	if len(out) == 0 {
		return nil, &UnavailableError{Reason: "no RDMA devices found; load the adapter's driver, or for Soft-RoCE run `rdma link add rxe0 type rxe netdev <if>`"}
	}
	return out, nil
}

func unavailableFromList(err error) error {
	if errors.Is(err, syscall.ENOSYS) {
		return &UnavailableError{Reason: "ibv_get_device_list: the kernel has no RDMA userspace support (/sys/class/infiniband_verbs missing); load ib_uverbs and the adapter's driver", Err: err}
	}
	if err == nil {
		err = syscall.EIO
	}
	return &UnavailableError{Reason: "ibv_get_device_list failed; check that ib_uverbs is loaded and /dev/infiniband is accessible", Err: err}
}

func deviceInfo(d *C.struct_ibv_device) DeviceInfo {
	nt := C.GoString(C.ibv_node_type_str(d.node_type))
	return DeviceInfo{
		Name:      C.GoString(C.ibv_get_device_name(d)),
		GUID:      beToHost64(uint64(C.ibv_get_device_guid(d))),
		NodeType:  nt,
		UverbsDev: C.GoString(&d.dev_name[0]),
		DevPath:   C.GoString(&d.dev_path[0]),
	}
}

func beToHost64(v uint64) uint64 {
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b[0])) = v
	var r uint64
	for _, x := range b {
		r = r<<8 | uint64(x)
	}
	return r
}

// A Context is an open RDMA device (struct ibv_context). It owns every
// resource created through it: Close releases them all, in reverse order of
// creation, so a daemon reacting to a removed device needs only close the
// Context. A Context is safe for use by multiple goroutines only as far as
// libibverbs is: creation and destruction of resources are serialised here,
// posting and polling on one QP/CQ belong to one goroutine.
type Context struct {
	name    string
	devPath string
	ctx     *C.struct_ibv_context

	mu       sync.Mutex
	closed   bool
	nextID   uint64
	children map[uint64]func() error

	async     *os.File // dup of the non-blocking async event fd
	asyncWait sync.WaitGroup
}

// Open opens the device with the given name. If the device does not exist,
// the error matches ErrNoDevice (or ErrUnavailable if there are no devices
// at all).
func Open(name string) (*Context, error) {
	var n C.int
	list, err := C.ibv_get_device_list(&n)
	if list == nil {
		return nil, unavailableFromList(err)
	}
	defer C.ibv_free_device_list(list)
	if n == 0 {
		return nil, fmt.Errorf("verbs: open %s: %w", name, &UnavailableError{Reason: "no RDMA devices found"})
	}
	var dev *C.struct_ibv_device
	for i := 0; i < int(n); i++ {
		d := C.rdmad_dev_at(list, C.int(i))
		if C.GoString(C.ibv_get_device_name(d)) == name {
			dev = d
			break
		}
	}
	if dev == nil {
		return nil, fmt.Errorf("verbs: open %s: %w (see `rdma link show`)", name, ErrNoDevice)
	}
	info := deviceInfo(dev)
	ctx, err := C.ibv_open_device(dev)
	if ctx == nil {
		return nil, &Error{Verb: "ibv_open_device", Object: name, Err: errnoOf(0, err), Hint: "check permissions of /dev/infiniband/" + info.UverbsDev}
	}
	c := &Context{name: name, devPath: info.DevPath, ctx: ctx, children: make(map[uint64]func() error)}
	fd := int(ctx.async_fd)
	if r, err := C.rdmad_set_nonblock(C.int(fd)); r != 0 {
		C.ibv_close_device(ctx)
		return nil, &Error{Verb: "fcntl O_NONBLOCK", Object: "async fd of " + name, Err: errnoOf(0, err)}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		C.ibv_close_device(ctx)
		return nil, &Error{Verb: "dup", Object: "async fd of " + name, Err: err}
	}
	// The dup shares the open file description (and so O_NONBLOCK) with
	// libibverbs' fd; the runtime poller waits on it, and closing it wakes
	// every waiter before ibv_close_device closes the original.
	c.async = os.NewFile(uintptr(dup), name+"-async")
	return c, nil
}

// Name returns the device's name.
func (c *Context) Name() string { return c.name }

// Alive reports whether the device is still registered with the kernel.
// Providers without disassociate support (rxe) do not send DEVICE_FATAL on
// removal but wait for every user to close the device; the uverbs sysfs
// node disappears first, so pollers use Alive to notice removal and close.
func (c *Context) Alive() bool {
	if c.devPath == "" {
		return true
	}
	_, err := os.Stat(c.devPath)
	return err == nil
}

func (c *Context) add(closeFn func() error) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, fmt.Errorf("verbs: %s: %w", c.name, ErrClosed)
	}
	c.nextID++
	c.children[c.nextID] = closeFn
	return c.nextID, nil
}

func (c *Context) remove(id uint64) {
	c.mu.Lock()
	delete(c.children, id)
	c.mu.Unlock()
}

func (c *Context) usable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("verbs: %s: %w", c.name, ErrClosed)
	}
	return nil
}

// Close destroys every resource created through c, newest first, then
// closes the device. Waits in progress on c's async events or completion
// channels return ErrClosed. Close is idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	ids := make([]uint64, 0, len(c.children))
	for id := range c.children {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fns := make([]func() error, 0, len(ids))
	for i := len(ids) - 1; i >= 0; i-- {
		fns = append(fns, c.children[ids[i]])
	}
	c.children = nil
	c.mu.Unlock()

	var errs []error
	for _, fn := range fns {
		if err := fn(); err != nil {
			errs = append(errs, err)
		}
	}
	c.async.Close()
	c.asyncWait.Wait()
	if r, err := C.ibv_close_device(c.ctx); r != 0 {
		errs = append(errs, &Error{Verb: "ibv_close_device", Object: c.name, Err: errnoOf(int(r), err)})
	}
	return errors.Join(errs...)
}

// QueryDevice returns the device's attributes.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	if err := c.usable(); err != nil {
		return DeviceAttr{}, err
	}
	var a C.struct_ibv_device_attr
	if r, err := C.ibv_query_device(c.ctx, &a); r != 0 {
		return DeviceAttr{}, &Error{Verb: "ibv_query_device", Object: c.name, Err: errnoOf(int(r), err)}
	}
	return DeviceAttr{
		FirmwareVersion: C.GoString(&a.fw_ver[0]),
		NodeGUID:        beToHost64(uint64(a.node_guid)),
		VendorID:        uint32(a.vendor_id),
		VendorPartID:    uint32(a.vendor_part_id),
		HWVersion:       uint32(a.hw_ver),
		PhysPortCount:   int(a.phys_port_cnt),
		MaxMRSize:       uint64(a.max_mr_size),
		MaxQP:           int(a.max_qp),
		MaxQPWR:         int(a.max_qp_wr),
		MaxSGE:          int(a.max_sge),
		MaxCQ:           int(a.max_cq),
		MaxCQE:          int(a.max_cqe),
		MaxMR:           int(a.max_mr),
		MaxPD:           int(a.max_pd),
		MaxQPRdAtom:     int(a.max_qp_rd_atom),
	}, nil
}

// QueryPort returns the attributes of port (1-based).
func (c *Context) QueryPort(port int) (PortAttr, error) {
	if err := c.usable(); err != nil {
		return PortAttr{}, err
	}
	var a C.struct_ibv_port_attr
	if r, err := C.rdmad_query_port(c.ctx, C.uint8_t(port), &a); r != 0 {
		return PortAttr{}, &Error{Verb: "ibv_query_port", Object: fmt.Sprintf("%s port %d", c.name, port), Err: errnoOf(int(r), err)}
	}
	return PortAttr{
		State:       PortState(a.state),
		MaxMTU:      MTU(a.max_mtu),
		ActiveMTU:   MTU(a.active_mtu),
		GIDTableLen: int(a.gid_tbl_len),
		LID:         uint16(a.lid),
		LinkLayer:   LinkLayer(a.link_layer),
		ActiveSpeed: uint8(a.active_speed),
		ActiveWidth: uint8(a.active_width),
		PhysState:   uint8(a.phys_state),
	}, nil
}

// GIDTable returns the valid entries of port's GID table with their types.
// Unused (zero) entries are left out.
func (c *Context) GIDTable(port int) ([]GIDEntry, error) {
	pa, err := c.QueryPort(port)
	if err != nil {
		return nil, err
	}
	var out []GIDEntry
	for i := 0; i < pa.GIDTableLen; i++ {
		var e C.struct_ibv_gid_entry
		r, err := C.rdmad_query_gid_ex(c.ctx, C.uint32_t(port), C.uint32_t(i), &e)
		if r != 0 {
			// Empty slots answer ENODATA; anything else is a real failure.
			if en := errnoOf(int(r), err); errors.Is(en, syscall.ENODATA) || errors.Is(en, syscall.EINVAL) {
				continue
			} else {
				return out, &Error{Verb: "ibv_query_gid_ex", Object: fmt.Sprintf("%s port %d index %d", c.name, port, i), Err: en}
			}
		}
		var g GID
		copy(g[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
		if g.IsZero() {
			continue
		}
		out = append(out, GIDEntry{Index: int(e.gid_index), Port: int(e.port_num), GID: g, Type: GIDType(e.gid_type), IfIndex: int(e.ndev_ifindex)})
	}
	return out, nil
}

// WatchAsyncEvents calls fn with every asynchronous event of the device
// until ctx is done (it returns ctx.Err()) or c is closed (ErrClosed). It
// waits in the runtime's poller on the non-blocking async fd, so it costs
// nothing while no event arrives. fn runs on the calling goroutine; the
// caller owns that goroutine. At most one watcher per Context.
func (c *Context) WatchAsyncEvents(ctx context.Context, fn func(AsyncEvent)) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("verbs: watch async events of %s: %w", c.name, ErrClosed)
	}
	c.asyncWait.Add(1)
	c.mu.Unlock()
	defer c.asyncWait.Done()

	rc, err := c.async.SyscallConn()
	if err != nil {
		return fmt.Errorf("verbs: watch async events of %s: %w", c.name, err)
	}
	stop := context.AfterFunc(ctx, func() { c.async.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			// The deadline was set; clear it for the next watcher.
			c.async.SetReadDeadline(time.Time{})
		}
	}()
	for {
		var typ, port C.int
		var qpn C.uint32_t
		var cerr error
		err := rc.Read(func(uintptr) bool {
			var r C.int
			r, cerr = C.rdmad_get_async_event(c.ctx, &typ, &port, &qpn)
			if r == 0 {
				cerr = nil
				return true
			}
			return !errors.Is(cerr, syscall.EAGAIN)
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			// The runtime reports a file closed under a waiter as "use of
			// closed file", which matches no exported error.
			if closed || errors.Is(err, os.ErrClosed) {
				return fmt.Errorf("verbs: watch async events of %s: %w", c.name, ErrClosed)
			}
			return fmt.Errorf("verbs: watch async events of %s: %w", c.name, err)
		}
		if cerr != nil {
			return &Error{Verb: "ibv_get_async_event", Object: c.name, Err: cerr, Hint: "the device was probably removed; reopen it"}
		}
		fn(AsyncEvent{Device: c.name, Type: AsyncEventType(typ), Port: int(port), QPNum: uint32(qpn)})
	}
}

// A PD is a protection domain.
type PD struct {
	c  *Context
	pd *C.struct_ibv_pd
	id uint64
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	pd, err := C.ibv_alloc_pd(c.ctx)
	if pd == nil {
		return nil, &Error{Verb: "ibv_alloc_pd", Object: c.name, Err: errnoOf(0, err)}
	}
	p := &PD{c: c, pd: pd}
	id, err := c.add(p.destroy)
	if err != nil {
		C.ibv_dealloc_pd(pd)
		return nil, err
	}
	p.id = id
	return p, nil
}

func (p *PD) destroy() error {
	if p.pd == nil {
		return nil
	}
	r, err := C.ibv_dealloc_pd(p.pd)
	p.pd = nil
	if r != 0 {
		return &Error{Verb: "ibv_dealloc_pd", Object: p.c.name, Err: errnoOf(int(r), err), Hint: "close its QPs, MRs and AHs first"}
	}
	return nil
}

// Close deallocates the protection domain.
func (p *PD) Close() error {
	p.c.remove(p.id)
	return p.destroy()
}

// An MR is a registered memory region.
type MR struct {
	c    *Context
	mr   *C.struct_ibv_mr
	id   uint64
	addr uint64
	len  int
	lkey uint32
	rkey uint32
}

// RegMR registers all of b with the given access. b must stay mapped until
// the MR is closed.
func (p *PD) RegMR(b *Buffer, access Access) (*MR, error) {
	mem := b.Bytes()
	obj := fmt.Sprintf("%s on %s", size.Size(len(mem)).String(), p.c.name)
	if len(mem) == 0 {
		return nil, &Error{Verb: "ibv_reg_mr", Object: obj, Err: syscall.EINVAL, Hint: "buffer is empty or closed"}
	}
	if err := p.c.usable(); err != nil {
		return nil, err
	}
	// mem is mmap'd memory, not Go heap memory, so C may keep its address.
	mr, err := C.rdmad_reg_mr(p.pd, unsafe.Pointer(&mem[0]), C.size_t(len(mem)), C.int(access))
	if mr == nil {
		err = errnoOf(0, err)
		e := &Error{Verb: "ibv_reg_mr", Object: obj, Err: err}
		switch {
		case errors.Is(err, syscall.ENOMEM):
			st, _ := ReadMemlock()
			e.Hint = memlockHint(st, int64(len(mem)))
		case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			e.Hint = "the access flags are not allowed here, or /dev/infiniband is not accessible to this user"
		case errors.Is(err, syscall.EINVAL):
			e.Hint = "the device rejected the access flags or size; check max_mr_size"
		}
		return nil, e
	}
	m := &MR{c: p.c, mr: mr, addr: uint64(uintptr(mr.addr)), len: int(mr.length), lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}
	id, err := p.c.add(m.destroy)
	if err != nil {
		C.ibv_dereg_mr(mr)
		return nil, err
	}
	m.id = id
	return m, nil
}

// Addr returns the region's start address.
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length.
func (m *MR) Len() int { return m.len }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

func (m *MR) destroy() error {
	if m.mr == nil {
		return nil
	}
	r, err := C.ibv_dereg_mr(m.mr)
	m.mr = nil
	if r != 0 {
		return &Error{Verb: "ibv_dereg_mr", Object: fmt.Sprintf("%s on %s", size.Size(m.len).String(), m.c.name), Err: errnoOf(int(r), err)}
	}
	return nil
}

// Close deregisters the memory region.
func (m *MR) Close() error {
	m.c.remove(m.id)
	return m.destroy()
}

// A CompChannel is a completion event channel: CQs attached to it signal
// completions through a pollable fd, so waiting costs nothing at idle.
type CompChannel struct {
	c    *Context
	ch   *C.struct_ibv_comp_channel
	id   uint64
	file *os.File // non-blocking dup of ch->fd, registered with the poller
	wait sync.WaitGroup
	mu   sync.Mutex
	cqs  map[*C.struct_ibv_cq]*CQ
}

// NewCompChannel creates a completion channel.
func (c *Context) NewCompChannel() (*CompChannel, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	ch, err := C.ibv_create_comp_channel(c.ctx)
	if ch == nil {
		return nil, &Error{Verb: "ibv_create_comp_channel", Object: c.name, Err: errnoOf(0, err)}
	}
	fd := int(ch.fd)
	if r, err := C.rdmad_set_nonblock(C.int(fd)); r != 0 {
		C.ibv_destroy_comp_channel(ch)
		return nil, &Error{Verb: "fcntl O_NONBLOCK", Object: "completion channel of " + c.name, Err: errnoOf(0, err)}
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		C.ibv_destroy_comp_channel(ch)
		return nil, &Error{Verb: "dup", Object: "completion channel of " + c.name, Err: err}
	}
	cc := &CompChannel{c: c, ch: ch, file: os.NewFile(uintptr(dup), c.name+"-comp"), cqs: make(map[*C.struct_ibv_cq]*CQ)}
	id, err := c.add(cc.destroy)
	if err != nil {
		cc.file.Close()
		C.ibv_destroy_comp_channel(ch)
		return nil, err
	}
	cc.id = id
	return cc, nil
}

// Wait blocks until a CQ attached to ch has a completion event, and returns
// that CQ (the event is acknowledged). It returns ctx.Err() when ctx is done
// and ErrClosed when ch is closed.
func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	ch.mu.Lock()
	if ch.ch == nil {
		ch.mu.Unlock()
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, ErrClosed)
	}
	ch.wait.Add(1)
	ch.mu.Unlock()
	defer ch.wait.Done()

	rc, err := ch.file.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, err)
	}
	stop := context.AfterFunc(ctx, func() { ch.file.SetReadDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			// The deadline was set; clear it for the next Wait.
			ch.file.SetReadDeadline(time.Time{})
		}
	}()
	var cq *C.struct_ibv_cq
	var cerr error
	err = rc.Read(func(uintptr) bool {
		var r C.int
		r, cerr = C.rdmad_get_cq_event(ch.ch, &cq)
		if r == 0 {
			cerr = nil
			return true
		}
		return !errors.Is(cerr, syscall.EAGAIN)
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		ch.mu.Lock()
		closed := ch.ch == nil
		ch.mu.Unlock()
		if closed || errors.Is(err, os.ErrClosed) {
			return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, ErrClosed)
		}
		return nil, fmt.Errorf("verbs: wait on completion channel of %s: %w", ch.c.name, err)
	}
	if cerr != nil {
		return nil, &Error{Verb: "ibv_get_cq_event", Object: ch.c.name, Err: cerr}
	}
	ch.mu.Lock()
	g := ch.cqs[cq]
	ch.mu.Unlock()
	return g, nil
}

func (ch *CompChannel) destroy() error {
	ch.mu.Lock()
	if ch.ch == nil {
		ch.mu.Unlock()
		return nil
	}
	c := ch.ch
	ch.ch = nil
	ch.mu.Unlock()
	ch.file.Close() // wakes waiters
	ch.wait.Wait()
	if r, err := C.ibv_destroy_comp_channel(c); r != 0 {
		return &Error{Verb: "ibv_destroy_comp_channel", Object: ch.c.name, Err: errnoOf(int(r), err), Hint: "close its CQs first"}
	}
	return nil
}

// Close destroys the channel; waits in progress return ErrClosed. Its CQs
// must be closed first.
func (ch *CompChannel) Close() error {
	ch.c.remove(ch.id)
	return ch.destroy()
}

// A CQ is a completion queue.
type CQ struct {
	c   *Context
	cq  *C.struct_ibv_cq
	ch  *CompChannel
	id  uint64
	wc  *C.struct_ibv_wc // C array of wcN entries: no Go pointer reaches C
	wcN int
}

// NewCQ creates a completion queue with at least cqe entries, attached to
// ch (which may be nil for a CQ that is only polled).
func (c *Context) NewCQ(cqe int, ch *CompChannel) (*CQ, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	var cch *C.struct_ibv_comp_channel
	if ch != nil {
		cch = ch.ch
	}
	cq, err := C.ibv_create_cq(c.ctx, C.int(cqe), nil, cch, 0)
	if cq == nil {
		return nil, &Error{Verb: "ibv_create_cq", Object: fmt.Sprintf("%d entries on %s", cqe, c.name), Err: errnoOf(0, err), Hint: "check max_cqe and max_cq of the device"}
	}
	const wcN = 16
	q := &CQ{c: c, cq: cq, ch: ch, wcN: wcN}
	q.wc = (*C.struct_ibv_wc)(C.calloc(wcN, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{}))))
	id, err := c.add(q.destroy)
	if err != nil {
		C.ibv_destroy_cq(cq)
		C.free(unsafe.Pointer(q.wc))
		return nil, err
	}
	q.id = id
	if ch != nil {
		ch.mu.Lock()
		ch.cqs[cq] = q
		ch.mu.Unlock()
	}
	return q, nil
}

func (q *CQ) destroy() error {
	if q.cq == nil {
		return nil
	}
	if q.ch != nil {
		q.ch.mu.Lock()
		delete(q.ch.cqs, q.cq)
		q.ch.mu.Unlock()
	}
	r, err := C.ibv_destroy_cq(q.cq)
	q.cq = nil
	C.free(unsafe.Pointer(q.wc))
	q.wc = nil
	if r != 0 {
		return &Error{Verb: "ibv_destroy_cq", Object: q.c.name, Err: errnoOf(int(r), err), Hint: "close its QPs first"}
	}
	return nil
}

// Close destroys the completion queue.
func (q *CQ) Close() error {
	q.c.remove(q.id)
	return q.destroy()
}

// WCGRH must equal IBV_WC_GRH: either array length is negative (a compile
// error) if they differ.
var (
	_ [C.IBV_WC_GRH - WCGRH]struct{}
	_ [WCGRH - C.IBV_WC_GRH]struct{}
)

// Poll moves up to len(out) completions into out and returns how many.
func (q *CQ) Poll(out []WorkCompletion) (int, error) {
	if q.cq == nil {
		return 0, fmt.Errorf("verbs: poll CQ of %s: %w", q.c.name, ErrClosed)
	}
	n := min(len(out), q.wcN)
	r := int(C.rdmad_poll_cq(q.cq, C.int(n), q.wc))
	if r < 0 {
		return 0, q.pollError()
	}
	q.convert(out, r)
	return r, nil
}

func (q *CQ) pollError() error {
	return &Error{Verb: "ibv_poll_cq", Object: q.c.name, Err: syscall.EIO, Hint: "the CQ overran or the device failed; recreate it"}
}

// convert copies the first r completions of the CQ's C buffer into out.
func (q *CQ) convert(out []WorkCompletion, r int) {
	wcs := unsafe.Slice(q.wc, q.wcN)
	for i := 0; i < r; i++ {
		w := &wcs[i]
		out[i] = WorkCompletion{
			WRID: uint64(w.wr_id), Status: WCStatus(w.status), Opcode: int(w.opcode),
			ByteLen: uint32(w.byte_len), QPNum: uint32(w.qp_num), SrcQP: uint32(w.src_qp), VendErr: uint32(w.vendor_err),
			Flags: uint32(w.wc_flags),
		}
		if w.status != C.IBV_WC_SUCCESS {
			out[i].StatusText = C.GoString(C.ibv_wc_status_str(w.status))
		}
	}
}

// ReqNotify arms the CQ: the next completion signals its channel.
func (q *CQ) ReqNotify() error {
	if q.cq == nil {
		return fmt.Errorf("verbs: arm CQ of %s: %w", q.c.name, ErrClosed)
	}
	if r := C.rdmad_req_notify_cq(q.cq); r != 0 {
		return &Error{Verb: "ibv_req_notify_cq", Object: q.c.name, Err: errnoOf(int(r), nil)}
	}
	return nil
}

// PollWait returns at least one completion, waiting for it. It first polls
// for up to spin (a probe's reply on a healthy port comes within tens of
// microseconds, faster than a wakeup through the poller), then arms the CQ
// and sleeps on its completion channel until ctx is done. With spin 0 it
// never busy-polls. The CQ must have a channel.
func (q *CQ) PollWait(ctx context.Context, out []WorkCompletion, spin time.Duration) (int, error) {
	if q.ch == nil {
		return q.Poll(out)
	}
	var deadline time.Time
	if spin > 0 {
		deadline = time.Now().Add(spin)
	}
	for i := 1; ; i++ {
		n, err := q.Poll(out)
		if n > 0 || err != nil {
			return n, err
		}
		// Read the clock only every 32 polls: a poll is a few memory
		// reads, a clock read can be far dearer (an emulated HPET).
		if spin > 0 && (i%32 != 0 || time.Now().Before(deadline)) {
			continue
		}
		if err := q.ReqNotify(); err != nil {
			return 0, err
		}
		// A completion that arrived before arming raises no event.
		if n, err := q.Poll(out); n > 0 || err != nil {
			return n, err
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if _, err := q.ch.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// A QP is a queue pair.
type QP struct {
	c   *Context
	pd  *PD
	qp  *C.struct_ibv_qp
	id  uint64
	typ QPType
	num uint32
}

// NewQP creates a queue pair in the RESET state.
func (p *PD) NewQP(cfg QPConfig) (*QP, error) {
	if err := p.c.usable(); err != nil {
		return nil, err
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, &Error{Verb: "ibv_create_qp", Object: p.c.name, Err: syscall.EINVAL, Hint: "SendCQ and RecvCQ are required"}
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	qp, err := C.rdmad_create_qp(p.pd, C.int(cfg.Type), cfg.SendCQ.cq, cfg.RecvCQ.cq,
		C.uint32_t(cfg.MaxSendWR), C.uint32_t(cfg.MaxRecvWR), C.uint32_t(cfg.MaxSGE), C.uint32_t(cfg.MaxInline))
	if qp == nil {
		return nil, &Error{Verb: "ibv_create_qp", Object: fmt.Sprintf("%s on %s", cfg.Type, p.c.name), Err: errnoOf(0, err), Hint: "check max_qp and max_qp_wr of the device"}
	}
	q := &QP{c: p.c, pd: p, qp: qp, typ: cfg.Type, num: uint32(C.rdmad_qp_num(qp))}
	id, err := p.c.add(q.destroy)
	if err != nil {
		C.ibv_destroy_qp(qp)
		return nil, err
	}
	q.id = id
	return q, nil
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

func (q *QP) obj() string { return fmt.Sprintf("%s QP 0x%x on %s", q.typ, q.num, q.c.name) }

func (q *QP) destroy() error {
	if q.qp == nil {
		return nil
	}
	r, err := C.ibv_destroy_qp(q.qp)
	q.qp = nil
	if r != 0 {
		return &Error{Verb: "ibv_destroy_qp", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// Close destroys the queue pair.
func (q *QP) Close() error {
	q.c.remove(q.id)
	return q.destroy()
}

func (q *QP) alive() error {
	if q.qp == nil {
		return fmt.Errorf("verbs: %s: %w", q.obj(), ErrClosed)
	}
	return nil
}

// Init moves the QP from RESET to INIT on port. For RC, access sets the
// remote operations the QP accepts; for UD, qkey is the queue key.
func (q *QP) Init(port int, access Access, qkey uint32) error {
	if err := q.alive(); err != nil {
		return err
	}
	ud := 0
	if q.typ == QPTypeUD {
		ud = 1
	}
	if r, err := C.rdmad_qp_to_init(q.qp, C.uint8_t(port), 0, C.int(access), C.int(ud), C.uint32_t(qkey)); r != 0 {
		return &Error{Verb: "ibv_modify_qp RESET->INIT", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// ReadyToReceive moves the QP from INIT to RTR. For RC it connects to rem
// over path; for UD both are ignored.
func (q *QP) ReadyToReceive(path Path, rem Remote) error {
	if err := q.alive(); err != nil {
		return err
	}
	ud, global := 0, 0
	if q.typ == QPTypeUD {
		ud = 1
	}
	if path.Global {
		global = 1
	}
	hop := path.HopLimit
	if hop == 0 {
		hop = 64
	}
	dgid := (*C.uint8_t)(C.CBytes(path.RemoteGID[:]))
	defer C.free(unsafe.Pointer(dgid))
	r, err := C.rdmad_qp_to_rtr(q.qp, C.int(ud), C.int(path.MTU), C.uint32_t(rem.QPN), C.uint32_t(rem.PSN),
		C.uint8_t(path.Port), C.int(global), dgid, C.uint8_t(path.GIDIndex), C.uint16_t(path.DLID),
		C.uint8_t(path.SL), C.uint8_t(path.TClass), C.uint8_t(hop), C.uint8_t(max(path.RdAtomic, 1)), 12)
	if r != 0 {
		return &Error{Verb: "ibv_modify_qp INIT->RTR", Object: q.obj(), Err: errnoOf(int(r), err),
			Hint: fmt.Sprintf("check GID index %d and path MTU %d against `rdma link` and the port's GID table", path.GIDIndex, path.MTU.Bytes())}
	}
	return nil
}

// ReadyToSend moves the QP from RTR to RTS with send PSN psn. timeout is the
// local ACK timeout exponent (4.096 us * 2^timeout), retry the transport
// retry count.
func (q *QP) ReadyToSend(psn uint32, timeout, retry uint8) error {
	return q.ReadyToSendReads(psn, timeout, retry, 1)
}

// ReadyToSendReads is ReadyToSend with rdAtomic RDMA READs outstanding at
// once (RC max_rd_atomic, at most the peer's max_dest_rd_atomic; 0 means
// 1); the RNR retry count is infinite (7), so a SEND waits for a receive.
func (q *QP) ReadyToSendReads(psn uint32, timeout, retry, rdAtomic uint8) error {
	if err := q.alive(); err != nil {
		return err
	}
	ud := 0
	if q.typ == QPTypeUD {
		ud = 1
	}
	if r, err := C.rdmad_qp_to_rts(q.qp, C.int(ud), C.uint32_t(psn), C.uint8_t(timeout), C.uint8_t(retry), 7, C.uint8_t(max(rdAtomic, 1))); r != 0 {
		return &Error{Verb: "ibv_modify_qp RTR->RTS", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// SetState moves the QP to state with no other attribute: RESET to recycle
// it, ERR to flush it.
func (q *QP) SetState(state QPState) error {
	if err := q.alive(); err != nil {
		return err
	}
	if r, err := C.rdmad_qp_set_state(q.qp, C.int(state)); r != 0 {
		return &Error{Verb: "ibv_modify_qp ->" + state.String(), Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return nil
}

// State queries the QP's current state.
func (q *QP) State() (QPState, error) {
	if err := q.alive(); err != nil {
		return 0, err
	}
	var s C.int
	if r, err := C.rdmad_qp_state(q.qp, &s); r != 0 {
		return 0, &Error{Verb: "ibv_query_qp", Object: q.obj(), Err: errnoOf(int(r), err)}
	}
	return QPState(s), nil
}

// PostSend posts one send work request.
func (q *QP) PostSend(wr SendWR) error {
	wrs := [1]SendWR{wr}
	_, err := q.PostSendList(wrs[:])
	return err
}

// MaxSendList is the most work requests PostSendList posts with one call
// into the provider; longer lists take several.
const MaxSendList = C.RDMAD_MAX_SEND_LIST

// PostSendList posts wrs in order, chained: one call into the provider and
// one doorbell per MaxSendList requests (on Soft-RoCE a doorbell is a
// system call, and the kernel builds the packets in it). It returns how
// many were posted; on an error the rest were not.
func (q *QP) PostSendList(wrs []SendWR) (int, error) {
	if err := q.alive(); err != nil {
		return 0, err
	}
	done := 0
	for done < len(wrs) {
		var cw [C.RDMAD_MAX_SEND_LIST]C.struct_rdmad_swr
		n := min(len(wrs)-done, len(cw))
		for i, wr := range wrs[done : done+n] {
			cw[i] = cSendWR(wr)
		}
		var posted C.int
		r := C.rdmad_post_send_list(q.qp, &cw[0], C.int(n), &posted)
		done += int(posted)
		if r != 0 {
			return done, &Error{Verb: "ibv_post_send " + wrs[done].Opcode.String(), Object: q.obj(), Err: errnoOf(int(r), nil), Hint: postHint(int(r))}
		}
	}
	return done, nil
}

// cSendWR is wr as rdmad_post_send_list takes it.
func cSendWR(wr SendWR) C.struct_rdmad_swr {
	flags := 0
	if wr.Signaled {
		flags |= C.IBV_SEND_SIGNALED
	}
	if wr.Inline {
		flags |= C.IBV_SEND_INLINE
	}
	var c C.struct_rdmad_swr
	c.id, c.addr, c.len, c.lkey = C.uint64_t(wr.ID), C.uint64_t(wr.SGE.Addr), C.uint32_t(wr.SGE.Length), C.uint32_t(wr.SGE.LKey)
	c.raddr, c.rkey, c.rqpn, c.rqkey = C.uint64_t(wr.RemoteAddr), C.uint32_t(wr.RKey), C.uint32_t(wr.RemoteQPN), C.uint32_t(wr.RemoteQKey)
	c.opcode, c.flags, c.ah = C.int(wr.Opcode), C.int(flags), nil
	if wr.AH != nil {
		c.ah = wr.AH.ah
	}
	return c
}

// PostPoll posts wr and polls cq for want completions for up to spin, in
// one call into C, which reads the clock right before the post and right
// after the last completion: the RTT it returns is what the provider and
// the NIC took, without the Go runtime's cost of entering and leaving C
// for each verb (a probe that times a post and its polls from Go counts
// that cost, which on a busy or emulated host can be larger than the
// operation). It returns the completions polled (into out), the post's
// time on MonoNow's clock, and the RTT when want completions came within
// spin, else 0: the caller then waits for the rest (CQ.PollWait) and
// measures from posted.
func (q *QP) PostPoll(wr SendWR, cq *CQ, out []WorkCompletion, want int, spin time.Duration) (n int, posted int64, rtt time.Duration, err error) {
	if err := q.alive(); err != nil {
		return 0, 0, 0, err
	}
	if cq.cq == nil {
		return 0, 0, 0, fmt.Errorf("verbs: poll CQ of %s: %w", cq.c.name, ErrClosed)
	}
	cw := cSendWR(wr)
	var got C.int
	var t0, t1 C.int64_t
	wcn := min(len(out), cq.wcN)
	r := C.rdmad_post_poll(q.qp, &cw, cq.cq, C.int(want), C.int64_t(spin), cq.wc, C.int(wcn), &got, &t0, &t1)
	switch {
	case r > 0:
		return 0, 0, 0, &Error{Verb: "ibv_post_send " + wr.Opcode.String(), Object: q.obj(), Err: errnoOf(int(r), nil), Hint: postHint(int(r))}
	case r < 0:
		return 0, int64(t0), 0, cq.pollError()
	}
	cq.convert(out, int(got))
	if t1 != 0 {
		rtt = time.Duration(t1 - t0)
	}
	return int(got), int64(t0), rtt, nil
}

// MonoNow returns CLOCK_MONOTONIC in nanoseconds: the clock of PostPoll's
// posted time.
func MonoNow() int64 { return int64(C.rdmad_mono_ns()) }

// PostRecv posts one receive work request.
func (q *QP) PostRecv(id uint64, sge SGE) error {
	if err := q.alive(); err != nil {
		return err
	}
	if r := C.rdmad_post_recv(q.qp, C.uint64_t(id), C.uint64_t(sge.Addr), C.uint32_t(sge.Length), C.uint32_t(sge.LKey)); r != 0 {
		return &Error{Verb: "ibv_post_recv", Object: q.obj(), Err: errnoOf(int(r), nil), Hint: postHint(int(r))}
	}
	return nil
}

func postHint(r int) string {
	switch syscall.Errno(r) {
	case syscall.ENOMEM:
		return "the work queue is full; poll completions before posting more"
	case syscall.EINVAL:
		return "the QP is not in a state that accepts this request (RTS for sends), or the request is malformed"
	}
	return ""
}

// An AH is an address handle for UD sends.
type AH struct {
	c  *Context
	ah *C.struct_ibv_ah
	id uint64
}

// NewAH creates an address handle for path.
func (p *PD) NewAH(path Path) (*AH, error) {
	if err := p.c.usable(); err != nil {
		return nil, err
	}
	global := 0
	if path.Global {
		global = 1
	}
	hop := path.HopLimit
	if hop == 0 {
		hop = 64
	}
	dgid := (*C.uint8_t)(C.CBytes(path.RemoteGID[:]))
	defer C.free(unsafe.Pointer(dgid))
	ah, err := C.rdmad_create_ah(p.pd, C.uint8_t(path.Port), C.int(global), dgid, C.uint8_t(path.GIDIndex),
		C.uint16_t(path.DLID), C.uint8_t(path.SL), C.uint8_t(path.TClass), C.uint8_t(hop))
	if ah == nil {
		return nil, &Error{Verb: "ibv_create_ah", Object: fmt.Sprintf("to %s on %s port %d", path.RemoteGID, p.c.name, path.Port), Err: errnoOf(0, err)}
	}
	a := &AH{c: p.c, ah: ah}
	id, err := p.c.add(a.destroy)
	if err != nil {
		C.ibv_destroy_ah(ah)
		return nil, err
	}
	a.id = id
	return a, nil
}

func (a *AH) destroy() error {
	if a.ah == nil {
		return nil
	}
	r, err := C.ibv_destroy_ah(a.ah)
	a.ah = nil
	if r != 0 {
		return &Error{Verb: "ibv_destroy_ah", Object: a.c.name, Err: errnoOf(int(r), err)}
	}
	return nil
}

// Close destroys the address handle.
func (a *AH) Close() error {
	a.c.remove(a.id)
	return a.destroy()
}

// Linked reports whether this build calls libibverbs (built with cgo). When
// false every entry point reports ErrUnavailable.
func Linked() bool { return true }
