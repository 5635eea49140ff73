package probe

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
)

// Fingerprint fields, as status, the metric's field label and doctor name
// them.
const (
	FieldMTU       = "mtu"
	FieldActiveMTU = "active_mtu"
	FieldLinkLayer = "link_layer"
	FieldRoCEMode  = "roce_mode"
	FieldRoCEToS   = "roce_tos"
	FieldTrust     = "trust"
	FieldPFC       = "pfc"
	FieldFirmware  = "firmware"
	FieldDriver    = "driver"
	// The node's own fields, compared once per peer (the ports are
	// "node"): informational, as a fleet in the middle of an upgrade
	// differs in them on purpose.
	FieldKernel  = "kernel"
	FieldVersion = "rdmad_version"

	// FieldRate is the port's link rate (severity warn).
	FieldRate = "rate"
)

// nodePort stands for the port in a mismatch of a node's own field.
const nodePort = "node"

// Fields lists every compared field, in the order mismatches are reported.
var Fields = apitype.MismatchFields

// A fieldValue is one field of a port as compared: a number or a text,
// with known false when the port does not say. Comparing two of them
// formats nothing; only a mismatch's values are written out (String).
type fieldValue struct {
	text  string
	num   uint64
	isNum bool
	mbps  bool // num is a rate in Mb/s, written in Gb/s
	known bool
}

func (v fieldValue) String() string {
	if v.mbps {
		return strconv.FormatFloat(float64(v.num)/1000, 'f', -1, 64) + " Gb/s"
	}
	if v.isNum {
		return strconv.FormatUint(v.num, 10)
	}
	return v.text
}

// portField returns p's value of field.
func portField(p *wire.FingerprintPort, field string) fieldValue {
	number := func(n uint64, known bool) fieldValue { return fieldValue{num: n, isNum: true, known: known} }
	text := func(s string) fieldValue { return fieldValue{text: s, known: s != ""} }
	switch field {
	case FieldMTU:
		return number(uint64(p.NetdevMTU), p.NetdevMTU != 0)
	case FieldActiveMTU:
		return number(uint64(p.ActiveMTU), p.ActiveMTU != 0)
	case FieldRoCEToS:
		return number(uint64(p.ToS), p.HasToS)
	case FieldRate:
		return fieldValue{num: uint64(p.RateMbps), isNum: true, mbps: true, known: p.RateMbps != 0}
	case FieldLinkLayer:
		return text(p.LinkLayer)
	case FieldRoCEMode:
		return text(p.RoCEMode)
	case FieldTrust:
		return text(p.Trust)
	case FieldPFC:
		return text(p.PFC)
	case FieldFirmware:
		return text(p.FWVer)
	case FieldDriver:
		return text(p.Driver)
	}
	return fieldValue{}
}

// compareFingerprint returns the fields on which the local port and the
// peer's port disagree. A field either side does not know is not
// compared: an unknown is not a mismatch (a peer that predates the rate
// sends none). Firmware and driver differences are of severity info, the
// link rate's warn; the rest must agree along a path.
func compareFingerprint(local, remote *wire.FingerprintPort) []apitype.Mismatch {
	var out []apitype.Mismatch
	for _, f := range Fields {
		l, r := portField(local, f), portField(remote, f)
		if !l.known || !r.known || l == r {
			continue
		}
		sev := apitype.SeverityMust
		switch f {
		case FieldFirmware, FieldDriver:
			sev = apitype.SeverityInfo
		case FieldRate:
			sev = apitype.SeverityWarn
		}
		out = append(out, apitype.Mismatch{Field: f, Local: l.String(), Peer: r.String(), Severity: sev, LocalPort: local.Key, PeerPort: remote.Key})
	}
	return out
}

