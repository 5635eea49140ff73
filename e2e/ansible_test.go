//go:build e2e

package e2e

// The Ansible role of deploy/ansible, run as an operator's control node
// would (#27 item 8): ansible-playbook on node 1 against both nodes (node
// 2 over ssh, node 1 itself locally) installs the .deb, distributes the fleet key, templates rdmad.toml
// (validate: rdmad --check-config) and reloads rdmad; a second run changes
// nothing; a third with a configuration that rdmad refuses fails on the
// template task, and every node runs on what it had. Both nodes are left as
// they were found (configuration, key file, sshd, authorized_keys).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

//e2e:nodes 2

const (
	// ansRoleDir is where test/vm/run stages deploy/ansible (read-only).
	ansRoleDir = "/mnt/vm/project/deploy/ansible"
	ansConfig  = "/etc/rdmad/rdmad.toml"
	ansKeyFile = "/etc/rdmad/fleet.key"
	// ansPkgDir is the role's rdmad_package_dir default.
	ansPkgDir = "/var/cache/rdmad-ansible"
	// ansRemoteTmp is Ansible's temporary directory on the nodes
	// (ansible_remote_tmp): removed by the cleanup.
	ansRemoteTmp = "/tmp/.ansible-rdmad-e2e"
	ansPolicy    = "ansible-e2e"
	// ansRunTimeout bounds one ansible-playbook run (under TCG a task
	// costs seconds per node).
	ansRunTimeout = 10 * time.Minute
)

// ansNode is one node of the bed as the test sees it: its number (1 is
// this node, 2 is reached with vmnode) and its name in the inventory.
type ansNode struct {
	n    int
	name string
	addr string
}

// run runs a command on the node.
func (nd ansNode) run(name string, args ...string) (string, error) {
	if nd.n == 1 {
		return run(name, args...)
	}
	return run("vmnode", append([]string{strconv.Itoa(nd.n), name}, args...)...)
}

func (nd ansNode) mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := nd.run(name, args...)
	if err != nil {
		t.Fatalf("%s: %v", nd.name, err)
	}
	return strings.TrimSpace(out)
}

// readFile returns a file's bytes, and false when it does not exist
// (base64 over vmnode: binary safe).
func (nd ansNode) readFile(t *testing.T, path string) ([]byte, bool) {
	t.Helper()
	out := nd.mustRun(t, "sh", "-c", `if [ -e "$1" ]; then printf +; base64 -w0 "$1"; fi`, "sh", path)
	if out == "" {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(out, "+"))
	if err != nil {
		t.Fatalf("%s: read %s: %v", nd.name, path, err)
	}
	return b, true
}

// writeFile replaces path with data (mode, root's), by a rename as an
// operator's tool would.
func (nd ansNode) writeFile(path string, data []byte, mode string) error {
	_, err := nd.run("sh", "-c", `umask 077 && printf %s "$1" | base64 -d >"$2.e2e-tmp" && chmod "$3" "$2.e2e-tmp" && mv -f "$2.e2e-tmp" "$2"`,
		"sh", base64.StdEncoding.EncodeToString(data), path, mode)
	return err
}

func (nd ansNode) exists(t *testing.T, path string) bool {
	t.Helper()
	return nd.mustRun(t, "sh", "-c", `if [ -e "$1" ]; then echo yes; fi`, "sh", path) == "yes"
}

func (nd ansNode) mainPID(t *testing.T) int {
	t.Helper()
	pid, err := strconv.Atoi(nd.mustRun(t, "systemctl", "show", "--property=MainPID", "--value", "rdmad.service"))
	if err != nil || pid == 0 {
		t.Fatalf("%s: rdmad.service MainPID %d (%v): not running", nd.name, pid, err)
	}
	return pid
}

// clock returns the node's own time in seconds, for journalctl --since.
func (nd ansNode) clock(t *testing.T) int64 {
	t.Helper()
	s, err := strconv.ParseInt(nd.mustRun(t, "date", "+%s"), 10, 64)
	if err != nil {
		t.Fatalf("%s: date: %v", nd.name, err)
	}
	return s
}

