package apitype

// A Device is one RDMA device (ibv_device) and its ports.
type Device struct {
	Name         string `json:"name"`
	NodeType     string `json:"node_type"`
	NodeGUID     string `json:"node_guid"`
	SysImageGUID string `json:"sys_image_guid,omitempty"`
	FWVer        string `json:"fw_ver,omitempty"`
	HCAType      string `json:"hca_type,omitempty"`
	BoardID      string `json:"board_id,omitempty"`
	// Parent is the bus device (a PCI address) or "" for software devices
	// such as rxe.
	Parent string `json:"parent,omitempty"`
	// PCI is the PCI function the device is on ("0000:17:00.0"): Parent
	// for a device on a PCI function, the function above an auxiliary
	// device (irdma on ice); "" for software devices.
	PCI string `json:"pci,omitempty"`
	// Uverbs is the verbs character device ("/dev/infiniband/uverbs0"), or
	// "" when the kernel exposes none (ib_uverbs not loaded).
	Uverbs string `json:"uverbs,omitempty"`
	// PCIe is the link of the device's PCI function (nil for software
	// devices and where sysfs does not say).
	PCIe  *PCIeLink `json:"pcie,omitempty"`
	Ports []Port    `json:"ports"`
}

// A Port is one port of a Device.
type Port struct {
	Port      int    `json:"port"`
	State     string `json:"state"`      // DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER
	PhysState string `json:"phys_state"` // Polling, LinkUp, Disabled, ...
	LinkLayer string `json:"link_layer"` // InfiniBand or Ethernet
	Rate      string `json:"rate,omitempty"`
	// RateGbps is Rate's number, for metrics.
	RateGbps float64 `json:"rate_gbps,omitempty"`
	// Width is the link width from Rate ("4X"), "" when it does not say.
	Width string `json:"width,omitempty"`
	// NetdevSpeedMbps is the port's netdev's speed (RoCE), 0 unknown.
	NetdevSpeedMbps int `json:"netdev_speed_mbps,omitempty"`
	// Transitions counts the port's changes into and out of ACTIVE that
	// rdmad saw since it first saw the port, kept across restarts in its
	// state directory (docs/HEALTH.md, "Port flapping").
	Transitions uint64 `json:"state_transitions"`
	LID         int    `json:"lid,omitempty"`
	SMLID       int    `json:"sm_lid,omitempty"`
	// Netdev is the port's network device: the RoCE netdev from the GID
	// table, or the IPoIB interface of an InfiniBand port.
	Netdev     string            `json:"netdev,omitempty"`
	GIDs       []GID             `json:"gids"`
	Counters   map[string]uint64 `json:"counters,omitempty"`
	HWCounters map[string]uint64 `json:"hw_counters,omitempty"`
}

// A GID is one populated entry of a port's GID table.
type GID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	// Type is "IB", "RoCE v1" or "RoCE v2".
	Type   string `json:"type"`
	Netdev string `json:"netdev,omitempty"`
}

// A PCIFunction is a PCI function of an RDMA adapter that has no RDMA
// device: the adapter or its driver failed (mlx5_core probed, mlx5_ib did
// not create the device; or no driver took the function).
type PCIFunction struct {
	Address string `json:"address"` // "0000:17:00.0"
	Vendor  string `json:"vendor"`  // "0x15b3"
	Device  string `json:"device"`  // "0x101b"
	Class   string `json:"class"`   // "0x020700"
	// Driver is the bound driver ("mlx5_core"), "" when none is bound.
	Driver string `json:"driver,omitempty"`
}

// Describe names f and its driver for a message: "0000:17:00.0
// (0x15b3:0x1021, driver mlx5_core)".
func (f PCIFunction) Describe() string {
	drv := "no driver bound"
	if f.Driver != "" {
		drv = "driver " + f.Driver
	}
	return f.Address + " (" + f.Vendor + ":" + f.Device + ", " + drv + ")"
}