// compareNode returns the node-level fields (kernel release, rdmad's
// version) on which two fingerprints disagree, of severity info; an
// unknown is not compared.
func compareNode(local, remote *wire.Fingerprint) []apitype.Mismatch {
	var out []apitype.Mismatch
	for _, f := range []struct{ field, l, r string }{{FieldKernel, local.Kernel, remote.Kernel}, {FieldVersion, local.Version, remote.Version}} {
		if f.l == "" || f.r == "" || f.l == f.r {
			continue
		}
		out = append(out, apitype.Mismatch{Field: f.field, Local: f.l, Peer: f.r, Severity: apitype.SeverityInfo, LocalPort: nodePort, PeerPort: nodePort})
	}
	return out
}

// fingerprintState converts a wire fingerprint for status.
func fingerprintState(f *wire.Fingerprint) *apitype.Fingerprint {
	if f == nil {
		return nil
	}
	out := &apitype.Fingerprint{Version: f.Version, Kernel: f.Kernel, PortsOmitted: f.Omitted, Ports: make([]apitype.FingerprintPort, 0, len(f.Ports))}
	for _, p := range f.Ports {
		sp := apitype.FingerprintPort{Index: int(p.Index), Key: p.Key, Netdev: p.Netdev, MTU: int(p.NetdevMTU), ActiveMTU: int(p.ActiveMTU),
			LinkLayer: p.LinkLayer, Firmware: p.FWVer, Driver: p.Driver, RoCEMode: p.RoCEMode, Trust: p.Trust, PFC: p.PFC,
			RateGbps: float64(p.RateMbps) / 1000}
		if p.HasToS {
			tos := int(p.ToS)
			sp.RoCEToS = &tos
		}
		out.Ports = append(out.Ports, sp)
	}
	return out
}

// A FingerprintSource builds this node's fingerprint for its probe ports
// (in the order the control endpoint numbers them).
type FingerprintSource func(ports []ud.LocalPort) wire.Fingerprint

// observedQoS sets fp's trust and PFC from the DCB state the netdev runs,
// written as a QoS policy target writes them (apitype.FormatPriorities), so that a
// node with a policy and one without compare alike. A netdev without dcbnl
// leaves them unknown.
func observedQoS(fp *wire.FingerprintPort, qos []apitype.NetdevQoS) {
	for _, q := range qos {
		if q.Netdev != fp.Netdev || !q.Supported {
			continue
		}
		fp.Trust = q.Trust
		if q.HasPFC {
			fp.PFC = apitype.FormatPriorities(q.PFCEnabled)
		}
		return
	}
}

