// Package daemon is rdmad's lifecycle: it loads the configuration, owns the
// one goroutine that writes state, serves the local API, talks to systemd
// and stops cleanly.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Mellanox/rdmamap"
	"github.com/coreos/go-systemd/v22/activation"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/access"
	"github.com/rdmad/rdmad/daemon/api"
	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/daemon/state"
	"github.com/rdmad/rdmad/internal/safefile"
	"github.com/rdmad/rdmad/inventory"
	"github.com/rdmad/rdmad/inventory/rdmares"
	"github.com/rdmad/rdmad/policy"
	"github.com/rdmad/rdmad/policy/dcb"
	"github.com/rdmad/rdmad/policy/ecn"
	"github.com/rdmad/rdmad/verbs/bw"
	"github.com/rdmad/rdmad/verbs/peer"
)

// Options are rdmad's command-line settings.
type Options struct {
	// ConfigPath is the main configuration file.
	ConfigPath string
	// ConfigRequired makes a missing ConfigPath fatal (it was named on the
	// command line); otherwise rdmad runs on defaults.
	ConfigRequired bool
	// Socket overrides [daemon] socket when not empty.
	Socket string
	// SysfsRoot is where sysfs is read ("/" normally; tests use fixtures).
	SysfsRoot string
	Version   string
	Stderr    io.Writer
	// StateDir is where rdmad keeps what must outlive a restart (the
	// record of the limits files it wrote). Empty: systemd's
	// $STATE_DIRECTORY (StateDirectory=rdmad), else /var/lib/rdmad if it
	// exists, else nothing is kept (rdmad run by hand or by a test).
	StateDir string
	// PeerEngine, if set, makes the engine under the peer probes from the
	// configuration rdmad would give the verbs engine (peer.New: UD QPs
	// over libibverbs), which it replaces. Only the soak (test/soak) sets
	// it, to run the whole daemon on an in-memory transport; rdmad leaves
	// it nil.
	PeerEngine func(peer.Config) (PeerEngine, error)
	// PeerListenHost, if set, is the address the peers' control endpoint
	// binds ([probe] port on every address otherwise). The soak binds
	// 127.0.0.1, so that its fake peers can hold the same port on other
	// loopback addresses.
	PeerListenHost string
}

// ShutdownGrace bounds how long open API requests may delay the exit.
const ShutdownGrace = 3 * time.Second

// A Daemon is one running rdmad. Its fields are owned by the main loop
// unless noted.
type Daemon struct {
	opts Options
	// doctorRuns hands out the doctor runs (backend.Doctor).
	doctorRuns doctorSlots
	// busRefused counts the D-Bus service's refusals, for the metrics.
	busRefused *bus.Counters
	log        *slog.Logger
	level      *slog.LevelVar
	notify     notifier
	store      *state.Store // safe for concurrent use
	api        *api.Server  // safe for concurrent use
	// sock is the socket rdmad created, nil when systemd passed one (then
	// the .socket unit's SocketMode= and SocketGroup= decide who connects).
	sock *api.Listener
	inv  inventory.Reader
	// resources reads the RDMA objects the kernel tracks (RDMA netlink),
	// one dump at a time, for the API, D-Bus, the metrics and the doctor;
	// nil on a fixture sysfs tree (resources.go). Safe for concurrent use.
	resources *rdmares.Source

	cfg    *config.Config
	socket string
	gen    uint64
	rec    *policy.Reconciler
	verbs  *verbsParts
	// parts owns every goroutine the daemon starts, also those a reload
	// starts or restarts (supervise.go).
	parts *supervisor
	// peers is the peer prober while it runs; the API reads it.
	peers atomic.Pointer[peerRunner]
	// bwSlot is the node's one bandwidth test slot, which the peer
	// runner's tests and the loopback tests share; loopback runs the
	// loopback tests (bandwidth.go).
	bwSlot   *bw.Slot
	loopback *loopbackTests

	reqs chan func() // work for the main loop, from the API and D-Bus
	// mail carries other goroutines' updates of the store to the main
	// loop, its one writer (mailbox.go).
	mail *mailbox
	// followUp fires a second inventory read after device and address
	// events (see lookAgain).
	followUp *time.Timer
	// metrics is the TCP listener of [metrics] listen (sinks.go).
	metrics metricsTCP
	// qos reads the DCB state of the RoCE netdevs at every refresh
	// (qos.go); nil on a fixture tree.
	qos *qosObserver
	// health decides every snapshot's verdict (health.go).
	health *healthPart
	// klog follows the kernel log for faults of the devices (kernellog.go).
	klog *kernelLog
}

