// Package verbs is a thin binding of libibverbs: devices, ports and GIDs,
// protection domains, memory regions, completion queues with completion
// channels, RC and UD queue pairs, and asynchronous device events.
//
// The binding links libibverbs.so.1 directly (cgo, -libverbs) rather than
// dlopen-ing it: the Debian package of rdmad depends on libibverbs1 anyway,
// linking lets the C compiler check every call against the installed headers,
// and a missing library is reported by the loader before the daemon starts
// instead of as a half-working daemon. Builds without cgo compile stub.go
// instead, where every entry point returns ErrUnavailable so the daemon
// runs on without verbs; builds with -tags verbsfake (with or without cgo)
// compile the fake NIC of fake*.go, an in-memory fabric with injectable
// faults that the data plane's tests run on (docs/TESTING.md). api_test.go
// keeps the three method sets the same.
//
// Memory handed to the adapter (memory regions) must never be Go heap memory:
// the adapter keeps the address after the call returns, which cgo forbids for
// Go pointers and the garbage collector could move or free. Use AllocBuffer,
// which maps anonymous, page-aligned memory outside the Go heap.
package verbs

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/rdmad/rdmad/internal/gid"
)

// ErrUnavailable is returned (wrapped, with the reason) when verbs cannot be
// used on this machine: built without cgo, no libibverbs, a kernel without
// uverbs, or no RDMA device at all. Callers test for it with errors.Is and
// report verbs as unavailable instead of failing.
var ErrUnavailable = errors.New("verbs unavailable")

// ErrNoDevice is returned (wrapped) by Open when RDMA devices exist but none
// has the requested name, for example after `rdma link del`.
var ErrNoDevice = errors.New("no such RDMA device")

// ErrClosed is returned by operations on a resource after its Close, and by
// waits that were interrupted by Close.
var ErrClosed = errors.New("verbs resource closed")

// An UnavailableError says why verbs are unavailable. It matches
// ErrUnavailable with errors.Is and unwraps to the underlying cause.
type UnavailableError struct {
	Reason string // what was tried and what to do
	Err    error  // cause, e.g. syscall.ENOSYS; may be nil
}

func (e *UnavailableError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("verbs unavailable: %s: %v", e.Reason, e.Err)
	}
	return "verbs unavailable: " + e.Reason
}

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

func (e *UnavailableError) Unwrap() error { return e.Err }

// An Error is a failed verb. Its text names the verb, the object it was
// applied to and the cause, followed by a hint for the operator when one is
// known, e.g. "ibv_reg_mr 1 MiB on rxe0: cannot allocate memory;
// RLIMIT_MEMLOCK is 8 MiB, raise LimitMEMLOCK= in rdmad.service".
type Error struct {
	Verb   string // e.g. "ibv_reg_mr"
	Object string // e.g. "1MiB on rxe0", "QP 0x11 on rxe0"
	Err    error  // usually a syscall.Errno
	Hint   string // what to do next; may be empty
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Verb)
	if e.Object != "" {
		b.WriteString(" ")
		b.WriteString(e.Object)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("failed")
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// errnoOf converts a C return value or errno into an error, defaulting to
// EIO when libibverbs failed without saying why.
func errnoOf(ret int, errno error) error {
	if ret > 0 {
		return syscall.Errno(ret)
	}
	if ret < 0 && -ret < 4096 && ret != -1 {
		return syscall.Errno(-ret)
	}
	if errno != nil {
		return errno
	}
	return syscall.EIO
}

// A PortState is the logical state of a port (enum ibv_port_state).
type PortState int

// Port states, numbered as in libibverbs.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortNop:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", int(s))
}

// An MTU is a path MTU code (enum ibv_mtu): 1=256 ... 5=4096 bytes.
type MTU int

// Bytes returns the MTU in bytes, or 0 for an unknown code.
func (m MTU) Bytes() int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << int(m)
}

func (m MTU) String() string { return fmt.Sprintf("%d", m.Bytes()) }

// A LinkLayer is the port's link layer.
type LinkLayer int

// Link layers, numbered as IBV_LINK_LAYER_*.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "unspecified"
}

// A GIDType says how a GID table entry is used on the wire.
type GIDType int

// GID types, numbered as IBV_GID_TYPE_*.
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", int(t))
}

