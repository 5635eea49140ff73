package config

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rdmad/rdmad/policy/memlock"
)

// validate checks values and fills in defaults that depend on other keys,
// one table at a time.
func (c *Config) validate(locs map[string]*locator, hostChecks bool) Errors {
	k := &checker{c: c, locs: locs, hostChecks: hostChecks}
	c.validateDaemon(k)
	c.validateMemlock(k)
	c.validateMRPool(k)
	c.validateProbe(k)
	c.validateHealth(k)
	c.validateMetrics(k)
	c.validateRDMA(k)
	for i := range c.Policies {
		c.Policies[i].validate(k)
	}
	return k.result()
}

// A checker collects validate's errors, each with its file and line.
type checker struct {
	c       *Config
	locs    map[string]*locator
	errs    Errors
	dropped int
	// hostChecks: check what depends on this host (groups), as a start
	// does; Check leaves them out once it has reported them as warnings.
	hostChecks bool
}

// bad records an error for key in file.
func (k *checker) bad(file string, key string, format string, args ...any) {
	// Finding a key's line costs a scan of the file: past maxErrors
	// only count (40,000 bad [[policy]] blocks would take minutes).
	if len(k.errs) >= maxErrors {
		k.dropped++
		return
	}
	key, line := k.locs[file].find(key)
	k.errs = append(k.errs, &Error{File: file, Line: line, Key: key, Msg: fmt.Sprintf(format, clipArgs(args)...)})
}

// setter reports the last file that sets key, or the main file.
func (k *checker) setter(key string) string {
	return lastSetter(k.c.Files, k.locs, key, k.c.Files[0])
}

// result returns the errors, with a count of those not listed.
func (k *checker) result() Errors {
	if k.dropped > 0 {
		return append(k.errs, &Error{File: k.c.Files[0], Msg: fmt.Sprintf("and %d more problems not listed; fix these first", k.dropped)})
	}
	return k.errs
}

// validateDaemon checks [daemon].
func (c *Config) validateDaemon(k *checker) {
	d := &c.Daemon
	if !filepath.IsAbs(d.Socket) {
		k.bad(k.setter("daemon.socket"), "daemon.socket",
			"%q is not an absolute path; use e.g. %q", d.Socket, DefaultSocket)
	}
	for _, g := range []struct{ key, val string }{{"socket_group", d.SocketGroup}, {"admin_group", d.AdminGroup}} {
		if g.val == "" {
			continue
		}
		if !k.hostChecks {
			continue
		}
		if _, err := user.LookupGroup(g.val); err != nil {
			k.bad(k.setter("daemon."+g.key), "daemon."+g.key,
				"group %q does not exist; create it (groupadd --system %s) or remove the key", g.val, g.val)
			if len(k.errs) > 0 && k.errs[len(k.errs)-1].Key == "daemon."+g.key {
				k.errs[len(k.errs)-1].Host = true
			}
		}
	}
	switch d.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		k.bad(k.setter("daemon.log_level"), "daemon.log_level",
			"%q is not a log level; use debug, info, warn or error", d.LogLevel)
	}
	if d.ResyncInterval.Duration < 10e9 {
		k.bad(k.setter("daemon.resync_interval"), "daemon.resync_interval",
			"%s is too short; use at least 10s (events drive reconciliation; this only catches lost ones)", d.ResyncInterval.Duration)
	}
}

// validateMemlock checks [memlock].
func (c *Config) validateMemlock(k *checker) {
	m := &c.Memlock
	// The domain becomes the first field of lines in a pam_limits file:
	// the same check as the renderer's, so that a bad one is reported here
	// with file:line and not only when the file is written.
	if err := memlock.CheckDomain(m.UsersDomain); err != nil {
		k.bad(k.setter("memlock.users_domain"), "memlock.users_domain", "%s", err)
	}
	if !filepath.IsAbs(m.LimitsFile) {
		k.bad(k.setter("memlock.limits_file"), "memlock.limits_file",
			"%q is not an absolute path; use e.g. %q", m.LimitsFile, memlock.DefaultLimitsPath)
	} else if dir := filepath.Dir(filepath.Clean(m.LimitsFile)); !limitsDirOK(dir) || !strings.HasSuffix(m.LimitsFile, ".conf") {
		// pam_limits reads limits.conf and limits.d/*.conf only: a file
		// anywhere else would be written and never applied.
		k.bad(k.setter("memlock.limits_file"), "memlock.limits_file",
			"%q is not read by pam_limits, which reads only %s/*.conf; use e.g. %q", m.LimitsFile, LimitsDir, memlock.DefaultLimitsPath)
	}
}

