// Package bw runs RC bandwidth tests between two rdmad nodes, on demand
// (rdmactl bw): the requester connects an RC queue pair to one the peer
// sets up for the test, keeps a window of work requests of one size
// outstanding for the test's duration, busy-polling its completion queue,
// and reports Gb/s and messages per second, as ib_write_bw does.
//
// The two nodes agree over the control endpoint (probe, message
// types wire.TypeBWRequest, TypeBWAnswer and TypeBWDone). The responder
// side (Node.Handle) is reached only after the control endpoint admitted
// the request (an allowed source, within its rate, with a fleet key only
// when authenticated); it allocates nothing unless bandwidth tests are
// enabled ([probe] bandwidth), no other test runs on the node and the
// parameters are within bounds. Its queue pair is connected to the
// requester's alone and it never sends data itself: for WRITE and SEND
// the requester sends, for READ the responder's adapter answers reads of
// the test's own buffer. The responder tears its side down when the
// requester says it is done, or when the duration and wire.BWGrace have
// passed, whatever the requester does.
//
// A node runs one test at a time, as requester or responder: a bandwidth
// test is meant to fill the link, and two at once would measure neither.
package bw

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/throttle"
	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs"
)

// Defaults of a test.
const (
	DefaultSize     = 65536
	DefaultDuration = 5 * time.Second
	// Depth is the work requests a requester keeps outstanding (like
	// ib_write_bw's default tx depth of 128).
	Depth = 128
	// recvDepth is the receives a SEND test's responder keeps posted.
	recvDepth = 512
	// maxRdAtomic bounds the RDMA READs outstanding at once (ib_read_bw
	// uses the device's maximum; rxe allows 128).
	maxRdAtomic = 16
)

// Config configures a Node.
type Config struct {
	// NodeID is sent in the node's bandwidth messages.
	NodeID uint64
	// TrafficClass, if set, gives the GRH traffic class of a test's QP
	// on dev's port (as the probes use); nil: 0.
	TrafficClass func(dev string, port int) uint8
	// OnChange, if set, is called (without the node's lock held) after
	// Status changed: a request answered, a test run, SetEnabled.
	OnChange func()
	Logger   *slog.Logger
	// Slot, if set, is the test slot the node shares with others (the
	// daemon's loopback tests and its peer runner's): one test at a time
	// between all of them. Nil: a slot of the node's own.
	Slot *Slot
	// PeerPorts, if set, returns the RDMA ports the peer whose control
	// address is addr announced to this node in answers to its queries
	// (nil: none known). On InfiniBand a test connects only to one of
	// them (checkAddress).
	PeerPorts func(addr netip.Addr) []PeerPort
}

// A PeerPort is an RDMA port a peer announced: its GID and LID.
type PeerPort struct {
	GID [16]byte
	LID uint16
}

// errBadAddress is a request's or an answer's RDMA address that is not
// the control address's own.
var errBadAddress = errors.New("bw: the RDMA address is not the peer's own")

// roceGID reports whether gid is addr's RoCE v2 GID: its IPv4-mapped form
// for IPv4, the address itself for IPv6.
func roceGID(addr netip.Addr, gid [16]byte) bool {
	addr = addr.Unmap()
	return addr.IsValid() && addr.WithZone("").As16() == gid
}

// knownPort reports whether gid and lid are a port the peer at addr
// announced (Config.PeerPorts).
func (n *Node) knownPort(addr netip.Addr, gid [16]byte, lid uint16) bool {
	if n.cfg.PeerPorts == nil {
		return false
	}
	for _, p := range n.cfg.PeerPorts(addr.Unmap()) {
		if p.GID == gid && p.LID == lid {
			return true
		}
	}
	return false
}