// LocalFingerprint builds a node's fingerprint from the daemon's snapshot
// (rdmad's version, the inventory's firmware and link layer, the RoCE and
// QoS policy targets' observed values; without a QoS policy on the netdev,
// the DCB state rdmad observes on it) and sysfs below sysRoot (netdev
// MTU, the device's driver). activeMTU returns a port's active MTU in
// bytes (0 when it cannot tell); kernel is the kernel release.
func LocalFingerprint(snap *apitype.Snapshot, ports []ud.LocalPort, sysRoot, kernel string, activeMTU func(dev string, port int, netdevMTU int) int) wire.Fingerprint {
	f := wire.Fingerprint{Kernel: kernel}
	if snap != nil {
		f.Version = snap.Version
	}
	for i, lp := range ports {
		if i > 255 {
			break
		}
		fp := wire.FingerprintPort{Index: uint8(i), Key: lp.Key, LinkLayer: lp.LinkLayer}
		if snap != nil {
			for _, d := range snap.Devices {
				if d.Name != lp.Device {
					continue
				}
				fp.FWVer = d.FWVer
				for _, p := range d.Ports {
					if p.Port == lp.Port {
						fp.Netdev = p.Netdev
						if p.LinkLayer != "" {
							fp.LinkLayer = p.LinkLayer
						}
						if p.RateGbps > 0 && p.RateGbps*1000 < 1<<32 {
							fp.RateMbps = uint32(math.Round(p.RateGbps * 1000))
						}
					}
				}
			}
			for _, pol := range snap.Policy.Policies {
				for _, t := range pol.Targets {
					switch {
					case t.Kind == "roce" && t.Object == lp.Key && t.State != apitype.TargetError:
						if v, ok := settingField(t.Actual, "tos"); ok {
							if tos, err := strconv.Atoi(v); err == nil && tos >= 0 && tos <= 255 {
								fp.HasToS, fp.ToS = true, uint8(tos)
							}
						}
						if v, ok := settingField(t.Actual, "mode"); ok {
							fp.RoCEMode = v
						}
					case t.Kind == "qos" && fp.Netdev != "" && t.Object == fp.Netdev && t.State != apitype.TargetError && t.State != apitype.Unsupported:
						if v, ok := settingField(t.Actual, "trust"); ok {
							fp.Trust = v
						}
						if v, ok := settingField(t.Actual, "pfc"); ok {
							fp.PFC = v
						}
					}
				}
			}
		}
		if snap != nil && fp.Netdev != "" && fp.Trust == "" && fp.PFC == "" {
			// No QoS policy manages the netdev: what its dcbnl says is
			// in force (status qos[]), read at every inventory refresh.
			observedQoS(&fp, snap.QoS)
		}
		if fp.Netdev != "" {
			if mtu, ok := readSysInt(sysRoot, "sys/class/net", fp.Netdev, "mtu"); ok && mtu > 0 {
				fp.NetdevMTU = uint32(mtu)
			}
			// The port's rate unknown (no inventory yet): a RoCE
			// netdev's speed in Mb/s (-1 or absent when it has none).
			if fp.RateMbps == 0 {
				if sp, ok := readSysInt(sysRoot, "sys/class/net", fp.Netdev, "speed"); ok && sp > 0 {
					fp.RateMbps = uint32(sp)
				}
			}
		}
		if activeMTU != nil {
			if a := activeMTU(lp.Device, lp.Port, int(fp.NetdevMTU)); a > 0 && a <= 0xffff {
				fp.ActiveMTU = uint16(a)
			}
		}
		fp.Driver = deviceDriver(sysRoot, lp.Device)
		f.Ports = append(f.Ports, fp)
	}
	return f
}

