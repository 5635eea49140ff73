package apitype

import (
	"encoding/json"
	"time"
)

// Resources is the answer of GET /v1/resources (rdmactl resources, the
// D-Bus method Resources): the RDMA objects the kernel tracks (its restrack,
// what `rdma resource show qp|cq|mr|pd` reads over RDMA netlink), counted
// per process and per device, with the bytes the memory regions pin.
//
// rdmad reads the kernel on request; nothing of it is kept in the state
// snapshot. Lists are [] in JSON, never null.
type Resources struct {
	// Processes are the owners of the objects, most pinned bytes first.
	// Objects the kernel itself owns are listed under their kernel owner
	// (Kernel true, PID 0, Comm the module such as "ib_core").
	Processes []ProcessResources `json:"processes"`
	// Devices are the RDMA devices with their totals, by name.
	Devices []DeviceResources `json:"devices"`
	// ReadAt is when the kernel was read.
	ReadAt time.Time `json:"read_at"`
	// Error says why the kernel could not be read (no RDMA core loaded, a
	// timeout); the lists are then empty.
	Error string `json:"error,omitempty"`
}

// ResourceCounts are the objects of one owner or device by type, and the
// bytes its memory regions pin (the sum of their lengths).
type ResourceCounts struct {
	QPs         int    `json:"qps"`
	CQs         int    `json:"cqs"`
	MRs         int    `json:"mrs"`
	PDs         int    `json:"pds"`
	PinnedBytes uint64 `json:"pinned_bytes"`
}

// ProcessResources are the objects one process (or kernel owner) holds.
type ProcessResources struct {
	// PID is the process in rdmad's pid namespace; 0 for a kernel owner,
	// and for objects of a process that is exiting (the kernel no longer
	// names it; Comm is then empty). The kernel names the thread that
	// created each object; the reader maps it to its process (its thread
	// group, from /proc/PID/status), or keeps the thread's id when it
	// cannot see the process.
	PID int `json:"pid"`
	// Comm is the process's command name (/proc/PID/comm), or the kernel
	// owner's name. Empty when the process is gone or hidden from the
	// reader (rdmad's sandbox hides other users' processes).
	Comm string `json:"comm"`
	// Kernel reports whether the kernel owns the objects (RDMA netlink's
	// RES_KERN_NAME rather than a pid).
	Kernel bool `json:"kernel"`
	// Devices are the devices the objects are on, by name.
	Devices []string `json:"devices"`
	ResourceCounts
}

// DeviceResources are the objects on one RDMA device.
type DeviceResources struct {
	Device string `json:"device"`
	ResourceCounts
	// Tracked is the kernel's own count of every object type it tracks on
	// the device (RDMA_NLDEV_CMD_RES_GET: pd, cq, qp, cm_id, mr, ctx, srq
	// on Linux 6.1), for the caller's pid namespace.
	Tracked map[string]uint64 `json:"tracked"`
}

// MarshalJSON writes Resources with its lists as [] rather than null.
func (r Resources) MarshalJSON() ([]byte, error) {
	type plain Resources // no methods: no recursion
	return json.Marshal(plain(withLists(r)))
}

// MarshalJSON writes ProcessResources with devices as [] rather than null.
func (p ProcessResources) MarshalJSON() ([]byte, error) {
	type plain ProcessResources // no methods: no recursion
	return json.Marshal(plain(withLists(p)))
}

// MarshalJSON writes DeviceResources with tracked as {} rather than null.
func (d DeviceResources) MarshalJSON() ([]byte, error) {
	type plain DeviceResources // no methods: no recursion
	return json.Marshal(plain(withLists(d)))
}
