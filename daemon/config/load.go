package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/rdmad/rdmad/policy/memlock"
)

// An Error is one problem in one configuration file.
type Error struct {
	File string
	Line int    // 0 when unknown
	Key  string // dotted key, with [i] for the i-th [[block]] of the file
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		b.WriteString(": ")
		b.WriteString(e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one load, in file order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Load reads the main file at path and the drop-ins next to it, merges them
// (later files win: tables key by key, [[policy]] blocks by name) and
// validates the result. A missing main file is an error that wraps
// fs.ErrNotExist; a missing drop-in directory is not.
func Load(path string) (*Config, error) {
	files, err := filepath.Glob(DropIns(path))
	if err != nil {
		return nil, fmt.Errorf("config: list drop-ins of %s: %w", path, err)
	}
	sort.Strings(files)
	files = append([]string{path}, files...)

	cfg := Default()
	locs := map[string]*locator{}
	var errs Errors
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			if i == 0 {
				return nil, fmt.Errorf("config: read %s: %w", f, err)
			}
			// A drop-in that vanished between Glob and ReadFile (an editor
			// renaming it) is not part of this load.
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			errs = append(errs, &Error{File: f, Msg: err.Error()})
			continue
		}
		cfg.Files = append(cfg.Files, f)
		locs[f] = newLocator(data)
		errs = append(errs, decodeFile(cfg, f, data, locs[f])...)
	}
	if len(errs) == 0 {
		errs = append(errs, cfg.validate(locs)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

// decodeFile merges one file into cfg.
func decodeFile(cfg *Config, file string, data []byte, loc *locator) Errors {
	prev := cfg.Policies
	cfg.Policies = nil
	prevPeers := cfg.Peers
	cfg.Peers = nil
	md, err := toml.NewDecoder(strings.NewReader(string(data))).Decode(cfg)
	added := cfg.Policies
	cfg.Policies = prev
	// [[peer]] blocks of all files add up; a repeated address is one peer
	// (the later block's group wins).
	for i, p := range cfg.Peers {
		cfg.Peers[i].src = source{file: file, index: i}
		prevPeers = mergePeer(prevPeers, cfg.Peers[i], p.Address)
	}
	cfg.Peers = prevPeers
	if err != nil {
		e := decodeError(file, err)
		e.Key = loc.at(e.Key, e.Line)
		return Errors{e}
	}
	var errs Errors
	for _, k := range md.Undecoded() {
		key, line := loc.find(strings.Join(k, "."))
		errs = append(errs, &Error{File: file, Line: line, Key: key,
			Msg: "unknown key; see rdmad.toml(5) or /etc/rdmad/rdmad.toml for the keys rdmad knows"})
	}
	seen := map[string]int{}
	for i := range added {
		p := added[i]
		p.src = source{file: file, index: i}
		if p.Name != "" {
			if j, dup := seen[p.Name]; dup {
				key, line := loc.find(fmt.Sprintf("policy[%d].name", i))
				errs = append(errs, &Error{File: file, Line: line, Key: key,
					Msg: fmt.Sprintf("policy %q is declared twice in this file (also policy[%d]); give each block its own name", p.Name, j)})
				continue
			}
			seen[p.Name] = i
		}
		cfg.Policies = mergePolicy(cfg.Policies, p)
	}
	return errs
}

// mergePolicy replaces the policy of the same name, or appends p.
func mergePolicy(ps []Policy, p Policy) []Policy {
	for i := range ps {
		if ps[i].Name == p.Name && p.Name != "" {
			out := append([]Policy(nil), ps...)
			out[i] = p
			return out
		}
	}
	return append(ps, p)
}

var decodeErrRE = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)

// decodeError turns a BurntSushi/toml error into an *Error with a line and a
// key wherever the decoder knew them.
func decodeError(file string, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{File: file, Line: pe.Position.Line, Key: pe.LastKey, Msg: pe.Message}
	}
	if m := decodeErrRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Key: m[2], Msg: strings.TrimPrefix(m[3], "incompatible types: ")}
	}
	return &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// validate checks values and fills in defaults that depend on other keys.