// checkAddress judges the RDMA address (GID, and LID on InfiniBand) a test
// with the peer at control address addr would connect a QP to, on a local
// port of link layer ib or RoCE. The test moves up to 1 MiB per message
// towards that address (an RDMA READ's responses, or the requester's
// writes), so an address that is not the peer's own would let an allowed
// peer, or a spoofer of its address, aim a node's traffic at a third host
// (a 10^4-fold amplification of its control messages). On RoCE the GID
// must be addr's own (the GID of the IP address the control messages come
// from or go to); on InfiniBand, where no GID or LID can be told from an
// IP address, a port the peer announced in an answer to this node's query
// (unknown: refused). ib is nil before a port is chosen: then either is
// taken, and the check is made again once the port's link layer is known.
func (n *Node) checkAddress(addr netip.Addr, gid [16]byte, lid uint16, ib *bool) error {
	roce, known := roceGID(addr, gid), false
	if ib == nil || *ib {
		known = n.knownPort(addr, gid, lid)
	}
	switch {
	case ib == nil && (roce || known):
		return nil
	case ib != nil && !*ib && roce:
		return nil
	case ib != nil && *ib && known:
		return nil
	}
	g := netip.AddrFrom16(gid)
	if ib != nil && *ib {
		return fmt.Errorf("%w: %s named GID %s LID %d, not a port it announced in its control answers (InfiniBand: only those are taken)", errBadAddress, addr, g, lid)
	}
	return fmt.Errorf("%w: %s named GID %s, not its own address's GID %s", errBadAddress, addr, g, netip.AddrFrom16(addr.Unmap().As16()))
}

// A Node is one node's bandwidth tests, as requester and responder. Its
// zero value is not usable; use New.
type Node struct {
	cfg Config
	log *slog.Logger

	// slot is the node's one test slot (Config.Slot).
	slot *Slot

	mu      sync.Mutex
	enabled bool
	// resp is the test this node serves as responder, nil when none.
	resp   *session
	closed bool
	// ending counts the endResponder calls tearing a session down; Close
	// waits for them.
	ending sync.WaitGroup
	stats  Stats
	// seen holds the nonces of authenticated requests until their time
	// is out of wire.MaxBWSkew (responder.go, fresh); now, if set, is the
	// clock (tests).
	seen map[uint64]time.Time
	now  func() time.Time
	// badAddrLog bounds the log lines of refusals for the RDMA address.
	badAddrLog *throttle.Log[netip.Addr]
}

// Stats count a node's bandwidth tests.
type Stats struct {
	// Served counts the tests this node accepted as responder; Refused
	// the requests it refused, by status (disabled, busy, bad request,
	// unavailable).
	Served  uint64
	Refused map[string]uint64
	// Last is the last test this node ran as requester (nil: none yet).
	Last *apitype.BandwidthResult
	// Loopback is the last loopback test of each port ("rxe0/1") that
	// ran to its end.
	Loopback map[string]apitype.BandwidthResult
}

// New returns a Node with bandwidth tests disabled as responder.
func New(cfg Config) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	slot := cfg.Slot
	if slot == nil {
		slot = NewSlot()
	}
	return &Node{cfg: cfg, log: cfg.Logger, slot: slot, stats: Stats{Refused: map[string]uint64{}}, badAddrLog: throttle.NewLog[netip.Addr](10 * time.Second)}
}

// SetEnabled switches answering other nodes' tests on or off ([probe]
// bandwidth). A test in progress runs to its end.
func (n *Node) SetEnabled(on bool) {
	n.mu.Lock()
	n.enabled = on
	n.mu.Unlock()
	n.notify()
}

func (n *Node) notify() {
	if n.cfg.OnChange != nil {
		n.cfg.OnChange()
	}
}

// Status returns the node's part of the status.
func (n *Node) Status() apitype.BandwidthStatus {
	s := n.Stats()
	st := apitype.BandwidthStatus{Enabled: n.Enabled(), Served: s.Served, Refused: s.Refused, Last: s.Last}
	for _, k := range slices.Sorted(maps.Keys(s.Loopback)) {
		st.Loopback = append(st.Loopback, s.Loopback[k])
	}
	return st
}

// Enabled reports whether the node answers other nodes' tests.
func (n *Node) Enabled() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.enabled
}

// Stats returns the counters and the last result.
func (n *Node) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.stats
	s.Refused = make(map[string]uint64, len(n.stats.Refused))
	for k, v := range n.stats.Refused {
		s.Refused[k] = v
	}
	if s.Last != nil {
		l := *s.Last
		s.Last = &l
	}
	if s.Loopback != nil {
		s.Loopback = maps.Clone(s.Loopback)
	}
	return s
}

// Close tears down a test the node serves and refuses every later one.
func (n *Node) Close() {
	n.mu.Lock()
	n.closed = true
	s := n.resp
	n.mu.Unlock()
	if s != nil {
		n.endResponder(s, "rdmad is stopping")
	}
	// A session the timer or the requester claimed before Close took
	// the lock is being torn down on their goroutine: its QP, memory
	// and device are free when Close returns.
	n.ending.Wait()
}