// Run runs rdmad until ctx is cancelled (SIGINT/SIGTERM in cmd/rdmad) and
// returns nil after a clean stop.
func Run(ctx context.Context, opts Options) error {
	if abs, err := filepath.Abs(opts.ConfigPath); err == nil {
		opts.ConfigPath = abs
	}
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	d := &Daemon{
		opts:  opts,
		level: new(slog.LevelVar),
		inv:   inventoryReader(opts.SysfsRoot),

		busRefused: &bus.Counters{},
		reqs:       make(chan func(), 8),
		mail:       newMailbox(),
	}
	d.log = newLogger(opts.Stderr, d.level)
	d.health = newHealthPart(d.log)
	// Before the first configure: a configuration with other thresholds
	// than the record's counts anew.
	boot, err := readBootID(bootIDPath)
	if err != nil {
		d.log.Debug("boot ID unreadable", "err", err)
	}
	d.health.keepFlaps(stateDir(opts.StateDir), boot, time.Now())
	d.bwSlot = bw.NewSlot()
	d.loopback = newLoopbackTests(d)
	defer d.loopback.node.Close()
	d.resources = newResources(opts.SysfsRoot)
	now := time.Now()
	d.store = state.NewStore(apitype.Snapshot{
		Version:   opts.Version,
		State:     apitype.Starting,
		PID:       os.Getpid(),
		StartedAt: now,
		Config:    apitype.Config{Path: opts.ConfigPath, Files: []string{}, PendingRestart: []string{}},
		Devices:   []apitype.Device{},
		Policy:    apitype.PolicyState{Policies: []apitype.PolicyStatus{}},
		Loopback:  []apitype.LoopbackPort{},
		MRPool:    []apitype.PoolDevice{},
		ECN:       []apitype.NetdevECN{},
		QoS:       []apitype.NetdevQoS{},
	})
	d.store.SetFinish(func(prev, next *apitype.Snapshot) {
		d.health.finish(d, prev, next)
		logComponents(d.log, prev.Components, next.Components)
	})

	// The first load decides the socket. A broken file at start does not
	// stop rdmad if it accepted a configuration before: it runs on the copy
	// it kept of that one (config.SaveCopy), reports the error as a reload
	// does and picks up the fix when the file changes. With no copy to run
	// on it exits with ExitConfig: defaults would be a running service that
	// does not do what its files say.
	cfg, loadErr := config.Load(opts.ConfigPath)
	var fromCopy *config.Config
	if loadErr != nil {
		if errors.Is(loadErr, fs.ErrNotExist) && opts.ConfigRequired {
			return fmt.Errorf("%w; create it (see rdmad.toml(5)) or drop --config to run on defaults", loadErr)
		}
		if errors.Is(loadErr, fs.ErrNotExist) {
			cfg = config.Default()
			d.log.Warn("no configuration file; running on defaults", "path", opts.ConfigPath)
			loadErr = nil
		} else if fromCopy = d.loadSavedCopy(); fromCopy == nil {
			d.logRejected("configuration rejected and no accepted configuration to run on; exiting", "start", loadErr)
			return &ConfigError{Path: opts.ConfigPath, Err: loadErr}
		} else {
			cfg = fromCopy
		}
	}
	d.socket = cfg.Daemon.Socket
	if opts.Socket != "" {
		d.socket = opts.Socket
	}
	if fromCopy != nil {
		d.accept(fromCopy, nil)
		d.logRejected("configuration rejected; running on the last accepted configuration until it is fixed", "start", loadErr)
	}
	d.accept(cfg, loadErr)

	ln, err := d.listen(cfg)
	if err != nil {
		return err
	}
	d.api = api.NewServer(backend{d}, d.accessRoles(cfg))
	d.api.SetLogger(d.log.With("component", "api"))
	d.api.SetFresh(d.freshPeers)

	ctx, cancel := context.WithCancel(ctx)
	d.parts = newSupervisor(ctx)
	// Cancel first, then wait: every part stops on ctx, also when Run
	// returns early with an error.
	defer func() {
		cancel()
		d.parts.Wait()
	}()
	d.addSinks()

	apiErr := make(chan error, 1)
	d.parts.Go(func(ctx context.Context) { apiErr <- d.api.Serve(ctx, ln, ShutdownGrace) })

	cfgChanged := make(chan struct{}, 1)
	if err := d.watchConfig(opts.ConfigPath, 200*time.Millisecond, cfgChanged); err != nil {
		d.setComponent(apitype.ComponentConfigWatch, apitype.Error, fmt.Errorf("watch %s: %w; reload with SIGHUP or rdmactl reload", opts.ConfigPath, err))
	} else {
		d.setComponent(apitype.ComponentConfigWatch, apitype.OK, nil)
	}

	// A predecessor killed while it wrote a file of the state directory
	// (between the temporary file's create and its rename) left the
	// temporary file; nothing else would ever remove it.
	state := stateDir(opts.StateDir)
	if state != "" {
		if removed := safefile.RemoveStale(state, ""); len(removed) > 0 {
			d.log.Info("removed temporary files a stopped rdmad left in its state directory", "dir", state, "files", strings.Join(removed, ","))
		}
	}
	recOpts := policy.Options{StateDir: state, SysRoot: d.inv.Root}
	if d.inv.Root == "" || d.inv.Root == "/" {
		// The host's sysfs, read-only under rdmad.service: ECN is written
		// through rdmad-ecn@.service. A fixture tree is always writable.
		recOpts.ECNUnit = func(nd string, w ecn.Want) error { return writeECNThroughUnit(ctx, ecn.WantDir, nd, w) }
	}
	d.rec = policy.NewReconciler(d.log, recOpts)
	defer d.rec.Close()
	if d.inv.Root == "" || d.inv.Root == "/" {
		// The netdevs of a fixture tree are not this host's: their DCB
		// state is not read.
		d.qos = newQoSObserver(d.log, func() (*dcb.Conn, error) { return dcb.Dial(nil) })
		defer d.qos.close()
	}
	ev := d.startEvents()
	d.klog = &kernelLog{d: d}
	d.klog.apply(d.cfg)
	defer d.klog.close()
	d.startPeers()

	d.parts.Go(func(ctx context.Context) {
		bus.Run(ctx, bus.Options{Store: d.store, Backend: backend{d}, Fresh: d.freshPeers, Roles: d.api.Roles, Logger: d.log.With("component", "dbus"), Counters: d.busRefused,
			Report: func(st string, err error) { d.report(apitype.ComponentDBus, st, err) }})
	})

	d.refresh("start")
	d.verbs = d.startVerbs()
	defer d.verbs.stop()
	d.reconcile(nil)
	snap := d.store.Update(func(s *apitype.Snapshot) { d.summarise(s, apitype.Running) })
	d.notify.ready(snap.Summary)
	d.log.Info("rdmad started", "version", opts.Version, "socket", d.socket, "config", opts.ConfigPath,
		"generation", d.gen, "devices", len(snap.Devices))

	return d.loop(ctx, cfgChanged, apiErr, ev)
}