// LimitsDir is the directory of pam_limits' drop-ins, where
// [memlock] limits_file must be.
const LimitsDir = "/etc/security/limits.d"

// TestLimitsDirEnv names a directory that tests may put limits_file in
// besides LimitsDir (anywhere below it), as they cannot write the host's
// limits.d. rdmad.service never sets it.
const TestLimitsDirEnv = "RDMAD_TEST_LIMITS_DIR"

// limitsDirOK reports whether limits_file may be in dir.
func limitsDirOK(dir string) bool {
	if dir == LimitsDir {
		return true
	}
	t := os.Getenv(TestLimitsDirEnv)
	return t != "" && filepath.IsAbs(t) && (dir == filepath.Clean(t) || strings.HasPrefix(dir, filepath.Clean(t)+"/"))
}

// validateMRPool checks [mrpool].
func (c *Config) validateMRPool(k *checker) {
	for i, cl := range c.MRPool.Classes {
		key := fmt.Sprintf("mrpool.classes[%d]", i)
		if cl.Size < 64 || cl.Size > 1<<30 {
			k.bad(k.setter("mrpool.classes"), key, "size %v is out of range; use 64B to 1GiB", cl.Size)
		}
		if cl.Count < 1 || cl.Count > 1<<20 {
			k.bad(k.setter("mrpool.classes"), key, "count %d is out of range; use 1 to 1048576 (or remove the class)", cl.Count)
		}
	}
	if iv := c.MRPool.CanaryInterval.Duration; iv < time.Second {
		k.bad(k.setter("mrpool.canary_interval"), "mrpool.canary_interval", "%s is too short; use at least 1s", iv)
	}
}

// validateMetrics checks [metrics].
func (c *Config) validateMetrics(k *checker) {
	l := c.Metrics.Listen
	if l == "" {
		return
	}
	if msg := checkListen(l); msg != "" {
		k.bad(k.setter("metrics.listen"), "metrics.listen",
			"%q %s; write host:port, e.g. \"127.0.0.1:10879\" (or remove the key to serve metrics on the socket only)", l, msg)
		return
	}
	if host, _, _ := net.SplitHostPort(l); !c.Metrics.ListenAny && isWildcard(host) {
		k.bad(k.setter("metrics.listen"), "metrics.listen",
			"%q listens on every interface, and the metrics tell whoever reaches the port this node's devices and peers; name one address, e.g. \"127.0.0.1:10879\" or the node's management address, or set listen_any = true in [metrics] if every interface is meant", l)
	}
}