// ansStatus is the part of rdmactl status --json this test reads.
type ansStatus struct {
	State  string `json:"state"`
	Config struct {
		Files      []string `json:"files"`
		Generation uint64   `json:"generation"`
		Error      string   `json:"error"`
	} `json:"config"`
	Policy struct {
		Policies []struct {
			Name string `json:"name"`
			Mode string `json:"mode"`
		} `json:"policies"`
	} `json:"policy"`
}

func (s ansStatus) hasPolicy(name string) bool {
	for _, p := range s.Policy.Policies {
		if p.Name == name {
			return true
		}
	}
	return false
}

func (nd ansNode) status(t *testing.T) ansStatus {
	t.Helper()
	// rdmactl status exits non-zero on an unhealthy node with its JSON
	// all the same: decode what it printed.
	out, err := nd.run("rdmactl", "status", "--json")
	var s ansStatus
	if derr := json.Unmarshal([]byte(out), &s); derr != nil {
		t.Fatalf("%s: rdmactl status --json: %v (%v) in %q", nd.name, derr, err, out)
	}
	return s
}

// sighupReloads counts rdmad's "configuration loaded" records of a reload
// by SIGHUP (systemctl reload: the role's handler) since the node's time
// since.
func (nd ansNode) sighupReloads(t *testing.T, since int64) int {
	t.Helper()
	out := nd.mustRun(t, "journalctl", "-u", "rdmad.service", "--no-pager", "-o", "json", "--since", "@"+strconv.FormatInt(since, 10))
	n := 0
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			Message string `json:"MESSAGE"`
		}
		if line == "" || json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if strings.HasPrefix(e.Message, "configuration loaded") && strings.Contains(e.Message, "why=SIGHUP") {
			n++
		}
	}
	return n
}

// ansRecap is one host's line of the PLAY RECAP.
type ansRecap struct{ ok, changed, unreachable, failed int }

var ansRecapRE = regexp.MustCompile(`(?m)^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)`)

// ansParseRecap returns the PLAY RECAP's counts by host and the recap's
// text (for the log).
func ansParseRecap(out string) (map[string]ansRecap, string) {
	text := ""
	if i := strings.LastIndex(out, "PLAY RECAP"); i >= 0 {
		text = strings.TrimSpace(out[i:])
	}
	m := map[string]ansRecap{}
	for _, g := range ansRecapRE.FindAllStringSubmatch(text, -1) {
		atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
		m[g[1]] = ansRecap{ok: atoi(g[2]), changed: atoi(g[3]), unreachable: atoi(g[4]), failed: atoi(g[5])}
	}
	return m, text
}

// ansFatals returns the lines of the output that report a failed task,
// each cut to a bound, so that a failure's log stays readable.
func ansFatals(out string) string {
	var b strings.Builder
	task, printed := "", ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "TASK [") {
			task = l
			continue
		}
		if strings.HasPrefix(l, "fatal: ") || strings.HasPrefix(l, "failed: ") || strings.HasPrefix(l, "ERROR!") {
			if task != printed {
				b.WriteString(task + "\n")
				printed = task
			}
			if len(l) > 2000 {
				l = l[:2000] + " ..."
			}
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// ansBed is the control node's side: the staged playbook, inventory and
// ssh key.
type ansBed struct {
	dir   string // the copy of deploy/ansible, where ansible-playbook runs
	inv   string
	key   string // ssh private key
	cpDir string // ssh ControlPath directory (mux masters ended by the cleanup)
	env   []string
}

// playbook runs ansible-playbook site.yml with the extra vars of varsFile
// and returns its output (stdout and stderr) and exit status; the recap is
// logged, and the failed tasks when it fails.
func (b ansBed) playbook(t *testing.T, what, varsFile string, extra ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ansRunTimeout)
	defer cancel()
	args := append([]string{"-i", b.inv, "site.yml", "-e", "@" + varsFile}, extra...)
	cmd := exec.CommandContext(ctx, "ansible-playbook", args...)
	cmd.Dir, cmd.Env = b.dir, b.env
	start := time.Now()
	out := &ansTimedOutput{start: start}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	rc := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			t.Fatalf("%s: ansible-playbook %s: %v (ctx %v); output tail:\n%s", what, strings.Join(args, " "), err, ctx.Err(), ansTail(out.String(), 4000))
		}
		rc = ee.ExitCode()
	}
	s := out.String()
	_, recap := ansParseRecap(s)
	t.Logf("%s: ansible-playbook exit %d after %v; %s\n%s", what, rc, time.Since(start).Round(100*time.Millisecond), out.times(), recap)
	if rc != 0 {
		t.Logf("%s: failed tasks:\n%s", what, ansFatals(s))
	}
	return s, rc
}