// ping tells systemd's watchdog the main loop is alive and checks the
// peer probes for a stall. Driven by the loop on purpose: a loop that
// hangs stops the pings, and systemd restarts rdmad.
func (d *Daemon) ping() {
	d.notify.watchdog()
	d.checkPeersStall(time.Now())
}

func (d *Daemon) loop(ctx context.Context, cfgChanged <-chan struct{}, apiErr <-chan error, ev events) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fault := faultSwitch()

	var wdC <-chan time.Time
	if iv := watchdogInterval(); iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		wdC = t.C
		d.notify.watchdog()
	}
	resync := time.NewTicker(d.cfg.Daemon.ResyncInterval.Duration)
	d.followUp = time.NewTimer(time.Hour)
	d.followUp.Stop()
	defer d.followUp.Stop()
	defer resync.Stop()

	for {
		// What the parts posted goes in before the next event: a select
		// picks among ready cases at random, and on a slow host one
		// device event's handling (an inventory read, the verbs) takes
		// seconds, so a kernel fault posted meanwhile waited behind two or
		// three of them (seen: 7 s under TCG).
		select {
		case <-d.mail.ready:
			d.applyMail()
		default:
		}
		// The watchdog's ping too: with a backlog of slow events (a
		// flapping link, each event an inventory read of seconds under
		// TCG) its case lost the draw often enough that systemd killed a
		// loop that was working (seen on the bed). A loop that hangs
		// still stops the pings.
		select {
		case <-wdC:
			d.ping()
		default:
		}
		select {
		case <-ctx.Done():
			d.stop()
			return nil
		case err := <-apiErr:
			d.stop()
			return err
		case <-wdC:
			d.ping()
		case <-hup:
			d.reload("SIGHUP")
		case <-cfgChanged:
			d.reload("config file changed")
		case f := <-d.reqs:
			f()
		case <-d.mail.ready:
			d.applyMail()
		case e, ok := <-ev.link:
			if !ok {
				// The watcher stopped (its error is in status); the
				// periodic resync covers netdevs from now on.
				ev.link = nil
				continue
			}
			d.onLink(e)
		case e := <-ev.uevent:
			d.onUevent(e)
		case <-d.verbs.results:
			d.verbs.publish()
		case dev := <-d.verbs.devices:
			d.refresh("verbs async event on " + dev)
			d.reconcile(&policy.Scope{Devices: map[string]bool{dev: true}})
		case <-d.followUp.C:
			// The kernel fills a new device's GID table after the
			// uevent, without an event of its own: look once more.
			d.refresh("follow-up after a device event")
			d.peersRecheck()
		case <-ev.lost:
			d.log.Warn("kernel events were lost; resyncing everything")
			d.refresh("lost events")
			if d.verbs.prober != nil {
				d.verbs.prober.Rescan()
			}
			d.reconcile(nil)
		case <-d.health.timer.C:
			// A flapping port's quiet window ended: decide again.
			d.store.Update(func(*apitype.Snapshot) {})
			d.health.rearm()
		case <-resync.C:
			d.refresh("periodic resync")
			d.verbs.addDevices()
			// The loopback probe finds new devices on uevents only
			// (loopback.Config.Rescan): this catches one it missed.
			if d.verbs.prober != nil {
				d.verbs.prober.Rescan()
			}
			d.reconcile(nil)
			resync.Reset(d.cfg.Daemon.ResyncInterval.Duration)
		case <-fault:
			d.log.Warn("test fault: main loop hangs until stopped (RDMAD_TEST_FAULT=hang-on-sigusr2)")
			<-ctx.Done()
		}
	}
}

