//go:build linux && verbsfake

package verbs

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The fake NIC's control: what a test sets up and the faults it injects.
// These exist only in the verbsfake build, so no production binary has
// them. The fabric is process-wide: tests that use it must not run in
// parallel with each other, and call FakeReset when done.

// A FakeDevice describes a device to add to the fake NIC.
type FakeDevice struct {
	Name string
	// Ports; nil is one ACTIVE RoCE port with rxe's GID table.
	Ports []FakePort
}

// A FakePort describes a port of a FakeDevice. Zero fields take defaults.
type FakePort struct {
	State     PortState // default ACTIVE
	LinkLayer LinkLayer // default Ethernet (RoCE)
	ActiveMTU MTU       // default 1024 bytes (3)
	LID       uint16    // InfiniBand only
	// GIDs is the GID table; nil gives rxe's: RoCE v1 and v2 entries of
	// a link-local address (indices 0 and 1) and of an IPv4 address
	// (indices 2 and 3, ::ffff:10.<device>.<port>.1; PickGID takes 3),
	// or for InfiniBand one link-local IB GID.
	GIDs []GIDEntry
}

// ErrFakeNoDevice is returned by the Fake* functions for a device name that
// is not present.
var ErrFakeNoDevice = errors.New("fake NIC: no such device")

// FakeAddDevice adds a device; Devices lists it and Open opens it. A name
// that was removed may be added again: that is a new device, and the old
// one's contexts stay on the old one.
func FakeAddDevice(d FakeDevice) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if d.Name == "" {
		return errors.New("fake NIC: add a device: the name is empty")
	}
	if fab.devs[d.Name] != nil {
		return fmt.Errorf("fake NIC: add %s: a device of that name is present", d.Name)
	}
	fab.seq++
	n := fab.seq
	ports := d.Ports
	if len(ports) == 0 {
		ports = []FakePort{{}}
	}
	dev := &fdev{name: d.Name, guid: 0x0200_5eff_fe00_0000 | n<<8, qps: map[uint32]*QP{}, mrs: map[uint32]*MR{}, ctxs: map[*Context]bool{}}
	for i, p := range ports {
		fp := &fport{attr: PortAttr{State: p.State, MaxMTU: 5, ActiveMTU: p.ActiveMTU, LID: p.LID, LinkLayer: p.LinkLayer,
			ActiveSpeed: 1, ActiveWidth: 1, PhysState: 5}, gids: slices.Clone(p.GIDs)}
		if fp.attr.State == 0 {
			fp.attr.State = PortActive
		}
		if fp.attr.LinkLayer == 0 {
			fp.attr.LinkLayer = LinkLayerEthernet
		}
		if fp.attr.ActiveMTU == 0 {
			fp.attr.ActiveMTU = 3
		}
		if fp.gids == nil {
			fp.gids = defaultGIDs(fp.attr.LinkLayer, n, i+1)
		}
		for k := range fp.gids {
			fp.gids[k].Port = i + 1
		}
		fp.attr.GIDTableLen = 16
		dev.ports = append(dev.ports, fp)
	}
	fab.devs[d.Name] = dev
	return nil
}

func defaultGIDs(ll LinkLayer, dev uint64, port int) []GIDEntry {
	var ll6, v4 GID
	ll6[0], ll6[1] = 0xfe, 0x80
	ll6[13], ll6[14], ll6[15] = byte(dev>>8), byte(dev), byte(port)
	if ll == LinkLayerInfiniBand {
		return []GIDEntry{{Index: 0, GID: ll6, Type: GIDTypeIB}}
	}
	v4[10], v4[11], v4[12], v4[13], v4[14], v4[15] = 0xff, 0xff, 10, byte(dev), byte(port), 1
	return []GIDEntry{
		{Index: 0, GID: ll6, Type: GIDTypeRoCEv1, IfIndex: 2},
		{Index: 1, GID: ll6, Type: GIDTypeRoCEv2, IfIndex: 2},
		{Index: 2, GID: v4, Type: GIDTypeRoCEv1, IfIndex: 2},
		{Index: 3, GID: v4, Type: GIDTypeRoCEv2, IfIndex: 2},
	}
}

// dev returns the present device name. Called with fab.mu held.
func fakeDev(name string) (*fdev, error) {
	d := fab.devs[name]
	if d == nil {
		return nil, fmt.Errorf("%w: %s", ErrFakeNoDevice, name)
	}
	return d, nil
}

// FakeRemoveDevice makes the device vanish, as `rdma link del` of an rxe
// device does: Devices no longer lists it, Open fails with ErrNoDevice,
// its contexts' Alive reports false and packets no longer reach it, but
// open contexts keep working until closed (rxe does not disassociate, and
// sends no event).
func FakeRemoveDevice(name string) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return err
	}
	d.gone = true
	delete(fab.devs, name)
	return nil
}

// FakeDeviceFatal makes the device fail as an adapter that disassociates:
// every open context gets DEVICE_FATAL, every QP goes to ERR (flushing its
// work) and every later verb on it fails with EIO. The device stays listed.
func FakeDeviceFatal(name string) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return err
	}
	d.fatal = true
	for _, q := range d.qps {
		q.toErr()
	}
	for c := range d.ctxs {
		c.event(AsyncEvent{Type: EventDeviceFatal})
	}
	return nil
}

