package daemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/safefile"
	"github.com/rdmad/rdmad/probe"
	"github.com/rdmad/rdmad/probe/ud"
	"github.com/rdmad/rdmad/probe/wire"
	"github.com/rdmad/rdmad/verbs"
	"github.com/rdmad/rdmad/verbs/peer"
)

// A PeerEngine carries the peer probes under the manager: it sends the
// probes and answers other nodes' (probe.Transport) and follows the
// devices. *peer.Engine is the one rdmad runs; Options.PeerEngine may put
// another in its place.
type PeerEngine interface {
	probe.Transport
	// Run runs the engine until ctx is done.
	Run(ctx context.Context) error
	Stats() ud.Stats
	SetAuth(key []byte, require bool)
	// Rescan reads devices and ports now.
	Rescan()
	// ReleaseDevice closes what the engine holds of the device name.
	ReleaseDevice(name string)
}

// newPeerEngine is the PeerEngine rdmad runs: the verbs engine.
func newPeerEngine(c peer.Config) (PeerEngine, error) {
	e, err := peer.New(c)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// A peerRunner is the peer probes of one daemon: the verbs engine (UD QPs)
// and the manager (peers, schedule, states, control endpoint).
type peerRunner struct {
	mgr *probe.Manager
	eng PeerEngine
	// class gives each port's traffic class to the engine (verbs.go).
	class *probeClass
	// flows is the [probe] flows the engine's ports were opened with.
	flows int

	mu       sync.Mutex
	fileStat string // size and mtime of [probe] peers_file at its last read
	fileErr  error  // of the last read of peers_file
	keyErr   error  // of the last read of [probe] key_file
	// goodPath and goodPeers are the peers file last read whole and its
	// peers: a file refused later (others may write it, it turned into a
	// FIFO) leaves them in force, as a rejected configuration leaves the
	// last good one. fileKept says what a refused read left in force, for
	// the status (refused.go). All three owned by the main loop.
	goodPath  string
	goodPeers []probe.Spec
	fileKept  string
	// auth is the fleet key and mode in force: the last good read of
	// key_file. Owned by the main loop.
	auth probe.Auth
	// bw is the bandwidth tests (bandwidth.go).
	bw *bandwidthParts
	// interval is [probe] peer_interval in force, for probe.StallBound;
	// stalled is when the stall now reported began (zero: none). Both
	// owned by the main loop.
	interval time.Duration
	stalled  time.Time
}

// maxKeyFile bounds what [probe] key_file may hold: a key is a few dozen
// bytes; anything near this is the wrong file.
const maxKeyFile = 4096

// minKeyLen is the shortest fleet key taken, in bytes after trimming.
const minKeyLen = 16

// maxKeys bounds the keys of a rotation in [probe] key_file: a message
// with a wrong tag costs an HMAC per key.
const maxKeys = 4

// readProbeKey reads the fleet keys of [probe] key_file: a regular file
// owned by root with no permissions for group or others (a key others can
// read is no secret, one they can write not the admin's). It holds one key
// (the whole file, surrounding whitespace trimmed, as always), or for a
// rotation up to maxKeys keys, one per line, when the file is text: the
// first line tags every message, each line's key verifies one (blank lines
// and lines starting with '#' are skipped; base64 has neither). A file
// with bytes that are not text (a raw binary key) is one key whatever it
// holds, so that a key that happens to contain a newline byte stays one
// key. Every key has at least minKeyLen bytes.
func readProbeKey(path string) ([][]byte, error) {
	b, err := safefile.ReadSecret(path, maxKeyFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("[probe] key_file %w; create it on every node: `(umask 077; head -c 32 /dev/urandom | base64 > %s)`", err, path)
	}
	if err != nil {
		// safefile's error names the file and the fix (chown, chmod 0600).
		return nil, fmt.Errorf("[probe] key_file %w", err)
	}
	short := func(where string, n int) error {
		return &inputError{prefix: "[probe] key_file " + path + where,
			why: fmt.Sprintf("the key has %d bytes, at least %d are needed", n, minKeyLen),
			fix: fmt.Sprintf("write a new one: `head -c 32 /dev/urandom | base64 > %s`", path)}
	}
	whole := bytes.TrimSpace(b)
	if !bytes.ContainsAny(whole, "\r\n") || !isText(whole) {
		if len(whole) < minKeyLen {
			return nil, short("", len(whole))
		}
		return [][]byte{whole}, nil
	}
	var keys [][]byte
	for i, line := range bytes.Split(b, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if len(line) < minKeyLen {
			return nil, short(fmt.Sprintf(":%d", i+1), len(line))
		}
		if len(keys) == maxKeys {
			return nil, &inputError{prefix: fmt.Sprintf("[probe] key_file %s:%d", path, i+1),
				why: fmt.Sprintf("more than %d keys", maxKeys),
				fix: "keep two lines, as a rotation needs: the key to tag with first, then the one to accept as well"}
		}
		keys = append(keys, line)
	}
	return keys, nil
}

// isText reports whether b is printable ASCII and whitespace only.
func isText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\n' && c != '\r' && c != '\t' {
			return false
		}
	}
	return true
}

