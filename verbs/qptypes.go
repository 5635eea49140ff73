package verbs

// QPConfig sizes a new queue pair.
type QPConfig struct {
	Type      QPType
	SendCQ    *CQ
	RecvCQ    *CQ
	MaxSendWR int
	MaxRecvWR int
	MaxSGE    int
	MaxInline int
}

// Path is where a QP sends: the local port and GID and the remote end.
type Path struct {
	Port      int
	GIDIndex  int    // local (source) GID index; RoCE needs a GID
	Global    bool   // use a GRH (always for RoCE)
	MTU       MTU    // path MTU, at most the port's active MTU
	DLID      uint16 // IB only
	SL        uint8
	TClass    uint8 // traffic class (RoCE: DSCP<<2 | ECN)
	HopLimit  uint8
	RemoteGID GID
	// FlowLabel is the GRH flow label (20 bits) of an address handle. On
	// RoCE v2 the UDP source port of a UD send comes from it on mlx5 and
	// hns (ibv_flow_label_to_udp_sport; without one they pick a random
	// port per handle), so that it decides the packet's ECMP path there;
	// rxe takes the port from the QP instead. 0: none.
	FlowLabel uint32
	// RdAtomic is how many RDMA READs the QP answers at once (RC
	// max_dest_rd_atomic); 0 means 1. A bandwidth test raises it.
	RdAtomic uint8
}

// Remote identifies the peer QP of an RC connection.
type Remote struct {
	QPN uint32
	PSN uint32
}