// FakeSetPortState sets a port's state and sends PORT_ACTIVE (for ACTIVE)
// or PORT_ERR (for any other state) to the device's contexts. Packets
// neither leave nor reach a port that is not ACTIVE.
func FakeSetPortState(name string, port int, st PortState) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return err
	}
	p := d.port(port)
	if p == nil {
		return fmt.Errorf("fake NIC: %s has no port %d", name, port)
	}
	p.attr.State = st
	ev := AsyncEvent{Type: EventPortErr, Port: port}
	if st == PortActive {
		ev.Type = EventPortActive
	}
	for c := range d.ctxs {
		c.event(ev)
	}
	return nil
}

// FakeSetGIDs replaces a port's GID table and sends GID_CHANGE to the
// device's contexts, as the kernel does when an address's GIDs are added
// or deleted (rxe's come back a moment after its port is ACTIVE again).
func FakeSetGIDs(name string, port int, gids []GIDEntry) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return err
	}
	p := d.port(port)
	if p == nil {
		return fmt.Errorf("fake NIC: %s has no port %d", name, port)
	}
	p.gids = slices.Clone(gids)
	for k := range p.gids {
		p.gids[k].Port = port
	}
	for c := range d.ctxs {
		c.event(AsyncEvent{Type: EventGIDChange, Port: port})
	}
	return nil
}

// FakeGIDs returns a port's GID table.
func FakeGIDs(name string, port int) ([]GIDEntry, error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return nil, err
	}
	p := d.port(port)
	if p == nil {
		return nil, fmt.Errorf("fake NIC: %s has no port %d", name, port)
	}
	return slices.Clone(p.gids), nil
}

// FakeFailWork makes the next n send work requests that execute on the
// device's QPs complete with status instead (moving no data), which moves
// their QP to ERR as an error completion does.
func FakeFailWork(name string, n int, status WCStatus) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return err
	}
	d.failN, d.failStatus = n, status
	return nil
}

// FakeBlockPost makes every post of a send (ibv_post_send) on the QPs of
// the device's port block until the function it returns is called, as
// rxe's does while it retries a send the kernel dropped (the caller's
// thread runs rxe's requester). Posts already running finish; other
// ports and devices are untouched. FakeReset releases every block.
func FakeBlockPost(name string, port int) (release func(), err error) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return nil, err
	}
	if d.port(port) == nil {
		return nil, fmt.Errorf("fake NIC: %s has no port %d", name, port)
	}
	if d.postBlock[port] != nil {
		return nil, fmt.Errorf("fake NIC: the posts of %s port %d are blocked already", name, port)
	}
	if d.postBlock == nil {
		d.postBlock = map[int]chan struct{}{}
	}
	b := make(chan struct{})
	d.postBlock[port] = b
	return func() {
		// Whoever takes the block out of the table closes it: this,
		// once, or FakeReset.
		fab.mu.Lock()
		defer fab.mu.Unlock()
		if d.postBlock[port] == b {
			delete(d.postBlock, port)
			close(b)
		}
	}, nil
}

// FakeQPs returns the numbers of the device's QPs, sorted.
func FakeQPs(name string) []uint32 {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d := fab.devs[name]
	if d == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(d.qps))
}

// FakeQPError moves a QP to ERR as a QP fatal error does: its work is
// flushed and its context gets QP_FATAL.
func FakeQPError(name string, qpn uint32) error {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	d, err := fakeDev(name)
	if err != nil {
		return err
	}
	q := d.qps[qpn]
	if q == nil {
		return fmt.Errorf("fake NIC: %s has no QP 0x%x", name, qpn)
	}
	q.toErr()
	q.c.event(AsyncEvent{Type: EventQPFatal, QPNum: qpn})
	return nil
}

// FakeDrop makes packets to gid get lost (on) or arrive again (off): UD
// sends to it vanish, RC requests to it are retried and fail with
// "transport retry counter exceeded" after the QP's retries, unless the
// drop ends first.
func FakeDrop(gid GID, on bool) {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	if on {
		fab.drop[gid] = true
	} else {
		delete(fab.drop, gid)
	}
}

// FakeLive returns how many objects of each kind (context, pd, mr,
// channel, cq, qp, ah) are alive, leaving out kinds with none: a test
// checks that everything it made was freed.
func FakeLive() map[string]int {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	out := map[string]int{}
	for k, v := range fab.live {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// FakeBytesMoved returns how many bytes RC WRITEs, READs and SENDs have
// copied between memory regions since the process started.
func FakeBytesMoved() uint64 {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	return fab.moved
}

// A FakeUDSend is one UD send as posted: the QP it went from, the QP it
// goes to, and the address handle it named with the handle's attributes
// (what a NIC builds the packet's GRH and, on RoCE v2 for mlx5, the UDP
// source port from).
type FakeUDSend struct {
	Device    string
	QPN       uint32
	RemoteQPN uint32
	AH        uint64 // the handle's identity
	RemoteGID GID
	FlowLabel uint32
}

// FakeRecordUDSends starts recording the UD sends posted from now on and
// returns a function that stops and returns them.
func FakeRecordUDSends() func() []FakeUDSend {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	rec := []FakeUDSend{}
	fab.udSends = &rec
	return func() []FakeUDSend {
		fab.mu.Lock()
		defer fab.mu.Unlock()
		if fab.udSends == &rec {
			fab.udSends = nil
		}
		return rec
	}
}

// FakeReset removes every device (as FakeRemoveDevice) and every drop.
// Objects still open stay open (FakeLive counts them).
func FakeReset() {
	fab.mu.Lock()
	defer fab.mu.Unlock()
	for name, d := range fab.devs {
		d.gone = true
		for port, b := range d.postBlock {
			delete(d.postBlock, port)
			close(b)
		}
		delete(fab.devs, name)
	}
	clear(fab.drop)
}