// loadAuth reads the fleet key cfg names and returns the authentication to
// use. On an error the previous one stays in force (the caller decides
// whether there is one to keep) and the error names the file and the fix.
func (r *peerRunner) loadAuth(cfg *config.Config) (probe.Auth, error) {
	pr := cfg.Probe
	if pr.KeyFile == "" {
		r.setKeyErr(nil)
		return probe.Auth{}, nil
	}
	keys, err := readProbeKey(pr.KeyFile)
	r.setKeyErr(err)
	if err != nil {
		return probe.Auth{}, err
	}
	return probe.Auth{Key: keys[0], Others: keys[1:], Require: pr.Auth != "prefer"}, nil
}

func (r *peerRunner) setKeyErr(err error) {
	r.mu.Lock()
	r.keyErr = err
	r.mu.Unlock()
}

// useAuth puts a into force in the engine (probe payloads) and for the
// manager's next settings (control messages).
func (r *peerRunner) useAuth(a probe.Auth) {
	r.auth = a
	if e, ok := r.eng.(keysEngine); ok {
		e.SetAuthKeys(append([][]byte{a.Key}, a.Others...), a.Require)
		return
	}
	r.eng.SetAuth(a.Key, a.Require)
}

// A keysEngine also verifies probe payloads under the other keys of a
// rotation (verbs/peer's Engine does; the engines of tests need not).
type keysEngine interface {
	SetAuthKeys(keys [][]byte, require bool)
}

// peersFileCheck is how often peers_file is checked for changes between
// reloads.
const peersFileCheck = 30 * time.Second

// wantPeers reports whether cfg gives the peer probes anyone to probe or to
// answer: without peers and allowed networks the control endpoint would
// refuse everybody, so it is not opened at all.
func wantPeers(cfg *config.Config) bool {
	p := cfg.Probe
	return p.Peers && (len(cfg.Peers) > 0 || p.PeersFile != "" || len(p.Allow.Prefixes()) > 0)
}

// errPeersOff is the peers component's reason when [probe] peers is false.
var errPeersOff = errors.New("[probe] peers = false: peer probes are switched off")

