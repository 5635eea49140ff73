//go:build linux && cgo && !verbsfake

package verbs

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <errno.h>
#include <fcntl.h>

// The functions below wrap libibverbs entry points that are static inline
// functions or macros (not callable from cgo) and build work requests on
// the C stack, so no Go pointer is ever kept by C.

static int rdmad_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
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

static struct ibv_device *rdmad_dev_at(struct ibv_device **l, int i) { return l[i]; }
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

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
	fns := newestFirst(c.children)
	c.children = nil
	c.mu.Unlock()

	errs := closeAll(fns)
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