// acquire takes the node's test slot for what, or says what holds it.
func (n *Node) acquire(what string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("bw: rdmad is stopping")
	}
	return n.slot.take(what)
}

func (n *Node) release() { n.slot.free() }

// A Slot is the one bandwidth test a node runs at a time, as requester,
// responder or of its own ports (loopback): a test is meant to fill the
// link or the adapter, and two at once would measure neither. Nodes made
// with the same Slot share it. Its zero value is not usable; use NewSlot.
type Slot struct {
	mu sync.Mutex
	// what says what holds the slot ("" when free).
	what string
}

// NewSlot returns a free slot.
func NewSlot() *Slot { return &Slot{} }

// take takes s for what, or says what holds it. A Node calls it with or
// without its own lock held; s never calls out while holding its lock.
func (s *Slot) take(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.what != "" {
		return &BusyError{What: s.what}
	}
	s.what = what
	return nil
}

func (s *Slot) free() {
	s.mu.Lock()
	s.what = ""
	s.mu.Unlock()
}

// Holder says what holds s ("" when free).
func (s *Slot) Holder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.what
}

// A BusyError says the node's one test slot is taken.
type BusyError struct{ What string }

func (e *BusyError) Error() string {
	return fmt.Sprintf("bw: %s runs on this node already (one bandwidth test at a time); try again when it ends", e.What)
}

// A RefusedError is a peer's refusal of a test.
type RefusedError struct {
	Peer   netip.AddrPort
	Status wire.BWStatus
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("bw: %s refused the bandwidth test: %s", e.Peer.Addr(), e.Status.Reason())
}

// CheckParams checks a test's parameters against the bounds every
// responder applies (wire.MaxBWSize, wire.MinBWDuration, MaxBWDuration),
// with an error that names the bad one and the bounds.
func CheckParams(size int, d time.Duration) error {
	if size < 1 || size > wire.MaxBWSize {
		return fmt.Errorf("size %d bytes is out of range; use 1 to %d (1 MiB), e.g. 65536", size, wire.MaxBWSize)
	}
	if d < wire.MinBWDuration || d > wire.MaxBWDuration {
		return fmt.Errorf("duration %s is out of range; use %s to %s, e.g. 5s", d, wire.MinBWDuration, wire.MaxBWDuration)
	}
	if d%time.Millisecond != 0 {
		return fmt.Errorf("duration %s is finer than a millisecond; use whole milliseconds, e.g. 5s or 2500ms", d)
	}
	return nil
}

// randPSN returns a random 24-bit packet sequence number.
func randPSN() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:]) & 0xffffff
}

func randNonce() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

// A port is the local end of a test: an open device, one of its ACTIVE
// ports and the GID to use there.
type port struct {
	vctx *verbs.Context
	num  int
	attr verbs.PortAttr
	dev  verbs.DeviceAttr
	gid  verbs.GIDEntry
	// shared marks a port whose context several qpSets use (the lanes
	// of a loopback test): their close leaves it open, and its opener
	// closes it.
	shared bool
}

func (p *port) key() string { return fmt.Sprintf("%s/%d", p.vctx.Name(), p.num) }