// startPeers starts the peer probes when the configuration asks for them
// (see wantPeers); reloadPeers starts them later if a reload does. Verbs
// being unavailable (no RDMA here) is reported as the component "peers"
// being unavailable; the control endpoint still answers, with no ports.
// Runs on the main goroutine.
func (d *Daemon) startPeers() {
	if !d.cfg.Probe.Peers {
		d.clearInputs()
		d.setComponent(apitype.ComponentPeers, apitype.Disabled, errPeersOff)
		return
	}
	if !wantPeers(d.cfg) {
		d.clearInputs()
		d.setComponent(apitype.ComponentPeers, apitype.Disabled, errors.New("no [[peer]], [probe] peers_file or [probe] allow configured: nobody to probe or answer"))
		return
	}
	r := &peerRunner{class: newProbeClass(d.store, d.cfg)}
	// Without its key a node that must authenticate would answer and
	// believe anybody: it does not start until the key can be read.
	auth, err := r.loadAuth(d.cfg)
	d.noteInput(inputKeyFile, d.cfg.Probe.KeyFile, err, true, "the peer probes are not started until the key can be read")
	if err != nil {
		d.setComponent(apitype.ComponentPeers, apitype.Error, fmt.Errorf("%w; peer probes are not started until the key can be read", err))
		return
	}
	newEngine := d.opts.PeerEngine
	if newEngine == nil {
		newEngine = newPeerEngine
	}
	// The ports' QPs are made once: a reload may lower [probe] flows (the
	// manager offers fewer), raising it above this takes a restart.
	r.flows = d.cfg.Probe.Flows
	r.eng, err = newEngine(peer.Config{Logger: d.log.With("component", "peers"),
		TrafficClassFor: r.class.of,
		Flows:           r.flows,
		OnReply:         func(rep ud.Reply) { r.mgr.OnReply(rep) },
		// A probe port opened or closed: the manager answers queries
		// with it at once, not after its next publish.
		OnPorts: func([]ud.LocalPort, error) {
			if m := r.mgr; m != nil {
				m.PortsChanged()
			}
		}})
	if err != nil {
		d.setComponent(apitype.ComponentPeers, apitype.Error, err)
		return
	}
	r.useAuth(auth)
	r.bw = newBandwidth(d, r)
	r.bw.set(d.cfg, auth)
	settings, fileErr := r.settings(d.cfg)
	d.noteInput(inputPeersFile, d.cfg.Probe.PeersFile, fileErr, false, r.fileKept)
	r.mgr, err = probe.New(probe.Options{
		Transport:      r.eng,
		NodeID:         nodeID(),
		ListenHost:     d.opts.PeerListenHost,
		Logger:         d.log.With("component", "peers"),
		ProberCounters: r.eng.Stats,
		Fingerprint:    d.fingerprintSource(),
		Bandwidth:      r.bw.node.Handle,
		OnState: func(ps apitype.Peers) {
			now := time.Now()
			d.mail.post("peers", func(s *apitype.Snapshot) {
				s.Peers = ps
				r.setComponent(s, now)
			})
		},
	}, settings)
	if err != nil {
		d.setComponent(apitype.ComponentPeers, apitype.Error, err)
		return
	}
	d.peers.Store(r)
	if fileErr != nil {
		d.log.Warn("peers file", "err", fileErr)
	}
	d.setComponent(apitype.ComponentPeers, apitype.OK, nil)
	d.parts.Go(func(ctx context.Context) {
		if err := r.eng.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Error("peer probe engine stopped", "err", err)
			d.report(apitype.ComponentPeers, apitype.Error, err)
		}
	})
	d.parts.Go(func(ctx context.Context) {
		defer d.peers.Store(nil)
		defer d.mail.post("bandwidth", func(s *apitype.Snapshot) { s.Bandwidth = d.bandwidthStatus(nil) })
		defer r.bw.node.Close()
		if err := r.mgr.Run(ctx); err != nil {
			d.log.Error("peer probes stopped", "err", err)
			d.report(apitype.ComponentPeers, apitype.Error, err)
		}
	})
	d.parts.Go(func(ctx context.Context) {
		t := time.NewTicker(peersFileCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// d.cfg belongs to the main loop: look at it there.
				d.do(ctx, func() {
					if r.fileChanged(d.cfg.Probe.PeersFile) {
						d.reloadPeers()
					}
				})
			}
		}
	})
}

// setComponent derives the peers component from the engine's ports: no
// port because verbs are unavailable is "unavailable", for another reason
// an error.
func (r *peerRunner) setComponent(s *apitype.Snapshot, now time.Time) {
	ports, perr := r.eng.Ports()
	stuck := stuckPorts(s.Peers)
	switch {
	case len(ports) == 0 && errors.Is(perr, verbs.ErrUnavailable):
		state.SetComponent(s, apitype.ComponentPeers, apitype.Unavailable, perr, now)
	case len(ports) == 0 && perr != nil:
		state.SetComponent(s, apitype.ComponentPeers, apitype.Error, perr, now)
	case stuck != nil:
		// A port whose post does not return is rdmad's trouble on this
		// node, not its peers': DaemonDegraded names it (probe/post.go).
		state.SetComponent(s, apitype.ComponentPeers, apitype.Error, stuck, now)
	case r.keyError() != nil:
		// The probes run on with the key in force: the refused key file
		// is the verdict's InputRefused (refused.go), not a part of rdmad
		// in error (DaemonDegraded); the detail says it here too.
		state.SetComponent(s, apitype.ComponentPeers, apitype.OK, r.keyError(), now)
	default:
		state.SetComponent(s, apitype.ComponentPeers, apitype.OK, r.fileError(), now)
	}
}