// A GID is a 128-bit global identifier. It is defined in internal/gid, a
// leaf, so that what only carries GIDs (the probe control plane) does not
// import this binding.
type GID = gid.GID

// A GIDEntry is one valid entry of a port's GID table.
type GIDEntry struct {
	Index   int
	Port    int
	GID     GID
	Type    GIDType
	IfIndex int // netdev of a RoCE GID, 0 for IB
}

// DeviceInfo describes an RDMA device found by Devices, without opening it.
type DeviceInfo struct {
	Name      string // kernel device name, e.g. "rxe0"
	GUID      uint64 // node GUID in host order
	NodeType  string // "CA", "RNIC", ...
	UverbsDev string // e.g. "uverbs0"
	DevPath   string // sysfs path of the uverbs class device
}

// DeviceAttr is the subset of ibv_device_attr rdmad reports and sizes by.
type DeviceAttr struct {
	FirmwareVersion string
	NodeGUID        uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVersion       uint32
	PhysPortCount   int
	MaxMRSize       uint64
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
}

// PortAttr is the subset of ibv_port_attr rdmad reports and connects by.
type PortAttr struct {
	State       PortState
	MaxMTU      MTU
	ActiveMTU   MTU
	GIDTableLen int
	LID         uint16
	LinkLayer   LinkLayer
	ActiveSpeed uint8
	ActiveWidth uint8
	PhysState   uint8
}

// Access is a set of memory-region and QP access flags (IBV_ACCESS_*).
type Access int

// Access flags, as in libibverbs.
const (
	AccessLocalWrite   Access = 1
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
)

// A QPType selects the transport of a queue pair.
type QPType int

// Queue pair types, numbered as IBV_QPT_*.
const (
	QPTypeRC QPType = 2
	QPTypeUD QPType = 4
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", int(t))
}

// A QPState is a queue pair state (enum ibv_qp_state).
type QPState int

// Queue pair states, numbered as IBV_QPS_*.
const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateSQD   QPState = 4
	QPStateSQE   QPState = 5
	QPStateErr   QPState = 6
)

func (s QPState) String() string {
	switch s {
	case QPStateReset:
		return "RESET"
	case QPStateInit:
		return "INIT"
	case QPStateRTR:
		return "RTR"
	case QPStateRTS:
		return "RTS"
	case QPStateSQD:
		return "SQD"
	case QPStateSQE:
		return "SQE"
	case QPStateErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", int(s))
}

// An Opcode is a send work request opcode (enum ibv_wr_opcode).
type Opcode int

// Send opcodes used by rdmad, numbered as IBV_WR_*.
const (
	OpRDMAWrite Opcode = 0
	OpSend      Opcode = 2
	OpRDMARead  Opcode = 4
)

func (o Opcode) String() string {
	switch o {
	case OpRDMAWrite:
		return "write"
	case OpSend:
		return "send"
	case OpRDMARead:
		return "read"
	}
	return fmt.Sprintf("Opcode(%d)", int(o))
}

// A WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus int

// WCSuccess is the status of a successful completion; WCFlushErr is the
// status of work flushed from a QP in the error state.
const (
	WCSuccess  WCStatus = 0
	WCFlushErr WCStatus = 5
)

// WCOpcode values of a work completion (enum ibv_wc_opcode).
const (
	WCOpSend      = 0
	WCOpRDMAWrite = 1
	WCOpRDMARead  = 2
	WCOpRecv      = 1 << 7
)

// WCGRH is IBV_WC_GRH in WorkCompletion.Flags: a UD receive found a GRH
// (or, on RoCE v2 over IPv4, the IPv4 header in its last 20 bytes) in the
// first 40 bytes of its buffer. cverbs_cq.go checks the value against verbs.h.
const WCGRH = 1

// A WorkCompletion is one polled completion.
type WorkCompletion struct {
	WRID    uint64
	Status  WCStatus
	Opcode  int
	ByteLen uint32
	QPNum   uint32
	SrcQP   uint32
	VendErr uint32
	// Flags is the completion's wc_flags (WCGRH, ...).
	Flags uint32
	// StatusText is ibv_wc_status_str(Status).
	StatusText string
}

// Err returns nil for a successful completion and a descriptive error
// otherwise.
func (wc WorkCompletion) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{Status: wc.Status, Text: wc.StatusText, WRID: wc.WRID, VendErr: wc.VendErr}
}