// stop announces the stop; deferred functions in Run close the rest.
func (d *Daemon) stop() {
	d.notify.stopping()
	d.store.Update(func(s *apitype.Snapshot) { s.State = apitype.Stopping; s.Summary = "stopping" })
	d.log.Info("rdmad stopping")
}

// reload loads the configuration again. A load that fails leaves the
// running configuration in place and is reported in status.
func (d *Daemon) reload(why string) apitype.ReloadResult {
	d.notify.reloading()
	d.store.Update(func(s *apitype.Snapshot) { s.State = apitype.Reloading })
	cfg, err := config.Load(d.opts.ConfigPath)
	d.accept(cfg, err)
	var pending []pendingKey
	if err == nil {
		if d.sock == nil && d.opts.Socket == "" && cfg.Daemon.Socket != d.socket {
			d.log.Warn("[daemon] socket is not used: systemd passes the socket (its .socket unit sets the path)",
				"running", d.socket, "configured", cfg.Daemon.Socket)
		}
		// The daemon's own check follows the new groups in any case; the
		// socket file keeps its last good mode when securing it fails
		// (e.g. someone replaced it), and status says why.
		d.api.SetRoles(d.accessRoles(cfg))
		if d.sock != nil {
			if err := d.sock.Secure(socketAccess(cfg)); err != nil {
				d.log.Error("socket permissions not updated; the socket keeps its previous ones", "err", err)
				d.setComponent(apitype.ComponentAPI, apitype.Error, err)
			} else {
				d.setComponent(apitype.ComponentAPI, apitype.OK, nil)
			}
		}
		d.setMetricsListen(cfg.Metrics.Listen)
		d.refresh("reload")
		d.rec.Forget()
		d.reconcile(nil)
		d.reloadPeers()
		d.verbs.apply(cfg)
		d.klog.apply(cfg)
		pending = d.restartNeeded(cfg)
	}
	snap := d.store.Update(func(s *apitype.Snapshot) {
		if err == nil {
			s.Config.PendingRestart = keysOf(pending)
		}
		d.summarise(s, apitype.Running)
	})
	d.notify.ready(snap.Summary)
	res := apitype.ReloadResult{OK: err == nil, Generation: d.gen, RestartNeeded: keysOf(pending)}
	if err != nil {
		res.Error = err.Error()
		d.logRejected("configuration rejected; keeping the running one", why, err)
	} else {
		d.log.Info("configuration loaded", "why", why, "generation", d.gen, "files", strings.Join(cfg.Files, ","))
		for _, p := range pending {
			d.log.Warn("configuration key takes effect only when rdmad restarts; rdmad runs on with its old value: restart it (systemctl restart rdmad) to apply",
				"key", p.key, "running", p.running, "configured", p.configured)
		}
	}
	return res
}