// stuckPorts is the error of the peers component while some probe port
// is cut off because its post of probes does not return (the manager's
// apitype.PeerPort.Stuck), naming each device and port; nil when none is.
func stuckPorts(ps apitype.Peers) error {
	var msgs []string
	for _, lp := range ps.Ports {
		if lp.Stuck == "" {
			continue
		}
		dev, port, _ := strings.Cut(lp.Key, "/")
		msgs = append(msgs, fmt.Sprintf("probe port %s (device %s port %s): %s", lp.Key, dev, port, lp.Stuck))
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s; the other ports are probed as usual. A provider stands in ibv_post_send when a send is retried inside it (rxe after a dropped packet) or the adapter is wedged: check `rdma link show` and the kernel log for the device", strings.Join(msgs, "; "))
}

// peersFreshWait bounds how long a reader waits for fresh peer figures
// (freshPeers): the manager's pass and the main loop's apply take
// milliseconds; a main loop busy with a reload or a policy pass must not
// hold a status request or a scrape for long, and the snapshot it has
// serves instead.
const peersFreshWait = time.Second

// freshPeers returns once the snapshot holds peer figures no older than
// the manager's publish period (probe.Manager.Fresh with maxAge 0), or
// after peersFreshWait or when ctx ends. The manager builds a state for
// figures only when asked (and every 30 s), so every reader of figures
// calls this first. Not for the main loop: it waits for the main loop to
// apply the state.
func (d *Daemon) freshPeers(ctx context.Context) {
	r := d.peers.Load()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, peersFreshWait)
	defer cancel()
	if err := r.mgr.Fresh(ctx, 0); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			// Unanswered: maybe a stalled pass, which the main loop
			// then reports for the readers after this one.
			select {
			case d.reqs <- func() { d.checkPeersStall(time.Now()) }:
			default: // the main loop is busy: its watchdog ping checks too
			}
		}
		return
	}
	// OnState has posted the state (or posted it earlier, when the last
	// one is young enough): wait until the main loop has it in the store.
	d.mail.flushed(ctx)
}

// checkPeersStall reports a probe pass that has stood longer than
// probe.StallBound as an error of the peers component, and takes it back
// once the pass ran on (probe/stall.go): a stalled manager sends no probe
// and publishes nothing, so without this the status would go on showing
// its last state, every peer as it was, and the verdict would vouch for
// them. Runs on the main loop: at every watchdog ping, and when a reader's
// request for fresh figures went unanswered (freshPeers).
func (d *Daemon) checkPeersStall(now time.Time) {
	r := d.peers.Load()
	if r == nil {
		return
	}
	since, doing, stalled := r.mgr.Stalled(now, probe.StallBound(r.interval))
	switch {
	case stalled && !since.Equal(r.stalled):
		r.stalled = since
		err := fmt.Errorf("the peer probe pass has stood for %v, %s: no probe goes and no reply is taken, so the peers' states are as of %s",
			now.Sub(since).Round(time.Second), doing, since.Format(time.RFC3339))
		d.log.Error("peer probes stalled", "since", since, "doing", doing)
		d.store.Update(func(s *apitype.Snapshot) { state.SetComponent(s, apitype.ComponentPeers, apitype.Error, err, now) })
	case !stalled && !r.stalled.IsZero():
		d.log.Info("peer probes running again", "stalled_since", r.stalled, "for", now.Sub(r.stalled).Round(time.Second))
		r.stalled = time.Time{}
		d.store.Update(func(s *apitype.Snapshot) { r.setComponent(s, now) })
	}
}

// peersDeviceEvent makes the peer probes read devices and ports now, after
// an RDMA device came or went, instead of at their next rescan.
func (d *Daemon) peersDeviceEvent() {
	if r := d.peers.Load(); r != nil {
		r.eng.Rescan()
	}
}

// peersRecheck brings the peers component up to date with the engine's
// ports (after a device event; the manager itself publishes only when
// peer states change or every few seconds).
func (d *Daemon) peersRecheck() {
	if r := d.peers.Load(); r != nil {
		d.store.Update(func(s *apitype.Snapshot) { r.setComponent(s, time.Now()) })
	}
}