// settingField returns key's value in a policy target's "k=v k=v" text.
func settingField(s, key string) (string, bool) {
	for _, f := range strings.Fields(s) {
		if k, v, ok := strings.Cut(f, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

func readSysInt(root string, dir, name, file string) (int, bool) {
	if !safeName(name) {
		return 0, false
	}
	if root == "" {
		root = "/"
	}
	b, err := os.ReadFile(filepath.Join(root, dir, name, file))
	if err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return v, err == nil
}

// deviceDriver names the kernel driver of an RDMA device's bus device
// (mlx5_core), with the module's version when the module has one (an
// out-of-tree driver such as MLNX_OFED's); "" for a software device
// (rxe, siw), which has no bus device.
func deviceDriver(root, dev string) string {
	if !safeName(dev) {
		return ""
	}
	if root == "" {
		root = "/"
	}
	link, err := os.Readlink(filepath.Join(root, "sys/class/infiniband", dev, "device/driver"))
	if err != nil {
		return ""
	}
	drv := filepath.Base(link)
	if mod, err := os.Readlink(filepath.Join(root, "sys/class/infiniband", dev, "device/driver/module")); err == nil {
		if b, err := os.ReadFile(filepath.Join(root, "sys/module", filepath.Base(mod), "version")); err == nil {
			if v := strings.TrimSpace(string(b)); v != "" {
				drv += " " + v
			}
		}
	}
	return drv
}

// activeMTUEvery is how long a port's active MTU is taken as known while
// its netdev MTU stays the same.
const activeMTUEvery = 30 * time.Second

// An ActiveMTUCache caches ports' active MTU, which Query reads (the
// daemon's ibv_query_port: this package does not import the verbs
// binding), for activeMTUEvery each, or until the netdev's MTU changes
// (which changes a RoCE port's active MTU). Safe for concurrent use.
type ActiveMTUCache struct {
	// Query returns the active MTU of dev's port in bytes, 0 when it
	// cannot tell (no cgo, the device gone).
	Query func(dev string, port int) int

	mu    sync.Mutex
	cache map[string]activeMTUEntry
}

type activeMTUEntry struct {
	netdevMTU, mtu int
	at             time.Time
}

// Get returns the active MTU of dev's port in bytes, 0 when Query cannot
// tell.
func (v *ActiveMTUCache) Get(dev string, port, netdevMTU int) int {
	key := fmt.Sprintf("%s/%d", dev, port)
	now := time.Now()
	v.mu.Lock()
	e, ok := v.cache[key]
	v.mu.Unlock()
	if ok && e.netdevMTU == netdevMTU && now.Sub(e.at) < activeMTUEvery {
		return e.mtu
	}
	mtu := 0
	if v.Query != nil {
		mtu = v.Query(dev, port)
	}
	v.mu.Lock()
	if v.cache == nil {
		v.cache = map[string]activeMTUEntry{}
	}
	if len(v.cache) > 256 {
		clear(v.cache)
	}
	v.cache[key] = activeMTUEntry{netdevMTU: netdevMTU, mtu: mtu, at: now}
	v.mu.Unlock()
	return mtu
}

// The fingerprints part holds this node's fingerprint (its decoded form,
// its wire form and when it was built) and the peers' fingerprints by
// their encoding, each shared by the peers that sent the same.
type fingerprints struct {
	held    map[string]*sharedFP
	own     *wire.Fingerprint
	ownWire []byte
	builtAt time.Time
	// heldLog are the peers with mismatch changes held back from the
	// log (checkMismatch); logEvery, if set, replaces mismatchLogEvery
	// (tests).
	heldLog  []*mpeer
	logEvery time.Duration
}

func newFingerprints() fingerprints { return fingerprints{held: map[string]*sharedFP{}} }

// fingerprintEvery is how often this node's fingerprint is built again
// (sysfs reads and a look at the snapshot): an MTU changed on the node is
// in its next queries and answers within this time.
const fingerprintEvery = 5 * time.Second

func hasExt(m wire.Message, typ uint16) bool {
	for _, e := range m.Ext {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// refreshFingerprint builds this node's fingerprint again when it is due
// (or force). When it changed, the control endpoint sends the new one,
// every peer is asked again at its next turn (the query carries it, so
// peers learn of the change within about an interval), and every peer's
// mismatches are judged again.
func (m *Manager) refreshFingerprint(now time.Time, force bool) {
	if m.opts.Fingerprint == nil || (!force && !m.fps.builtAt.IsZero() && now.Sub(m.fps.builtAt) < fingerprintEvery) {
		return
	}
	m.fps.builtAt = now
	f := m.opts.Fingerprint(m.local)
	b := f.Marshal()
	if m.fps.ownWire != nil && string(b) == string(m.fps.ownWire) {
		return
	}
	// Keep what the peers see: the bounded, cleaned form.
	if d, err := wire.DecodeFingerprint(b); err == nil {
		f = d
	}
	first := m.fps.ownWire == nil
	m.fps.own, m.fps.ownWire = &f, b
	if m.control.ctl != nil {
		m.control.ctl.SetFingerprint(b)
	}
	m.pub.changed = true
	for _, p := range m.peers.byName {
		if !first {
			for _, pa := range p.paths {
				pa.asked = 0
			}
		}
		m.checkMismatch(p)
	}
}

// onQuery takes the fingerprint of a query this node answered, from a
// selected peer's address. Unlike an answer, a query carries no nonce of
// ours, so with a fleet key only an authenticated one counts; without a
// key it is as trustworthy as the query's admission itself.
//
// A down peer that queries this node has its control endpoint back (a
// partition's end, a restart): its turn comes now rather than up to an
// interval later, so that it is asked for its new QP at once. A query
// spoofed from its address cannot make this node ask it more often than
// a down path is asked anyway (at most every half interval, visit).
func (m *Manager) onQuery(a answer, now time.Time) {
	if len(m.cfg.Auth.Key) > 0 && !a.m.Authenticated {
		return
	}
	ps := m.peers.at(a.from.Addr())
	if len(ps) == 0 {
		return
	}
	for _, e := range ps {
		if e.p.inDue && e.p.due > monoNs(now) && e.p.anyPathDown() {
			e.p.setDue(now)
			m.sched.due.fix(e.p)
		}
	}
	fp, err := m.fps.decode(a.m)
	if fp == nil || err != nil {
		return
	}
	for _, e := range ps {
		if e.p.ver != wire.Version1 {
			m.setPeerFingerprint(e.p, fp)
		}
	}
}

// A sharedFP is a fingerprint a peer sent, decoded once, with its form in
// the state, and shared by every peer that sent the same bytes: the nodes
// of a fleet mostly run the same firmware, driver and kernel, so ten
// thousand peers hold a handful of fingerprints, not ten thousand copies,
// and a peer that says again what it said before costs no decoding.
// fingerprints.held holds those some peer holds, by their encoding.
type sharedFP struct {
	raw   string // the encoding as received
	canon string // re-encoded: what the peer says, whatever the encoding
	fp    wire.Fingerprint
	state *apitype.Fingerprint // never changed: states share it
	refs  int
}

// decode returns the fingerprint msg carries: nil when it carries
// none, and an error when it is malformed.
func (f *fingerprints) decode(msg wire.Message) (*sharedFP, error) {
	for _, e := range msg.Ext {
		if e.Type != wire.ExtFingerprint {
			continue
		}
		if s := f.held[string(e.Value)]; s != nil {
			return s, nil
		}
		f, err := wire.DecodeFingerprint(e.Value)
		if err != nil {
			return nil, err
		}
		return &sharedFP{raw: string(e.Value), canon: string(f.Marshal()), fp: f, state: fingerprintState(&f)}, nil
	}
	return nil, nil
}

// setPeerFingerprint records what p said about itself (nil: nothing).
func (m *Manager) setPeerFingerprint(p *mpeer, f *sharedFP) {
	if p.fp == f || (p.fp != nil && f != nil && p.fp.canon == f.canon) {
		return
	}
	m.fps.release(p)
	if f != nil {
		if held := m.fps.held[f.raw]; held != nil {
			f = held
		} else {
			m.fps.held[f.raw] = f
		}
		f.refs++
	}
	p.fp = f
	m.changedPeer(p)
	m.checkMismatch(p)
}

// release lets go of p's fingerprint.
func (f *fingerprints) release(p *mpeer) {
	if p.fp == nil {
		return
	}
	if p.fp.refs--; p.fp.refs <= 0 && f.held[p.fp.raw] == p.fp {
		delete(f.held, p.fp.raw)
	}
	p.fp = nil
}

// mismatches compares each of p's paths: the local port's fingerprint with
// that of the peer's port it probes.
func (f *fingerprints) mismatches(p *mpeer) []apitype.Mismatch {
	if f.own == nil || p.fp == nil {
		return nil
	}
	out := compareNode(f.own, &p.fp.fp)
	for _, pa := range p.paths {
		var local, remote *wire.FingerprintPort
		for i := range f.own.Ports {
			if f.own.Ports[i].Key == pa.local {
				local = &f.own.Ports[i]
			}
		}
		for i := range p.fp.fp.Ports {
			if p.fp.fp.Ports[i].Index == pa.remoteIdx {
				remote = &p.fp.fp.Ports[i]
			}
		}
		if local == nil || remote == nil || !pa.resolved {
			continue
		}
		out = append(out, compareFingerprint(local, remote)...)
	}
	return out
}

// mismatchLogEvery is the most often one peer's mismatch changes are
// logged. Without a fleet key a spoofer of a peer's address can change what
// the peer seems to say in every query it sends (it measured 28 log lines a
// second per spoofed address): the first change after a quiet interval is
// logged at once, later ones within the interval are held and counted, and
// the state they led to is logged when the interval is over, with the count
// (mismatch_changes_unlogged). The state always shows the current
// mismatches.
const mismatchLogEvery = time.Minute

// checkMismatch keeps p's mismatches (the state shows them) and logs when
// they change: a warning naming each field and both values, and a line
// when they are gone, at most once per mismatchLogEvery per peer. It is
// called whenever what they depend on changes: either fingerprint, a
// path's peer port, the paths themselves.
func (m *Manager) checkMismatch(p *mpeer) {
	ms := m.fps.mismatches(p)
	if len(ms) == 0 && p.rare == nil {
		return // none now, none before
	}
	r := p.w()
	r.mm = ms
	var parts []string
	for _, x := range ms {
		parts = append(parts, fmt.Sprintf("%s %s here (%s) vs %s on the peer (%s)", x.Field, x.Local, x.LocalPort, x.Peer, x.PeerPort))
	}
	sig := strings.Join(parts, "; ")
	if sig == r.mismatch {
		return
	}
	m.changedPeer(p)
	r.mismatch = sig
	now := time.Now()
	every := m.fps.logEvery
	if every == 0 {
		every = mismatchLogEvery
	}
	if !r.mmLogAt.IsZero() && now.Sub(r.mmLogAt) < every {
		if r.mmHeld == 0 {
			m.fps.heldLog = append(m.fps.heldLog, p)
		}
		r.mmHeld++
		return
	}
	held := int(r.mmHeld)
	r.mmHeld = 0 // flushMismatchLog skips it now
	m.logMismatch(p, now, held)
}

// logMismatch logs p's mismatches as they are now, with the count of the
// changes held back before them.
func (m *Manager) logMismatch(p *mpeer, now time.Time, held int) {
	r := p.w()
	r.mmLogAt = now
	if r.mismatch == r.mmLogged {
		if held > 0 {
			m.log.Info("peer settings changed and changed back", "peer", p.spec.Name, "mismatch_changes_unlogged", held)
		}
		return
	}
	r.mmLogged = r.mismatch
	args := []any{"peer", p.spec.Name}
	if held > 0 {
		args = append(args, "mismatch_changes_unlogged", held)
	}
	if r.mismatch == "" {
		m.log.Info("peer settings agree again", args...)
	} else {
		m.log.Warn("peer settings differ", append(args, "mismatches", r.mismatch,
			"hint", "align the MTU with [[policy]] mtu on both nodes; upgrade firmware/driver to the fleet's versions")...)
	}
}

// flushMismatchLog logs the held mismatch changes of the peers whose
// interval is over (each tick; the list holds only peers with changes
// held, so an idle fleet costs nothing).
func (m *Manager) flushMismatchLog(now time.Time) {
	if len(m.fps.heldLog) == 0 {
		return
	}
	every := m.fps.logEvery
	if every == 0 {
		every = mismatchLogEvery
	}
	keep := m.fps.heldLog[:0]
	for _, p := range m.fps.heldLog {
		switch {
		case p.r().mmHeld == 0:
			// dropped meanwhile
		case now.Sub(p.r().mmLogAt) < every:
			keep = append(keep, p)
		default:
			held := int(p.rare.mmHeld)
			p.rare.mmHeld = 0
			m.logMismatch(p, now, held)
		}
	}
	clear(m.fps.heldLog[len(keep):])
	m.fps.heldLog = keep
}