// A pendingKey is a key of the configuration in force whose value rdmad
// does not run with, because it takes effect only at a restart.
type pendingKey struct{ key, running, configured string }

// restartNeeded lists the keys of cfg, just put in force, that differ from
// what rdmad runs with and that a reload cannot apply. Every other key
// takes effect on reload. Runs on the main loop.
func (d *Daemon) restartNeeded(cfg *config.Config) []pendingKey {
	var out []pendingKey
	// The socket rdmad created stays where it is (clients are connected
	// to it); --socket and socket activation make the key moot.
	if d.sock != nil && d.opts.Socket == "" && cfg.Daemon.Socket != d.socket {
		out = append(out, pendingKey{"daemon.socket", d.socket, cfg.Daemon.Socket})
	}
	// Peer probes that run go on (with the new peers and settings) until
	// rdmad restarts; turning them on takes effect at once (reloadPeers).
	if !cfg.Probe.Peers && d.peers.Load() != nil {
		out = append(out, pendingKey{"probe.peers", "true", "false"})
	}
	return out
}

func keysOf(ps []pendingKey) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.key
	}
	return out
}

// accept installs cfg when err is nil and records the outcome.
func (d *Daemon) accept(cfg *config.Config, err error) {
	now := time.Now()
	if err == nil {
		d.cfg = cfg
		d.gen++
		d.level.Set(parseLevel(cfg.Daemon.LogLevel))
		d.health.configure(cfg)
		d.saveCopy(cfg)
	} else if err != nil && d.cfg == nil {
		d.cfg = config.Default()
		d.health.configure(d.cfg)
	}
	d.store.Update(func(s *apitype.Snapshot) {
		s.Config.Path = d.opts.ConfigPath
		s.Config.Generation = d.gen
		if err == nil {
			s.Config.Files = cfg.Files
			if s.Config.Files == nil {
				s.Config.Files = []string{}
			}
			s.Config.LoadedAt = now
			s.Config.Error = ""
			state.SetComponent(s, apitype.ComponentConfig, apitype.OK, nil, now)
		} else {
			s.Config.Error = err.Error()
			s.Config.Failures++
			state.SetComponent(s, apitype.ComponentConfig, apitype.Error, errors.New("configuration rejected; the last good one stays in force (see config.error)"), now)
		}
	})
}

// logRejected logs a rejected load with every problem it found (the
// journal gets them all, one per line in ERR, not the first one only).
func (d *Daemon) logRejected(msg, why string, err error) {
	n := 1
	var es config.Errors
	if errors.As(err, &es) {
		n = len(es)
	}
	d.log.Error(msg, apitype.MessageIDKey, apitype.MsgConfigRejected,
		"why", why, "err", err.Error(), "errors", n, "generation", d.gen, "path", d.opts.ConfigPath)
}

// ExitConfig is rdmad's exit status when it cannot start because its
// configuration has errors and it has accepted none before (EX_CONFIG of
// sysexits.h); rdmad.service does not restart it (RestartPreventExitStatus=).
const ExitConfig = 78