// openPort opens the first device (by name) with an ACTIVE port that has a
// usable GID. The caller closes p.vctx, which frees everything made on it.
func openPort() (*port, error) {
	devs, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, d := range devs {
		p, err := openDevicePort(d.Name, 0)
		if err == nil {
			return p, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("bw: no ACTIVE RDMA port with a usable GID: %w", errors.Join(errs...))
}

// openDevicePort opens device name at its port want, or at its first
// ACTIVE port with a usable GID when want is 0.
func openDevicePort(name string, want int) (*port, error) {
	vctx, err := verbs.Open(name)
	if err != nil {
		return nil, err
	}
	da, err := vctx.QueryDevice()
	if err != nil {
		vctx.Close()
		return nil, err
	}
	if want > da.PhysPortCount {
		vctx.Close()
		return nil, fmt.Errorf("bw: %s has no port %d (it has %d)", name, want, da.PhysPortCount)
	}
	for i := 1; i <= da.PhysPortCount; i++ {
		if want != 0 && i != want {
			continue
		}
		pa, err := vctx.QueryPort(i)
		if err == nil && pa.State != verbs.PortActive && want != 0 {
			err = fmt.Errorf("bw: %s/%d is %s, not ACTIVE", name, i, pa.State)
		}
		if err != nil {
			if want != 0 {
				vctx.Close()
				return nil, err
			}
			continue
		}
		if pa.State != verbs.PortActive {
			continue
		}
		table, err := vctx.GIDTable(i)
		if err != nil {
			if want != 0 {
				vctx.Close()
				return nil, fmt.Errorf("bw: read the GID table of %s/%d: %w", name, i, err)
			}
			continue
		}
		gid, ok := verbs.PickGID(table, pa.LinkLayer)
		if !ok {
			if want != 0 {
				vctx.Close()
				return nil, fmt.Errorf("bw: %s/%d has no usable GID (for RoCE, an IP address on its netdev)", name, i)
			}
			continue
		}
		return &port{vctx: vctx, num: i, attr: pa, dev: da, gid: gid}, nil
	}
	vctx.Close()
	return nil, fmt.Errorf("%s: no ACTIVE port with a usable GID", name)
}

// path is the address vector from p to the remote QP's port.
func (p *port) path(cfg Config, remoteGID [16]byte, lid uint16, mtu uint8) verbs.Path {
	var tc uint8
	if cfg.TrafficClass != nil {
		tc = cfg.TrafficClass(p.vctx.Name(), p.num)
	}
	m := p.attr.ActiveMTU
	if mtu > 0 && verbs.MTU(mtu) < m {
		m = verbs.MTU(mtu)
	}
	return verbs.Path{Port: p.num, GIDIndex: p.gid.Index, Global: p.attr.LinkLayer != verbs.LinkLayerInfiniBand,
		MTU: m, DLID: lid, RemoteGID: verbs.GID(remoteGID), TClass: tc}
}

func (p *port) rdAtomic() uint8 { return uint8(min(max(p.dev.MaxQPRdAtom, 1), maxRdAtomic)) }

// A qpSet is a test's verbs resources on one side.
type qpSet struct {
	p   *port
	buf *verbs.Buffer
	pd  *verbs.PD
	mr  *verbs.MR
	ch  *verbs.CompChannel
	cq  *verbs.CQ
	qp  *verbs.QP
}

// newQPSet makes a buffer of size bytes registered with access, a CQ of
// cqe entries (with a completion channel when withChannel) and an RC QP.
func newQPSet(p *port, size int, access verbs.Access, cqe, sendWR, recvWR int, withChannel bool) (s *qpSet, err error) {
	// Closed through its own variable: every "return nil, err" below
	// sets the result s to nil before the defer runs.
	built := &qpSet{p: p}
	s = built
	defer func() {
		if err != nil {
			built.close()
			s = nil
		}
	}()
	if s.buf, err = verbs.AllocBuffer(size); err != nil {
		return nil, err
	}
	if s.pd, err = p.vctx.AllocPD(); err != nil {
		return nil, err
	}
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return nil, err
	}
	if withChannel {
		if s.ch, err = p.vctx.NewCompChannel(); err != nil {
			return nil, err
		}
	}
	if s.cq, err = p.vctx.NewCQ(cqe, s.ch); err != nil {
		return nil, err
	}
	s.qp, err = s.pd.NewQP(verbs.QPConfig{Type: verbs.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: sendWR, MaxRecvWR: recvWR, MaxSGE: 1})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// close frees everything, the device included unless the set is shared.
func (s *qpSet) close() {
	for _, c := range []interface{ Close() error }{s.qp, s.cq, s.ch, s.mr, s.pd} {
		if c != nil && !isNilCloser(c) {
			c.Close()
		}
	}
	if s.buf != nil {
		s.buf.Close()
	}
	if !s.p.shared {
		s.p.vctx.Close()
	}
}

// isNilCloser reports whether c holds a nil pointer of its type.
func isNilCloser(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *verbs.QP:
		return v == nil
	case *verbs.CQ:
		return v == nil
	case *verbs.CompChannel:
		return v == nil
	case *verbs.MR:
		return v == nil
	case *verbs.PD:
		return v == nil
	}
	return false
}

// sge is the whole test buffer.
func (s *qpSet) sge(size int) verbs.SGE {
	return verbs.SGE{Addr: s.mr.Addr(), Length: uint32(size), LKey: s.mr.LKey()}
}