// validate checks one [[policy]] block and fills in its default mode.
func (p *Policy) validate(k *checker) {
	bad := k.bad
	f := p.src.file
	key := func(ks ...string) string {
		return strings.Join(append([]string{fmt.Sprintf("policy[%d]", p.src.index)}, ks...), ".")
	}
	if p.Name == "" {
		bad(f, key(), "every [[policy]] needs a name (name = \"fabric\"); it identifies the policy in status and logs")
	}
	if len(p.Netdevs) == 0 && len(p.Devices) == 0 {
		bad(f, key(), "selects nothing; set netdevs = [\"ens1f*\"] and/or devices = [\"mlx5_*\"]")
	}
	for _, g := range p.Netdevs {
		if _, err := path.Match(g, ""); err != nil {
			bad(f, key("netdevs"), "bad glob %q: %v", g, err)
		}
	}
	for _, g := range p.Devices {
		if _, err := path.Match(g, ""); err != nil {
			bad(f, key("devices"), "bad glob %q: %v", g, err)
		}
	}
	switch p.Mode {
	case "":
		p.Mode = "enforce"
	case "enforce", "observe":
	default:
		bad(f, key("mode"), "%q is not a mode; use \"enforce\" (apply) or \"observe\" (report drift only)", p.Mode)
	}
	if p.MTU != 0 && (p.MTU < 68 || p.MTU > 65535) {
		bad(f, key("mtu"), "%d is out of range; use 68 to 65535 (the netdev's own limits are checked when applied)", p.MTU)
	}
	if p.MinRate != "" {
		if v, err := ParseRate(p.MinRate); err != nil {
			bad(f, key("min_rate"), "%v", err)
		} else {
			p.MinRateGbps = v
		}
	}
	if p.MTU == 0 && p.QoS == nil && p.RoCE == nil && p.ECN == nil && p.MinRate == "" && !p.managesDepth() {
		bad(f, key(), "manages nothing; set mtu, [policy.qos], [policy.ecn], [policy.roce], [policy.rdma], [policy.rings], [policy.channels], [policy.coalesce], firmware or min_rate")
	}
	if q := p.QoS; q != nil {
		switch q.Trust {
		case "", "pcp", "dscp":
		default:
			bad(f, key("qos", "trust"), "%q is not a trust mode; use \"pcp\" or \"dscp\"", q.Trust)
		}
		seen := map[int]bool{}
		for _, prio := range q.PFC {
			if prio < 0 || prio > 7 {
				bad(f, key("qos", "pfc"), "priority %d is out of range; list the priorities 0-7 that get PFC, e.g. pfc = [3]", prio)
			} else if seen[prio] {
				bad(f, key("qos", "pfc"), "priority %d is listed twice; list each PFC priority once (pfc = [3], not the 8 flags of mlnx_qos)", prio)
			}
			seen[prio] = true
		}
		if q.RawDSCPToPrio != nil {
			q.DSCPToPrio = make(map[int]int, len(q.RawDSCPToPrio))
		}
		for k, prio := range q.RawDSCPToPrio {
			dscp, err := strconv.Atoi(k)
			if err != nil || dscp < 0 || dscp > 63 {
				bad(f, key("qos", "dscp_to_prio", k), "%q is not a DSCP code point; use 0 to 63", k)
				continue
			}
			if prio < 0 || prio > 7 {
				bad(f, key("qos", "dscp_to_prio", k), "priority %d is out of range; use 0 to 7", prio)
				continue
			}
			q.DSCPToPrio[dscp] = prio
		}
	}
	p.validateDepth(k, key)
	if e := p.ECN; e != nil {
		if e.NP == nil && e.RP == nil {
			bad(f, key("ecn"), "[policy.ecn] sets neither np nor rp; list the priorities DCQCN is enabled on, e.g. np = [3] and rp = [3], or remove the table")
		}
		for _, pt := range []struct {
			name, what string
			prio       []int
		}{{"np", "notification point", e.NP}, {"rp", "reaction point", e.RP}} {
			seen := map[int]bool{}
			for _, prio := range pt.prio {
				if prio < 0 || prio > 7 {
					bad(f, key("ecn", pt.name), "priority %d is out of range; list the priorities 0-7 on which the %s is enabled, e.g. %s = [3] (the RoCE priority)", prio, pt.what, pt.name)
				} else if seen[prio] {
					bad(f, key("ecn", pt.name), "priority %d is listed twice; list each priority once, e.g. %s = [3]", prio, pt.name)
				}
				seen[prio] = true
			}
		}
	}
	if r := p.RoCE; r != nil {
		if r.TOS != nil && (*r.TOS < 0 || *r.TOS > 255) {
			bad(f, key("roce", "tos"), "%d is out of range; use 0 to 255 (e.g. 106 for DSCP 26 with ECN)", *r.TOS)
		}
		switch r.Mode {
		case "", "v1", "v2":
		default:
			bad(f, key("roce", "mode"), "%q is not a RoCE mode; use \"v1\" or \"v2\"", r.Mode)
		}
	}
}