// A ConfigError is Run's error when the configuration at start has errors
// and there is no accepted configuration to run on. cmd/rdmad exits with
// ExitConfig on it.
type ConfigError struct {
	Path string
	Err  error
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("configuration %s rejected, and there is no accepted configuration to run on (rdmad keeps one in its state directory once a configuration has loaded); fix these and start again:\n%v", e.Path, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// loadSavedCopy loads the copy of the last accepted configuration from the
// state directory, or returns nil (and says why) when there is none that
// loads. With no state directory (rdmad run by hand) there is no copy.
func (d *Daemon) loadSavedCopy() *config.Config {
	dir := stateDir(d.opts.StateDir)
	if dir == "" {
		d.log.Warn("no state directory, so no copy of an accepted configuration to run on", "state_dir", DefaultStateDir)
		return nil
	}
	path := config.SavedPath(dir)
	cfg, err := config.LoadSaved(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.log.Warn("no copy of an accepted configuration to run on", "copy", path)
		return nil
	case err != nil:
		// Accepted once, but this rdmad reads it differently (a key gone
		// in an upgrade, a group removed): it is not used.
		d.log.Error("the copy of the last accepted configuration no longer loads; not using it", "copy", path, "err", err.Error())
		return nil
	}
	d.log.Warn("running on the copy of the last accepted configuration", "copy", path, "files", strings.Join(cfg.Files, ","))
	return cfg
}

// saveCopy keeps a copy of cfg, just accepted, in the state directory
// for a start whose files have errors. A failure is logged, not fatal:
// the running configuration is not affected.
func (d *Daemon) saveCopy(cfg *config.Config) {
	dir := stateDir(d.opts.StateDir)
	if dir == "" || len(cfg.Files) == 0 {
		return
	}
	if err := config.SaveCopy(cfg, config.SavedPath(dir)); err != nil {
		d.log.Warn("copy of the accepted configuration not saved; a start with a bad configuration will not find it", "err", err)
	}
}

// refresh re-reads the inventory, and logs the devices that came or went
// and the ports whose state changed since the last read.
func (d *Daemon) refresh(why string) {
	devs, err := d.inv.Read()
	// The PCI functions of RDMA adapters without their device
	// (DeviceMissing): one of eight HCAs lost.
	var lost []apitype.PCIFunction
	if err == nil {
		lost = d.inv.FunctionsWithoutDevice(devs)
	}
	// DCQCN's state of the RoCE netdevs, observed whether or not a policy
	// manages it (mlx5's ecn sysfs files; others have none).
	var ecnState []apitype.NetdevECN
	if err == nil {
		var ecnErrs map[string]error
		ecnState, ecnErrs = readECN(d.inv.Root, devs)
		for _, nd := range slices.Sorted(maps.Keys(ecnErrs)) {
			d.log.Debug("ECN state unreadable", "netdev", nd, "err", ecnErrs[nd])
		}
	}
	// The DCB state (trust, PFC, DSCP map, ETS) of the RoCE netdevs, also
	// observed whether or not a policy manages it.
	var qosState []apitype.NetdevQoS
	if err == nil {
		qosState = d.qos.read(devs)
	}
	now := time.Now()
	if err == nil {
		d.health.observe(devs, now)
	}
	var prev []apitype.Device
	first := false
	d.store.Update(func(s *apitype.Snapshot) {
		if err != nil {
			state.SetComponent(s, apitype.ComponentInventory, apitype.Error, err, now)
		} else {
			if devs == nil {
				devs = []apitype.Device{}
			}
			_, read := s.Components[apitype.ComponentInventory]
			prev, first = s.Devices, !read
			s.Devices = devs
			if !slices.Equal(s.FunctionsWithoutDevice, lost) {
				s.FunctionsWithoutDevice = lost // a new slice only when it changed: the verdict's memo compares it by identity
			}
			s.ECN = ecnState
			s.QoS = qosState
			st, e := apitype.OK, error(nil)
			if len(devs) == 0 {
				st, e = apitype.Unavailable, errors.New(apitype.NoDevice)
			}
			state.SetComponent(s, apitype.ComponentInventory, st, e, now)
		}
		// A device that came or went, or an inventory that cannot be
		// read, changes the health: decide the state and summary again,
		// unless rdmad is starting, reloading or stopping (those set
		// them when they are done).
		if s.State == apitype.Running || s.State == apitype.Degraded {
			d.summarise(s, apitype.Running)
		}
	})
	if err != nil {
		d.log.Debug("inventory read failed", "why", why, "err", err)
		return
	}
	d.log.Debug("inventory read", "why", why, "devices", len(devs))
	if d.klog != nil {
		if !first {
			d.klog.added(prev, devs)
		}
		d.klog.setDevices(devs)
	}
	if !first {
		// The first read at start finds what is there: "rdmad started"
		// counts the devices.
		d.logInventoryChanges(prev, devs)
	}
}

// logInventoryChanges logs what state.Compare finds between two inventory
// reads: the devices that were removed or added, and the ports of devices
// in both whose state or physical state changed (a new device's ports are
// in its "added" line).
func (d *Daemon) logInventoryChanges(prev, next []apitype.Device) {
	diff := state.Compare(&apitype.Snapshot{Devices: prev}, &apitype.Snapshot{Devices: next})
	for _, c := range diff.Devices {
		if c.Added {
			d.log.Info("RDMA device added", apitype.MessageIDKey, apitype.MsgDeviceAdded, "device", c.Name, "ports", c.Ports)
		} else {
			d.log.Warn("RDMA device removed", apitype.MessageIDKey, apitype.MsgDeviceRemoved, "device", c.Name)
		}
	}
	for _, c := range diff.Links {
		if c.Old == nil || c.New == nil {
			continue
		}
		lvl := slog.LevelWarn
		if c.New.State == "ACTIVE" {
			lvl = slog.LevelInfo
		}
		attrs := []any{apitype.MessageIDKey, apitype.MsgPortState, "device", c.Device, "port", c.Port}
		if c.Netdev != "" {
			attrs = append(attrs, "netdev", c.Netdev)
		}
		attrs = append(attrs, "from", c.Old.State+"/"+c.Old.PhysState, "to", c.New.State+"/"+c.New.PhysState)
		d.log.Log(context.Background(), lvl, "RDMA port state changed", attrs...)
	}
}

// summarise sets State and the one-line Summary (also sent as STATUS=).
func (d *Daemon) summarise(s *apitype.Snapshot, st string) {
	if !s.Healthy() {
		st = apitype.Degraded
	}
	s.State = st
	ports, active := 0, 0
	for _, dev := range s.Devices {
		for _, p := range dev.Ports {
			ports++
			if p.State == "ACTIVE" {
				active++
			}
		}
	}
	parts := []string{st}
	if len(s.Devices) == 0 {
		if s.NoDevices() {
			parts = append(parts, apitype.NoDevice)
		} else {
			parts = append(parts, "no RDMA devices")
		}
	} else {
		parts = append(parts, fmt.Sprintf("%d devices, %d/%d ports active", len(s.Devices), active, ports))
	}
	if w := s.Health.Worst(); w != nil {
		parts = append(parts, w.Type+" "+w.Status+": "+oneLine(errors.New(w.Message)))
	}
	parts = append(parts, fmt.Sprintf("config generation %d", s.Config.Generation))
	if s.Config.Error != "" {
		parts = append(parts, "config error: "+oneLine(errors.New(s.Config.Error)))
	}
	s.Summary = strings.Join(parts, "; ")
}

// setComponent records a component's health. Main loop only: other
// goroutines call report.
func (d *Daemon) setComponent(name, st string, err error) {
	now := time.Now()
	d.store.Update(func(s *apitype.Snapshot) { state.SetComponent(s, name, st, err, now) })
}

// listen returns the socket systemd passed (socket activation) or creates it.
func (d *Daemon) listen(cfg *config.Config) (net.Listener, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	for _, ln := range lns {
		if ln == nil {
			continue
		}
		if a, ok := ln.Addr().(*net.UnixAddr); ok {
			d.socket = a.Name
			d.log.Info("using the socket systemd passed", "socket", a.Name)
			return ln, nil
		}
	}
	ln, err := api.Listen(d.socket, socketAccess(cfg))
	if err != nil {
		return nil, err
	}
	d.sock = ln
	return ln, nil
}

func socketAccess(cfg *config.Config) api.SocketAccess {
	return api.SocketAccess{Group: cfg.Daemon.SocketGroup, AdminGroup: cfg.Daemon.AdminGroup}
}

// accessRoles is the access table's configuration (daemon/access) for
// both the socket and D-Bus. A group that does not resolve is no group.
func (d *Daemon) accessRoles(cfg *config.Config) access.Roles {
	p := access.Roles{SelfUID: uint32(os.Geteuid())}
	if g, err := api.LookupGID(cfg.Daemon.SocketGroup); err == nil && g >= 0 {
		p.ReadGID = access.GID(uint32(g))
	}
	if g, err := api.LookupGID(cfg.Daemon.AdminGroup); err == nil && g >= 0 {
		p.AdminGID = access.GID(uint32(g))
	}
	return p
}

// oneLine shortens a multi-line error (config.Errors) for one log line.
func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return fmt.Sprintf("%s (and %d more)", s[:i], strings.Count(s, "\n"))
	}
	return s
}