// ansTimedOutput collects ansible-playbook's output and when each task's
// banner came (TCG makes every task cost seconds: the log says which).
type ansTimedOutput struct {
	start   time.Time
	buf     bytes.Buffer
	partial []byte
	marks   []ansMark
}

type ansMark struct {
	name string
	at   time.Duration
}

// Write is called by one goroutine at a time (exec.Cmd: Stdout and Stderr
// are the same writer).
func (o *ansTimedOutput) Write(p []byte) (int, error) {
	o.buf.Write(p)
	o.partial = append(o.partial, p...)
	for {
		i := bytes.IndexByte(o.partial, '\n')
		if i < 0 {
			break
		}
		line := string(o.partial[:i])
		o.partial = o.partial[i+1:]
		for _, prefix := range []string{"TASK [", "RUNNING HANDLER [", "PLAY RECAP"} {
			if strings.HasPrefix(line, prefix) {
				name := strings.TrimRight(strings.TrimSuffix(strings.TrimPrefix(line, prefix), "*"), "* ]")
				o.marks = append(o.marks, ansMark{name: name, at: time.Since(o.start)})
			}
		}
	}
	return len(p), nil
}

func (o *ansTimedOutput) String() string { return o.buf.String() }

// times says how long the start took and each task after it.
func (o *ansTimedOutput) times() string {
	if len(o.marks) == 0 {
		return "no task started"
	}
	parts := []string{fmt.Sprintf("start %.1fs", o.marks[0].at.Seconds())}
	for i := 0; i+1 < len(o.marks); i++ {
		parts = append(parts, fmt.Sprintf("%s %.1fs", strings.TrimPrefix(o.marks[i].name, "rdmad : "), (o.marks[i+1].at-o.marks[i].at).Seconds()))
	}
	return "task times: " + strings.Join(parts, ", ")
}