// A WCError is a work completion with an error status.
type WCError struct {
	Status  WCStatus
	Text    string
	WRID    uint64
	VendErr uint32
}

func (e *WCError) Error() string {
	return fmt.Sprintf("work completion %d: %s (status %d, vendor error 0x%x)", e.WRID, e.Text, int(e.Status), e.VendErr)
}

// An SGE is a scatter/gather element: a range of a registered memory region.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// A SendWR is a send work request. For RDMA READ/WRITE, RemoteAddr and RKey
// name the peer's memory; for UD sends, AH, RemoteQPN and RemoteQKey name
// the destination.
type SendWR struct {
	ID         uint64
	Opcode     Opcode
	SGE        SGE
	RemoteAddr uint64
	RKey       uint32
	Signaled   bool
	Inline     bool
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// An AsyncEventType is the type of an asynchronous device event
// (enum ibv_event_type).
type AsyncEventType int

// Asynchronous event types, numbered as IBV_EVENT_*.
const (
	EventCQErr            AsyncEventType = 0
	EventQPFatal          AsyncEventType = 1
	EventQPReqErr         AsyncEventType = 2
	EventQPAccessErr      AsyncEventType = 3
	EventCommEst          AsyncEventType = 4
	EventSQDrained        AsyncEventType = 5
	EventPathMig          AsyncEventType = 6
	EventPathMigErr       AsyncEventType = 7
	EventDeviceFatal      AsyncEventType = 8
	EventPortActive       AsyncEventType = 9
	EventPortErr          AsyncEventType = 10
	EventLIDChange        AsyncEventType = 11
	EventPKeyChange       AsyncEventType = 12
	EventSMChange         AsyncEventType = 13
	EventSRQErr           AsyncEventType = 14
	EventSRQLimitReached  AsyncEventType = 15
	EventQPLastWQEReached AsyncEventType = 16
	EventClientReregister AsyncEventType = 17
	EventGIDChange        AsyncEventType = 18
	EventWQFatal          AsyncEventType = 19
)

var asyncEventNames = map[AsyncEventType]string{
	EventCQErr: "CQ_ERR", EventQPFatal: "QP_FATAL", EventQPReqErr: "QP_REQ_ERR",
	EventQPAccessErr: "QP_ACCESS_ERR", EventCommEst: "COMM_EST", EventSQDrained: "SQ_DRAINED",
	EventPathMig: "PATH_MIG", EventPathMigErr: "PATH_MIG_ERR", EventDeviceFatal: "DEVICE_FATAL",
	EventPortActive: "PORT_ACTIVE", EventPortErr: "PORT_ERR", EventLIDChange: "LID_CHANGE",
	EventPKeyChange: "PKEY_CHANGE", EventSMChange: "SM_CHANGE", EventSRQErr: "SRQ_ERR",
	EventSRQLimitReached: "SRQ_LIMIT_REACHED", EventQPLastWQEReached: "QP_LAST_WQE_REACHED",
	EventClientReregister: "CLIENT_REREGISTER", EventGIDChange: "GID_CHANGE", EventWQFatal: "WQ_FATAL",
}

func (t AsyncEventType) String() string {
	if s, ok := asyncEventNames[t]; ok {
		return s
	}
	return fmt.Sprintf("AsyncEventType(%d)", int(t))
}

// An AsyncEvent is one asynchronous event of a device. Port is set for port
// events, QPNum for QP events; Device is the device's name.
type AsyncEvent struct {
	Device string
	Type   AsyncEventType
	Port   int
	QPNum  uint32
}

// IsPortEvent reports whether the event concerns a port (Port is valid).
func (e AsyncEvent) IsPortEvent() bool {
	switch e.Type {
	case EventPortActive, EventPortErr, EventLIDChange, EventPKeyChange, EventSMChange,
		EventClientReregister, EventGIDChange:
		return true
	}
	return false
}

func (e AsyncEvent) String() string {
	switch {
	case e.IsPortEvent():
		return fmt.Sprintf("%s port %d: %s", e.Device, e.Port, e.Type)
	case e.Type >= EventQPFatal && e.Type <= EventPathMigErr, e.Type == EventQPLastWQEReached:
		return fmt.Sprintf("%s QP 0x%x: %s", e.Device, e.QPNum, e.Type)
	}
	return fmt.Sprintf("%s: %s", e.Device, e.Type)
}