// faultSwitch returns a channel that receives SIGUSR2 when the test-only
// fault RDMAD_TEST_FAULT=hang-on-sigusr2 is set, so the VM suite can prove
// that systemd's watchdog catches a hung main loop. Otherwise it returns nil.
func faultSwitch() <-chan os.Signal {
	if os.Getenv("RDMAD_TEST_FAULT") != "hang-on-sigusr2" {
		return nil
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR2)
	return c
}

// backend serves the API and D-Bus from the daemon.
type backend struct{ d *Daemon }

// The daemon's backend does every operation of the service contract, the
// optional ones too: a method renamed on one side would otherwise leave
// both transports answering "not supported".
var (
	_ service.Backend         = backend{}
	_ service.ResourceReader  = backend{}
	_ service.BandwidthTester = backend{}
)

func (b backend) Snapshot() *apitype.Snapshot { return b.d.store.Load() }

func (b backend) Reload(ctx context.Context) (apitype.ReloadResult, error) {
	var res apitype.ReloadResult
	err := b.d.do(ctx, func() { res = b.d.reload("request") })
	return res, err
}

func (b backend) PolicyDiff(ctx context.Context) ([]apitype.Change, error) {
	var cs []apitype.Change
	err := b.d.do(ctx, func() { cs, _ = b.d.rec.Pass(b.d.declared(), portsOf(b.d.store.Load().Devices), nil, false) })
	return cs, err
}