// ansTail returns the last n bytes of s.
func ansTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// ansSetup prepares the other nodes for ssh from node 1 (a key of its own
// in root's authorized_keys, sshd started) and stages the playbook with an
// inventory of all; the cleanup puts the nodes back.
func ansSetup(t *testing.T, nodes []ansNode) ansBed {
	t.Helper()
	if _, err := exec.LookPath("ansible-playbook"); err != nil {
		t.Fatalf("ansible-playbook: %v; the image should have ansible-core (test/vm/packages)", err)
	}
	if _, err := os.Stat(filepath.Join(ansRoleDir, "site.yml")); err != nil {
		t.Fatalf("the playbook staged by test/vm/run: %v", err)
	}
	dir := t.TempDir()
	b := ansBed{dir: filepath.Join(dir, "ansible"), inv: filepath.Join(dir, "inventory.ini"),
		key: filepath.Join(dir, "id_ed25519"), cpDir: filepath.Join(dir, "cp")}
	mustRun(t, "cp", "-r", ansRoleDir, b.dir)
	if err := os.Mkdir(b.cpDir, 0o700); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rdmad-e2e-ansible", "-f", b.key)
	pub, err := os.ReadFile(b.key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		if nd.n != 1 {
			ansSSHNode(t, nd, strings.TrimSpace(string(pub)))
		}
	}
	t.Cleanup(func() {
		// ssh's mux masters (ControlPersist) would linger for a minute.
		socks, _ := filepath.Glob(filepath.Join(b.cpDir, "*"))
		for _, s := range socks {
			_, _ = run("ssh", "-o", "ControlPath="+s, "-O", "exit", "rdmad-e2e")
		}
	})

	// Node 1 is the control node and manages itself without ssh, as an
	// operator's would (under TCG, ssh to itself would pay the encryption
	// twice on node 1's CPU); node 2 is reached over ssh.
	var inv strings.Builder
	inv.WriteString("[rdmad]\n")
	for _, nd := range nodes {
		conn := ""
		if nd.n == 1 {
			conn = " ansible_connection=local"
		}
		fmt.Fprintf(&inv, "%s ansible_host=%s%s\n", nd.name, nd.addr, conn)
	}
	// root logs in: no sudo in the image, and none needed
	// (ansible_become overrides the play's become).
	fmt.Fprintf(&inv, "\n[rdmad:vars]\nansible_user=root\nansible_become=false\nansible_ssh_private_key_file=%s\n"+
		"ansible_ssh_common_args='-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR'\n"+
		"ansible_python_interpreter=/usr/bin/python3\nansible_remote_tmp=%s\n", b.key, ansRemoteTmp)
	if err := os.WriteFile(b.inv, []byte(inv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	b.env = append(os.Environ(),
		"ANSIBLE_HOME="+filepath.Join(dir, "home"),
		"ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, "tmp"),
		"ANSIBLE_SSH_CONTROL_PATH_DIR="+b.cpDir,
		// The defaults less -C: compression on a local link costs CPU
		// under TCG and saves nothing.
		"ANSIBLE_SSH_ARGS=-o ControlMaster=auto -o ControlPersist=120s",
		"ANSIBLE_PIPELINING=1",
		"ANSIBLE_NOCOLOR=1",
		"ANSIBLE_RETRY_FILES_ENABLED=0",
		"ANSIBLE_DISPLAY_SKIPPED_HOSTS=0",
		"ANSIBLE_HOST_KEY_CHECKING=0",
		"ANSIBLE_FORKS=5",
		"LC_ALL=C.UTF-8",
		// Each line as it is printed: the task times are read from the
		// banners' arrival.
		"PYTHONUNBUFFERED=1",
	)
	return b
}

// ansSSHNode puts pub into root's authorized_keys on nd and starts sshd,
// and registers the cleanup that undoes both.
func ansSSHNode(t *testing.T, nd ansNode, pub string) {
	t.Helper()
	const ak = "/root/.ssh/authorized_keys"
	sshDir := nd.exists(t, "/root/.ssh")
	old, had := nd.readFile(t, ak)
	wasActive := nd.mustRun(t, "sh", "-c", "systemctl is-active ssh.service || true") == "active"
	t.Cleanup(func() {
		var errs []string
		note := func(err error) {
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
		if had {
			note(nd.writeFile(ak, old, "0600"))
		} else {
			_, err := nd.run("rm", "-f", ak)
			note(err)
			if !sshDir {
				_, err = nd.run("rmdir", "/root/.ssh")
				note(err)
			}
		}
		if !wasActive {
			_, err := nd.run("systemctl", "stop", "ssh.service")
			note(err)
		}
		if len(errs) > 0 {
			t.Errorf("%s: restoring ssh: %s", nd.name, strings.Join(errs, "; "))
		}
	})
	nd.mustRun(t, "sh", "-c", `umask 077 && mkdir -p /root/.ssh && printf '%s\n' "$1" >>/root/.ssh/authorized_keys`, "sh", pub)
	nd.mustRun(t, "systemctl", "start", "ssh.service")
}

// ansSaveRdmad records nd's configuration and key file and registers the
// cleanup that puts them back, reloads rdmad and removes what Ansible left
// (its temporary directory, the copy of the package).
func ansSaveRdmad(t *testing.T, nd ansNode) {
	t.Helper()
	cfg, cfgHad := nd.readFile(t, ansConfig)
	if !cfgHad {
		t.Fatalf("%s: no %s before the test: the package installs it", nd.name, ansConfig)
	}
	key, keyHad := nd.readFile(t, ansKeyFile)
	tmpHad := nd.exists(t, ansRemoteTmp)
	pkgHad := nd.exists(t, ansPkgDir)
	t.Cleanup(func() {
		for dir, had := range map[string]bool{ansRemoteTmp: tmpHad, ansPkgDir: pkgHad} {
			if had {
				continue
			}
			if _, err := nd.run("rm", "-rf", dir); err != nil {
				t.Errorf("%s: remove %s: %v", nd.name, dir, err)
			}
		}
		// The configuration first: it may name the key file.
		if err := nd.writeFile(ansConfig, cfg, "0644"); err != nil {
			t.Errorf("%s: restore %s: %v", nd.name, ansConfig, err)
		}
		var err error
		if keyHad {
			err = nd.writeFile(ansKeyFile, key, "0600")
		} else {
			_, err = nd.run("rm", "-f", ansKeyFile)
		}
		if err != nil {
			t.Errorf("%s: restore %s: %v", nd.name, ansKeyFile, err)
		}
		if _, err := nd.run("rdmactl", "reload"); err != nil {
			t.Errorf("%s: rdmactl reload after restoring the configuration: %v", nd.name, err)
		}
		if s := nd.status(t); s.Config.Error != "" || s.hasPolicy(ansPolicy) {
			t.Errorf("%s: after the restore: config error %q, policy %s still in force %v", nd.name, s.Config.Error, ansPolicy, s.hasPolicy(ansPolicy))
		}
	})
}

// ansPeerView is what node 1's rdmactl --json peers says of the fleet key
// and of one peer.
type ansPeerView struct {
	Auth  string `json:"auth"`
	Peers []struct {
		Name          string `json:"name"`
		State         string `json:"state"`
		Authenticated bool   `json:"authenticated"`
	} `json:"peers"`
}

func ansWritePlaybookVars(t *testing.T, path string, v map[string]any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAnsibleRollout: the role against both nodes, three runs (see the
// file's comment).
func TestAnsibleRollout(t *testing.T) {
	pkgRequire(t)
	other := peersOther(t)
	nodes := []ansNode{{n: 1, name: "node1", addr: nodeAddr(t)}, {n: 2, name: "node2", addr: other}}
	debs, _ := filepath.Glob("/mnt/vm/project/deb/rdmad_*.deb")
	if len(debs) != 1 {
		t.Fatalf("want the bed's .deb in /mnt/vm/project/deb, found %v", debs)
	}
	peersWait(t, 1, other, "up", 90*time.Second)

	// Cleanups run last first: the configurations are restored, then node
	// 1 must see node 2 up again (without the key), then sshd and the keys
	// go.
	b := ansSetup(t, nodes)
	t.Cleanup(func() {
		peersWait(t, 1, other, "up", 90*time.Second)
	})
	for _, nd := range nodes {
		ansSaveRdmad(t, nd)
	}

	mtu, err := strconv.Atoi(strings.TrimSpace(mustRun(t, "cat", "/sys/class/net/eth0/mtu")))
	if err != nil {
		t.Fatal(err)
	}
	keyBytes := make([]byte, 32)
	if _, err := rand.Read(keyBytes); err != nil {
		t.Fatal(err)
	}
	fleetKey := hex.EncodeToString(keyBytes)
	config := func(mtu int) map[string]any {
		return map[string]any{
			"daemon": map[string]any{"socket_group": "rdmad", "log_level": "info"},
			"probe":  map[string]any{"auth": "require"},
			// observe: reported, never applied, so the bed's MTU is safe
			// whatever the test does.
			"policy": []any{map[string]any{"name": ansPolicy, "netdevs": []string{"eth0"}, "mode": "observe", "mtu": mtu}},
		}
	}
	good := filepath.Join(b.dir, "good.json")
	ansWritePlaybookVars(t, good, map[string]any{"rdmad_package_file": debs[0], "rdmad_fleet_key": fleetKey, "rdmad_config": config(mtu)})

	if out, rc := b.playbook(t, "syntax check", good, "--syntax-check"); rc != 0 {
		t.Fatalf("ansible-playbook --syntax-check: exit %d\n%s", rc, ansTail(out, 3000))
	}

	type before struct {
		pid   int
		gen   uint64
		clock int64
	}
	pre := map[string]before{}
	for _, nd := range nodes {
		s := nd.status(t)
		pre[nd.name] = before{pid: nd.mainPID(t), gen: s.Config.Generation, clock: nd.clock(t)}
	}

	// Run 1: the rollout.
	out, rc := b.playbook(t, "run 1", good)
	recap, _ := ansParseRecap(out)
	if rc != 0 {
		t.Fatalf("run 1: ansible-playbook exit %d", rc)
	}
	var files [][]byte
	gen1 := map[string]uint64{}
	for _, nd := range nodes {
		r, ok := recap[nd.name]
		if !ok || r.failed != 0 || r.unreachable != 0 || r.changed == 0 {
			t.Errorf("run 1: %s's recap %+v (listed %v); want changes, no failure", nd.name, r, ok)
		}
		cfg, _ := nd.readFile(t, ansConfig)
		files = append(files, cfg)
		for _, want := range []string{`key_file = "` + ansKeyFile + `"`, `name = "` + ansPolicy + `"`, `mtu = ` + strconv.Itoa(mtu), `auth = "require"`, `socket_group = "rdmad"`} {
			if !bytes.Contains(cfg, []byte(want)) {
				t.Errorf("%s: %s lacks %q:\n%s", nd.name, ansConfig, want, cfg)
			}
		}
		if st := nd.mustRun(t, "stat", "-c", "%a %U:%G %F", ansKeyFile); st != "600 root:root regular file" {
			t.Errorf("%s: %s is %q, want 600 root:root regular file", nd.name, ansKeyFile, st)
		}
		if key, _ := nd.readFile(t, ansKeyFile); strings.TrimSpace(string(key)) != fleetKey {
			t.Errorf("%s: %s holds %d bytes, not the fleet key", nd.name, ansKeyFile, len(key))
		}
		// The handler: one reload by SIGHUP at least (rdmad's watcher
		// reloads on the file as well), the same process.
		var reloads int
		waitFor(t, 30*time.Second, nd.name+": the handler's reload (SIGHUP) in rdmad's journal", func() (bool, string) {
			reloads = nd.sighupReloads(t, pre[nd.name].clock)
			return reloads > 0, fmt.Sprintf("%d SIGHUP reloads", reloads)
		})
		if pid := nd.mainPID(t); pid != pre[nd.name].pid {
			t.Errorf("%s: rdmad's PID %d after the rollout, %d before: restarted, want reloaded", nd.name, pid, pre[nd.name].pid)
		}
		s := nd.status(t)
		if s.Config.Error != "" || s.Config.Generation <= pre[nd.name].gen || !s.hasPolicy(ansPolicy) || len(s.Config.Files) == 0 || s.Config.Files[0] != ansConfig {
			t.Errorf("%s: status after the rollout: error %q, generation %d (before %d), policy %s %v, files %v; want the new configuration in force",
				nd.name, s.Config.Error, s.Config.Generation, pre[nd.name].gen, ansPolicy, s.hasPolicy(ansPolicy), s.Config.Files)
		}
		gen1[nd.name] = s.Config.Generation
	}
	if len(files) == 2 && !bytes.Equal(files[0], files[1]) {
		t.Errorf("the nodes' %s differ:\nnode1:\n%s\nnode2:\n%s", ansConfig, files[0], files[1])
	}
	// The key in force on both: node 1 requires it and node 2 answers
	// with it.
	var pv ansPeerView
	waitFor(t, 90*time.Second, "node 1: node 2 up and authenticated with the fleet key", func() (bool, string) {
		o, err := run("rdmactl", "--json", "peers")
		if err != nil && !strings.Contains(err.Error(), "exit status 3") {
			return false, err.Error()
		}
		pv = ansPeerView{}
		if err := json.Unmarshal([]byte(o), &pv); err != nil {
			return false, err.Error()
		}
		for _, p := range pv.Peers {
			if p.Name == other {
				return pv.Auth == "require" && p.State == "up" && p.Authenticated, fmt.Sprintf("auth %q, peer %+v", pv.Auth, p)
			}
		}
		return false, fmt.Sprintf("no peer %s in %+v", other, pv)
	})
	if t.Failed() {
		t.FailNow()
	}

	// Run 2: nothing to do.
	for _, nd := range nodes {
		pre[nd.name] = before{pid: pre[nd.name].pid, gen: gen1[nd.name], clock: nd.clock(t)}
	}
	out, rc = b.playbook(t, "run 2", good)
	recap, _ = ansParseRecap(out)
	if rc != 0 {
		t.Fatalf("run 2: ansible-playbook exit %d", rc)
	}
	for _, nd := range nodes {
		if r, ok := recap[nd.name]; !ok || r.changed != 0 || r.failed != 0 || r.unreachable != 0 || r.ok == 0 {
			t.Errorf("run 2: %s's recap %+v (listed %v); want changed=0, failed=0", nd.name, r, ok)
		}
		if n := nd.sighupReloads(t, pre[nd.name].clock); n != 0 {
			t.Errorf("run 2: %s reloaded %d times by SIGHUP; want no handler run", nd.name, n)
		}
		if s := nd.status(t); s.Config.Generation != gen1[nd.name] || s.Config.Error != "" {
			t.Errorf("run 2: %s's configuration generation %d (error %q), %d before: want no reload", nd.name, s.Config.Generation, s.Config.Error, gen1[nd.name])
		}
	}

	// Run 3: an MTU below 68 that rdmad --check-config refuses. The
	// template task fails on every node, the file stays, rdmad runs on.
	// It starts at that task: runs 1 and 2 went through the ones before
	// it (which register nothing it reads), and under TCG each costs
	// 5-15 s per run (CI's VM suite outgrew its timeout).
	bad := filepath.Join(b.dir, "bad.json")
	ansWritePlaybookVars(t, bad, map[string]any{"rdmad_package_file": debs[0], "rdmad_fleet_key": fleetKey, "rdmad_config": config(50)})
	out, rc = b.playbook(t, "run 3 (broken configuration)", bad, "--start-at-task", "Configure rdmad")
	recap, _ = ansParseRecap(out)
	if rc == 0 {
		t.Errorf("run 3: ansible-playbook exit 0 with a configuration rdmad refuses")
	}
	fatals := ansFatals(out)
	if !strings.Contains(fatals, "TASK [rdmad : Configure rdmad]") || !strings.Contains(fatals, "failed to validate") ||
		!strings.Contains(fatals, ansPolicy) || !strings.Contains(fatals, "mtu") {
		t.Errorf("run 3: want the template task failed by validate with rdmad's error on the policy's mtu; failed tasks:\n%s", fatals)
	}
	for i, nd := range nodes {
		if r, ok := recap[nd.name]; !ok || r.failed != 1 || r.changed != 0 {
			t.Errorf("run 3: %s's recap %+v (listed %v); want failed=1, changed=0", nd.name, r, ok)
		}
		if cfg, _ := nd.readFile(t, ansConfig); !bytes.Equal(cfg, files[i]) {
			t.Errorf("run 3: %s's %s changed though validate refused it:\n%s", nd.name, ansConfig, cfg)
		}
		if pid := nd.mainPID(t); pid != pre[nd.name].pid {
			t.Errorf("run 3: %s's rdmad PID %d, %d before", nd.name, pid, pre[nd.name].pid)
		}
		if s := nd.status(t); s.Config.Generation != gen1[nd.name] || s.Config.Error != "" || !s.hasPolicy(ansPolicy) {
			t.Errorf("run 3: %s's status: generation %d (want %d), error %q, policy %s %v; want the last configuration running, untouched",
				nd.name, s.Config.Generation, gen1[nd.name], s.Config.Error, ansPolicy, s.hasPolicy(ansPolicy))
		}
	}
}

// TestAnsibleFirstRollout is #40 item 3: operators run
// `ansible-playbook --check --diff` first, and on a node without rdmad it
// failed (check mode copies no package, so the install could not open it;
// nor is there a unit to start or reload). Node 2 is made fresh (rdmad
// purged), the check run must pass and change nothing on it, and the real
// run after it installs, configures and starts rdmad. Node 2's /etc/rdmad
// is restored afterwards.
func TestAnsibleFirstRollout(t *testing.T) {
	pkgRequire(t)
	other := peersOther(t)
	nd := ansNode{n: 2, name: "node2", addr: other}
	debs, _ := filepath.Glob("/mnt/vm/project/deb/rdmad_*.deb")
	if len(debs) != 1 {
		t.Fatalf("want the bed's .deb in /mnt/vm/project/deb, found %v", debs)
	}
	peersWait(t, 1, other, "up", 90*time.Second)
	b := ansSetup(t, []ansNode{nd})
	t.Cleanup(func() { peersWait(t, 1, other, "up", 90*time.Second) })

	const saved = "/root/rdmad-e2e-etc.tar"
	nd.mustRun(t, "tar", "-C", "/etc", "-cf", saved, "rdmad")
	t.Cleanup(func() {
		// Whatever the test left: rdmad installed, its /etc as it was.
		if _, err := nd.run("dpkg", "-s", "rdmad"); err != nil {
			if out, err := nd.run("dpkg", "-i", debs[0]); err != nil {
				t.Errorf("node 2: reinstall rdmad: %v: %s", err, out)
			}
		}
		for _, c := range [][]string{{"rm", "-rf", "/etc/rdmad", ansPkgDir, ansRemoteTmp}, {"tar", "-C", "/etc", "-xpf", saved}, {"rm", "-f", saved}, {"systemctl", "restart", "rdmad"}} {
			if out, err := nd.run(c[0], c[1:]...); err != nil {
				t.Errorf("node 2: restore (%s): %v: %s", strings.Join(c, " "), err, out)
			}
		}
	})
	nd.mustRun(t, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "-q", "rdmad")
	if _, err := nd.run("dpkg", "-s", "rdmad"); err == nil {
		t.Fatal("node 2: rdmad still installed after the purge")
	}

	vars := filepath.Join(b.dir, "first.json")
	ansWritePlaybookVars(t, vars, map[string]any{"rdmad_package_file": debs[0], "rdmad_config": map[string]any{"daemon": map[string]any{"socket_group": "rdmad", "log_level": "info"}}})

	out, rc := b.playbook(t, "check mode on a fresh node", vars, "--check", "--diff")
	recap, _ := ansParseRecap(out)
	if rc != 0 {
		t.Fatalf("ansible-playbook --check --diff on a node without rdmad: exit %d; failed tasks:\n%s", rc, ansFatals(out))
	}
	if r, ok := recap[nd.name]; !ok || r.failed != 0 || r.changed == 0 {
		t.Errorf("check mode: node 2's recap %+v (listed %v); want changes reported, no failure", r, ok)
	}
	if !strings.Contains(out, "Report the install that check mode cannot try") || !strings.Contains(out, "+socket_group = \"rdmad\"") {
		t.Errorf("check mode: want the install reported and the configuration's diff shown; output tail:\n%s", ansTail(out, 3000))
	}
	if _, err := nd.run("dpkg", "-s", "rdmad"); err == nil {
		t.Error("check mode installed rdmad")
	}
	for _, p := range []string{ansConfig, ansPkgDir} {
		if nd.exists(t, p) {
			t.Errorf("check mode made %s on node 2", p)
		}
	}

	out, rc = b.playbook(t, "the real run after it", vars)
	recap, _ = ansParseRecap(out)
	if rc != 0 {
		t.Fatalf("the real first rollout: exit %d; failed tasks:\n%s", rc, ansFatals(out))
	}
	if r, ok := recap[nd.name]; !ok || r.failed != 0 || r.changed == 0 {
		t.Errorf("real run: node 2's recap %+v (listed %v); want changes, no failure", r, ok)
	}
	if st, err := nd.run("systemctl", "is-active", "rdmad"); err != nil || strings.TrimSpace(st) != "active" {
		t.Errorf("node 2: rdmad %q after the first rollout (%v); want active", st, err)
	}
	if cfg, _ := nd.readFile(t, ansConfig); !bytes.Contains(cfg, []byte(`log_level = "info"`)) {
		t.Errorf("node 2: %s after the rollout:\n%s", ansConfig, cfg)
	}
	if s := nd.status(t); s.Config.Error != "" || len(s.Config.Files) == 0 || s.Config.Files[0] != ansConfig {
		t.Errorf("node 2: status after the first rollout: error %q, files %v", s.Config.Error, s.Config.Files)
	}
}