// maxShown is the most bytes of a configured string an error message
// shows.
const maxShown = 128

// clipArgs shortens long strings among an error message's arguments: a
// value may be a megabyte long, and the message goes to status, D-Bus and
// the journal. Only strings are touched; validate formats no raw decoded
// values (a nested []any printed with %v once overflowed the stack).
func clipArgs(args []any) []any {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > maxShown {
			cut := maxShown
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			args[i] = s[:cut] + fmt.Sprintf("...(%d bytes)", len(s))
		}
	}
	return args
}

// clip shortens one string for an error message (see clipArgs).
func clip(s string) string { return clipArgs([]any{s})[0].(string) }

// checkListen returns what is wrong with a [metrics] listen address, or "".
func checkListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "is not host:port"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Sprintf("has port %q; use a number from 1 to 65535", port)
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Sprintf("has host %q, which is not an IP address or localhost", host)
		}
	}
	return ""
}

// isWildcard reports whether a listen host binds every interface.
func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsUnspecified()
}

// lastSetter reports the last of files that sets key, or def.
func lastSetter(files []string, locs map[string]*locator, key, def string) string {
	for i := len(files) - 1; i >= 0; i-- {
		if locs[files[i]].has(key) {
			return files[i]
		}
	}
	return def
}

// validateProbe checks [probe] and the [[peer]] blocks.
func (c *Config) validateProbe(k *checker) {
	bad := k.bad
	pr := &c.Probe
	at := func(key string) string { return k.setter("probe." + key) }
	if iv := pr.LoopbackInterval.Duration; iv < 10*time.Millisecond || iv > time.Hour {
		bad(at("loopback_interval"), "probe.loopback_interval", "%s is out of range; use 10ms to 1h (default 1s)", iv)
	}
	switch pr.Poll {
	case "event", "busy":
	default:
		bad(at("poll"), "probe.poll",
			"%q is not a poll mode; use \"event\" (the default: sleep on the completion channel after a 1 ms spin) or \"busy\" (poll until the completion: no wakeup in the RTT, a core held while it spins)", pr.Poll)
	}
	if tc := pr.TrafficClass; tc != nil && (*tc < 0 || *tc > 255) {
		bad(at("traffic_class"), "probe.traffic_class",
			"%d is out of range; use 0 to 255, the IP ToS byte (e.g. 104 for DSCP 26), or remove the key to follow [policy.roce] tos", *tc)
	}
	if pr.PeersFile != "" && !filepath.IsAbs(pr.PeersFile) {
		bad(at("peers_file"), "probe.peers_file", "%q is not an absolute path; use e.g. \"/etc/rdmad/peers\"", pr.PeersFile)
	}
	if pr.Port < 1 || pr.Port > 65535 || pr.Port == 4791 {
		bad(at("port"), "probe.port", "%d cannot be the control port; use 1 to 65535 except 4791 (RoCE v2's own port); default %d", pr.Port, DefaultProbePort)
	}
	if msg := CheckGroupLabel(pr.Group); msg != "" {
		bad(at("group"), "probe.group", "%s", msg)
	}
	iv := pr.PeerInterval.Duration
	if iv < 10*time.Millisecond || iv > time.Hour {
		bad(at("peer_interval"), "probe.peer_interval", "%s is out of range; use 10ms to 1h (default 1s)", iv)
	}
	if to := pr.PeerTimeout.Duration; to < time.Millisecond || to > iv {
		bad(at("peer_timeout"), "probe.peer_timeout", "%s is out of range; use 1ms up to peer_interval (%s)", to, iv)
	}
	for _, k := range []struct {
		key string
		v   int
	}{{"down_after", pr.DownAfter}, {"up_after", pr.UpAfter}} {
		if k.v < 1 || k.v > 100 {
			bad(at(k.key), "probe."+k.key, "%d is out of range; use 1 to 100 probes", k.v)
		}
	}
	if pr.LossThreshold <= 0 || pr.LossThreshold >= 100 {
		bad(at("loss_threshold"), "probe.loss_threshold", "%g is out of range; use a percentage above 0 and below 100 (default 1)", pr.LossThreshold)
	}
	if pr.RTTThreshold.Duration < 0 {
		bad(at("rtt_threshold"), "probe.rtt_threshold", "%s is negative; use e.g. \"500us\", or 0 to judge by loss only", pr.RTTThreshold.Duration)
	}
	if pr.Window < 10 || pr.Window > 10000 {
		bad(at("window"), "probe.window", "%d is out of range; use 10 to 10000 probes", pr.Window)
	}
	if pr.MaxPeers < 1 || pr.MaxPeers > MaxProbePeers {
		bad(at("max_peers"), "probe.max_peers", "%d is out of range; use 1 to %d", pr.MaxPeers, MaxProbePeers)
	}
	if pr.Flows < 1 || pr.Flows > MaxProbeFlows {
		bad(at("flows"), "probe.flows", "%d is out of range; use 1 to %d probe flows (UDP source ports) per path; default %d, 1 probes one ECMP path", pr.Flows, MaxProbeFlows, DefaultProbeFlows)
	}
	if pr.Rotate.Duration < time.Second {
		bad(at("rotate"), "probe.rotate", "%s is too short; use at least 1s (default 1m)", pr.Rotate.Duration)
	}
	// The key itself is read where the peer probes are configured (its
	// owner and mode are checked there, at every start and reload); here
	// only what the configuration alone can say.
	if pr.KeyFile != "" && !filepath.IsAbs(pr.KeyFile) {
		bad(at("key_file"), "probe.key_file", "%q is not an absolute path; use e.g. \"/etc/rdmad/fleet.key\"", pr.KeyFile)
	}
	switch pr.Auth {
	case "":
		if pr.KeyFile != "" {
			pr.Auth = "require"
		}
	case "require", "prefer":
		if pr.KeyFile == "" {
			bad(at("auth"), "probe.auth", "%q needs a key: set [probe] key_file (or remove auth)", pr.Auth)
		}
	default:
		bad(at("auth"), "probe.auth", "%q is not an auth mode; use \"require\" (default with key_file) or \"prefer\" (during a rollout: unauthenticated peers are still answered, but flagged)", pr.Auth)
	}
	for _, p := range c.Peers {
		key := fmt.Sprintf("peer[%d]", p.src.index)
		if msg := CheckPeerAddress(p.Address); msg != "" {
			bad(p.src.file, key+".address", "%s", msg)
		}
		if msg := CheckGroupLabel(p.Group); msg != "" {
			bad(p.src.file, key+".group", "%s", msg)
		}
	}
}

// CheckPeerAddress returns what is wrong with a peer address (an IP
// address or a host name), or "" if nothing is.
func CheckPeerAddress(a string) string {
	if a == "" {
		return "every [[peer]] needs an address, e.g. address = \"192.0.2.17\""
	}
	if _, err := netip.ParseAddr(a); err == nil {
		return ""
	}
	if len(a) > 253 || !hostRE.MatchString(a) {
		return fmt.Sprintf("%q is neither an IP address nor a host name", a)
	}
	return ""
}

// CheckGroupLabel returns what is wrong with a group label ([probe] group,
// [[peer]] group, the second field of a peers_file line), or "" if nothing
// is; "" is no group. A label travels into rdmactl peers, metric labels
// and D-Bus strings (which must be valid UTF-8), so it is checked like an
// address: a few printable ASCII characters, nothing a terminal or a
// parser could take for anything else.
func CheckGroupLabel(g string) string {
	if g == "" || groupRE.MatchString(g) {
		return ""
	}
	return fmt.Sprintf("%.70q is not a group label; use 1 to 64 letters, digits and . _ - : / starting with a letter or digit, e.g. \"tor-a\"", g)
}

var groupRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$`)

var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)