// reloadPeers hands the peer probes the configuration in force (after a
// reload, or when peers_file changed), and starts them if they were not
// running and now have someone to probe or answer. Runs on the main loop.
func (d *Daemon) reloadPeers() {
	r := d.peers.Load()
	if r == nil {
		if wantPeers(d.cfg) && !d.parts.Stopping() {
			d.startPeers()
			return
		}
		d.clearInputs()
		if !d.cfg.Probe.Peers {
			d.setComponent(apitype.ComponentPeers, apitype.Disabled, errPeersOff)
		}
		return
	}
	auth, kerr := r.loadAuth(d.cfg)
	d.noteInput(inputKeyFile, d.cfg.Probe.KeyFile, kerr, true, "the peer probes go on with the key and settings in force")
	if kerr != nil {
		// The settings in force stay, with the key in force: a reload
		// must not turn authentication off, nor stop the probes.
		d.log.Error("peer probes keep their settings and key", "err", kerr)
		d.store.Update(func(s *apitype.Snapshot) { r.setComponent(s, time.Now()) })
		return
	}
	r.useAuth(auth)
	r.bw.set(d.cfg, auth)
	if d.cfg.Probe.Flows > r.flows {
		d.log.Warn("[probe] flows was raised; the probe ports keep their QPs until rdmad restarts", "flows", r.flows, "configured", d.cfg.Probe.Flows)
	}
	// A changed traffic class replaces the ports' address handles at the
	// engine's next scan: now.
	r.class.set(d.cfg)
	r.eng.Rescan()
	s, err := r.settings(d.cfg)
	d.noteInput(inputPeersFile, d.cfg.Probe.PeersFile, err, false, r.fileKept)
	if err != nil {
		d.log.Warn("peers file", "err", err)
	}
	r.mgr.SetSettings(s)
}

// Probe serves POST /v1/probe: a one-shot probe of a configured peer.
func (b backend) Probe(ctx context.Context, name string) (apitype.Peer, error) {
	r := b.d.peers.Load()
	if r == nil {
		return apitype.Peer{}, errors.New("peer probes are not running; configure [[peer]] entries with [probe] peers = true and check `rdmactl status` for the peers component")
	}
	return r.mgr.ProbeOnce(ctx, name)
}

func (r *peerRunner) keyError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keyErr == nil {
		return nil
	}
	return fmt.Errorf("%w; the peer probes go on with the settings and key in force", r.keyErr)
}

func (r *peerRunner) fileError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fileErr
}

// fileStat is what fileChanged compares: the size, mtime, mode and owner
// of path. The mode and owner count because a chmod or chown changes what
// rdmad takes (a peers file refused as others' to write is taken once
// root owns it alone) without touching the mtime.
func fileStat(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	uid := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid = int(st.Uid)
	}
	return fmt.Sprintf("%d %d %v %d", fi.Size(), fi.ModTime().UnixNano(), fi.Mode(), uid)
}

func (r *peerRunner) fileChanged(path string) bool {
	if path == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return fileStat(path) != r.fileStat
}

// settings turns the configuration into the manager's settings, reading
// peers_file. A bad line of the file is skipped and reported; the rest
// stays in force. A file that cannot be read or is refused as a whole
// leaves the peers of its last whole read in force (r.goodPeers), and
// r.fileKept says so.
func (r *peerRunner) settings(cfg *config.Config) (probe.Settings, error) {
	pr := cfg.Probe
	r.interval = pr.PeerInterval.Duration
	s := probe.Settings{Group: pr.Group, Port: pr.Port, Allow: pr.Allow.Prefixes(),
		Interval: pr.PeerInterval.Duration, Timeout: pr.PeerTimeout.Duration, Window: pr.Window,
		MaxPeers: pr.MaxPeers, Rotate: pr.Rotate.Duration, Resolve: time.Minute, Flows: pr.Flows,
		Threshold: probe.Thresholds{DownAfter: pr.DownAfter, UpAfter: pr.UpAfter, LossPct: pr.LossThreshold,
			MinLosses: 2, RTT: pr.RTTThreshold.Duration}, Auth: r.auth}
	seen := map[string]bool{}
	for _, p := range cfg.Peers {
		s.Peers = append(s.Peers, probe.Spec{Name: p.Address, Group: p.Group})
		seen[p.Address] = true
	}
	var err error
	if pr.PeersFile != "" {
		r.mu.Lock()
		r.fileStat = fileStat(pr.PeersFile)
		r.mu.Unlock()
		var fromFile []probe.Spec
		fromFile, err = readPeersFile(pr.PeersFile)
		fromFile = r.keepGoodPeers(pr.PeersFile, fromFile, err)
		for _, p := range fromFile {
			if !seen[p.Name] {
				s.Peers = append(s.Peers, p)
				seen[p.Name] = true
			}
		}
	}
	r.mu.Lock()
	r.fileErr = err
	r.mu.Unlock()
	return s, err
}