func (c *Config) validate(locs map[string]*locator) Errors {
	var errs Errors
	bad := func(file string, key string, format string, args ...any) {
		k, line := locs[file].find(key)
		errs = append(errs, &Error{File: file, Line: line, Key: k, Msg: fmt.Sprintf(format, args...)})
	}
	main := c.Files[0]
	d := &c.Daemon
	if !filepath.IsAbs(d.Socket) {
		bad(lastSetter(c.Files, locs, "daemon.socket", main), "daemon.socket",
			"%q is not an absolute path; use e.g. %q", d.Socket, DefaultSocket)
	}
	for _, g := range []struct{ key, val string }{{"socket_group", d.SocketGroup}, {"admin_group", d.AdminGroup}} {
		if g.val == "" {
			continue
		}
		if _, err := user.LookupGroup(g.val); err != nil {
			bad(lastSetter(c.Files, locs, "daemon."+g.key, main), "daemon."+g.key,
				"group %q does not exist; create it (groupadd --system %s) or remove the key", g.val, g.val)
		}
	}
	switch d.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad(lastSetter(c.Files, locs, "daemon.log_level", main), "daemon.log_level",
			"%q is not a log level; use debug, info, warn or error", d.LogLevel)
	}
	if d.ResyncInterval.Duration < 10e9 {
		bad(lastSetter(c.Files, locs, "daemon.resync_interval", main), "daemon.resync_interval",
			"%s is too short; use at least 10s (events drive reconciliation; this only catches lost ones)", d.ResyncInterval.Duration)
	}

	m := &c.Memlock
	if m.UsersDomain == "" || strings.ContainsAny(m.UsersDomain, " \t\n") {
		bad(lastSetter(c.Files, locs, "memlock.users_domain", main), "memlock.users_domain",
			"%q is not a limits.conf domain; use \"*\", \"@group\" or a user name", m.UsersDomain)
	}
	if !filepath.IsAbs(m.LimitsFile) {
		bad(lastSetter(c.Files, locs, "memlock.limits_file", main), "memlock.limits_file",
			"%q is not an absolute path; use e.g. %q", m.LimitsFile, memlock.DefaultLimitsPath)
	}

	for i, cl := range c.MRPool.Classes {
		key := fmt.Sprintf("mrpool.classes[%d]", i)
		if cl.Size < 64 || cl.Size > 1<<30 {
			bad(lastSetter(c.Files, locs, "mrpool.classes", main), key, "size %v is out of range; use 64B to 1GiB", cl.Size)
		}
		if cl.Count < 1 || cl.Count > 1<<20 {
			bad(lastSetter(c.Files, locs, "mrpool.classes", main), key, "count %d is out of range; use 1 to 1048576 (or remove the class)", cl.Count)
		}
	}
	if iv := c.MRPool.CanaryInterval.Duration; iv < time.Second {
		bad(lastSetter(c.Files, locs, "mrpool.canary_interval", main), "mrpool.canary_interval", "%s is too short; use at least 1s", iv)
	}
	if iv := c.Probe.LoopbackInterval.Duration; iv < 10*time.Millisecond || iv > time.Hour {
		bad(lastSetter(c.Files, locs, "probe.loopback_interval", main), "probe.loopback_interval", "%s is out of range; use 10ms to 1h (default 1s)", iv)
	}

	errs = append(errs, c.validateProbe(locs, bad)...)

	if l := c.Metrics.Listen; l != "" {
		if msg := checkListen(l); msg != "" {
			bad(lastSetter(c.Files, locs, "metrics.listen", main), "metrics.listen",
				"%q %s; write host:port, e.g. \"127.0.0.1:9879\" (or remove the key to serve metrics on the socket only)", l, msg)
		}
	}

	for i := range c.Policies {
		p := &c.Policies[i]
		f := p.src.file
		key := func(k ...string) string {
			return strings.Join(append([]string{fmt.Sprintf("policy[%d]", p.src.index)}, k...), ".")
		}
		if p.Name == "" {
			bad(f, key(), "every [[policy]] needs a name (name = \"fabric\"); it identifies the policy in status and logs")
		}
		if len(p.Netdevs) == 0 && len(p.Devices) == 0 {
			bad(f, key(), "policy %q selects nothing; set netdevs = [\"ens1f*\"] and/or devices = [\"mlx5_*\"]", p.Name)
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
		if p.MTU == 0 && p.QoS == nil && p.RoCE == nil {
			bad(f, key(), "policy %q manages nothing; set mtu, [policy.qos] or [policy.roce]", p.Name)
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
	return errs
}

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

// lastSetter reports the last of files that sets key, or def.
func lastSetter(files []string, locs map[string]*locator, key, def string) string {
	for i := len(files) - 1; i >= 0; i-- {
		if locs[files[i]].has(key) {
			return files[i]
		}
	}
	return def
}

func mergePeer(ps []Peer, p Peer, addr string) []Peer {
	for i := range ps {
		if ps[i].Address == addr {
			ps[i] = p
			return ps
		}
	}
	return append(ps, p)
}

// validateProbe checks the peer-probe keys of [probe] and the [[peer]]
// blocks.
func (c *Config) validateProbe(locs map[string]*locator, bad func(file, key, format string, args ...any)) Errors {
	main := c.Files[0]
	pr := &c.Probe
	at := func(key string) string { return lastSetter(c.Files, locs, "probe."+key, main) }
	if pr.PeersFile != "" && !filepath.IsAbs(pr.PeersFile) {
		bad(at("peers_file"), "probe.peers_file", "%q is not an absolute path; use e.g. \"/etc/rdmad/peers\"", pr.PeersFile)
	}
	if pr.Port < 1 || pr.Port > 65535 || pr.Port == 4791 {
		bad(at("port"), "probe.port", "%d cannot be the control port; use 1 to 65535 except 4791 (RoCE v2's own port); default %d", pr.Port, DefaultProbePort)
	}
	if strings.ContainsAny(pr.Group, " \t\n") {
		bad(at("group"), "probe.group", "%q: a group label has no spaces, e.g. \"tor-a\"", pr.Group)
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
	if pr.MaxPeers < 1 || pr.MaxPeers > 4096 {
		bad(at("max_peers"), "probe.max_peers", "%d is out of range; use 1 to 4096", pr.MaxPeers)
	}
	if pr.Rotate.Duration < time.Second {
		bad(at("rotate"), "probe.rotate", "%s is too short; use at least 1s (default 1m)", pr.Rotate.Duration)
	}
	for _, p := range c.Peers {
		key := fmt.Sprintf("peer[%d]", p.src.index)
		if msg := CheckPeerAddress(p.Address); msg != "" {
			bad(p.src.file, key+".address", "%s", msg)
		}
		if strings.ContainsAny(p.Group, " \t\n") {
			bad(p.src.file, key+".group", "%q: a group label has no spaces, e.g. \"tor-a\"", p.Group)
		}
	}
	return nil
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

var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)