func (b backend) PolicyApply(ctx context.Context) (apitype.ApplyResult, error) {
	var res apitype.ApplyResult
	err := b.d.do(ctx, func() {
		d := b.d
		d.refresh("policy apply request")
		res.Changes = d.reconcile(nil)
		res.Policy = d.store.Load().Policy
	})
	return res, err
}

// do runs f on the main loop and waits for it. The queue is short on
// purpose: callers beyond it are told to come back rather than pile up.
func (d *Daemon) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case d.reqs <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	default:
		return errors.New("rdmad is busy with other requests; try again in a moment")
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inventoryReader reads sysfs below root; on the real root, IPoIB netdevs
// are matched to their devices by rdmamap.
func inventoryReader(root string) inventory.Reader {
	r := inventory.Reader{Root: root}
	if root == "" || root == "/" {
		r.IPoIBDevice = rdmamap.GetRdmaDeviceForNetdevice
	}
	return r
}

// DefaultStateDir is rdmad's state directory: StateDirectory=rdmad in
// rdmad.service, and d /var/lib/rdmad in its tmpfiles.d file.
const DefaultStateDir = "/var/lib/rdmad"

// stateDir resolves Options.StateDir (see there). rdmad does not create
// the directory: systemd and the package do.
func stateDir(dir string) string {
	if dir != "" {
		return dir
	}
	// systemd sets STATE_DIRECTORY to the StateDirectory= paths, separated
	// by ':'; rdmad.service names one.
	if env, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":"); filepath.IsAbs(env) {
		return env
	}
	if fi, err := os.Stat(DefaultStateDir); err == nil && fi.IsDir() {
		return DefaultStateDir
	}
	return ""
}