// keepGoodPeers returns the peers of path to put in force after a read
// that returned peers and err: on a read of the whole file (err nil, or
// bad lines only) those, remembered as the last good ones; on a file
// refused or unreadable as a whole (a *safefile.Error) the last good ones
// of the same path. It sets r.fileKept to what stays in force.
func (r *peerRunner) keepGoodPeers(path string, peers []probe.Spec, err error) []probe.Spec {
	r.fileKept = ""
	var se *safefile.Error
	if err == nil || !errors.As(err, &se) {
		r.goodPath, r.goodPeers = path, peers
		if err != nil {
			r.fileKept = fmt.Sprintf("the %d peers of its good lines are in force", len(peers))
		}
		return peers
	}
	if r.goodPath != path || len(r.goodPeers) == 0 {
		r.fileKept = "none of its peers is probed"
		return nil
	}
	r.fileKept = fmt.Sprintf("the %d peers read from it before stay in force", len(r.goodPeers))
	return r.goodPeers
}

// maxPeersFileLines bounds what a peers file can make rdmad hold.
const maxPeersFileLines = 100000

// maxPeersFileBytes bounds the peers file's size: 100,000 lines of an
// address and a group fit in 8 MiB.
const maxPeersFileBytes = 8 << 20

// readPeersFile reads "address [group]" lines; '#' starts a comment. The
// file is read with safefile: a FIFO or a device there is an error naming
// it, not a main loop blocked forever in open(2). It must be root's and
// writable by nobody else, like the key file: its peers are let through
// the control endpoint's allow list.
func readPeersFile(path string) ([]probe.Spec, error) {
	data, _, err := safefile.Read(path, safefile.Options{Max: maxPeersFileBytes, RootWritable: true})
	if err != nil {
		return nil, fmt.Errorf("read [probe] peers_file: %w", err)
	}
	var out []probe.Spec
	var bad []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		if line > maxPeersFileLines {
			bad = append(bad, fmt.Sprintf("more than %d lines; the rest is ignored", maxPeersFileLines))
			break
		}
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) > 2 {
			bad = append(bad, fmt.Sprintf("line %d: want \"address [group]\", got %d fields", line, len(fields)))
			continue
		}
		if msg := config.CheckPeerAddress(fields[0]); msg != "" {
			bad = append(bad, fmt.Sprintf("line %d: %s", line, msg))
			continue
		}
		sp := probe.Spec{Name: fields[0]}
		if len(fields) == 2 {
			if msg := config.CheckGroupLabel(fields[1]); msg != "" {
				bad = append(bad, fmt.Sprintf("line %d: %s", line, msg))
				continue
			}
			sp.Group = fields[1]
		}
		out = append(out, sp)
	}
	if err := sc.Err(); err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		return out, &inputError{prefix: "[probe] peers_file " + path, why: strings.Join(bad, "; "),
			fix: "correct the lines named (the other lines are in force)"}
	}
	return out, nil
}

// nodeID identifies this node to its peers: a hash of the machine ID and
// the host name, stable across restarts.
func nodeID() uint64 {
	h := fnv.New64a()
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		h.Write(b)
	}
	name, _ := os.Hostname()
	h.Write([]byte(name))
	return h.Sum64()
}

// fingerprintSource builds this node's fingerprint for the peers
// (docs/PROBES.md, "Fingerprints") from the snapshot in force, sysfs and
// the ports' active MTU.
func (d *Daemon) fingerprintSource() probe.FingerprintSource {
	kernel := ""
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	active := &probe.ActiveMTUCache{Query: verbsActiveMTU}
	return func(ports []ud.LocalPort) wire.Fingerprint {
		return probe.LocalFingerprint(d.store.Load(), ports, d.opts.SysfsRoot, kernel, active.Get)
	}
}

// verbsActiveMTU reads the active MTU of dev's port (ibv_query_port) for
// the fingerprint, 0 when verbs cannot tell (no cgo, the device gone).
// The daemon provides it: the probe control plane does not import verbs.
func verbsActiveMTU(dev string, port int) int {
	ctx, err := verbs.Open(dev)
	if err != nil {
		return 0
	}
	defer ctx.Close()
	pa, err := ctx.QueryPort(port)
	if err != nil {
		return 0
	}
	return pa.ActiveMTU.Bytes()
}
