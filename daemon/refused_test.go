package daemon

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
)

// refusedFixture runs rdmad on the roce-ib fixture with a socket, the peer
// probes on a free loopback port and body's [probe] keys, and returns its
// client.
func refusedFixture(t *testing.T, dir, body string) *client.Client {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the peers and key files must be owned by root to be taken")
	}
	sock := filepath.Join(dir, "rdmad.sock")
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(udp.LocalAddr().String())
	udp.Close()
	cfgPath := filepath.Join(dir, "rdmad.toml")
	cfg := fmt.Sprintf("[daemon]\nsocket = %q\n[probe]\nport = %s\n%s", sock, port, body)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runDaemon(t, sock, Options{ConfigPath: cfgPath, ConfigRequired: true, SysfsRoot: "../inventory/testdata/roce-ib",
		Version: "test", PeerListenHost: "127.0.0.1"})
}

// inputVerdict returns the InputRefused condition of GET /v1/health and
// the status, after a reload when reload is set.
func inputVerdict(t *testing.T, c *client.Client, reload bool) (apitype.Condition, *apitype.Snapshot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if reload {
		if res, err := c.Reload(ctx); err != nil || !res.OK {
			t.Fatalf("reload: %+v, %v", res, err)
		}
	}
	h, _, err := c.HealthRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cond, found := h.Condition(apitype.CondInputRefused)
	if !found {
		t.Fatalf("GET /v1/health has no %s condition: %+v", apitype.CondInputRefused, h)
	}
	s, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return cond, s
}

// wantRefused fails unless cond is an InputRefused problem whose message
// and the status's refused_files entry say every one of want.
func wantRefused(t *testing.T, cond apitype.Condition, s *apitype.Snapshot, key string, want ...string) {
	t.Helper()
	if cond.Status != apitype.ConditionProblem || cond.Reason != "FileRefused" {
		t.Errorf("InputRefused %s (%s): %s; want a problem, FileRefused", cond.Status, cond.Reason, cond.Message)
	}
	if len(s.RefusedFiles) != 1 || s.RefusedFiles[0].Key != key {
		t.Fatalf("status refused_files %+v; want one of %s", s.RefusedFiles, key)
	}
	f := s.RefusedFiles[0]
	all := f.Path + " " + f.Why + " " + f.Kept + " " + f.Fix
	for _, w := range want {
		if !strings.Contains(cond.Message, w) {
			t.Errorf("InputRefused message %q does not say %q", cond.Message, w)
		}
		if !strings.Contains(all, w) {
			t.Errorf("refused_files entry %+v does not say %q", f, w)
		}
	}
}

// configuredPeers returns the peers the manager has configured once it has
// want, or after 3 s; with hold, only after it has kept want for 1.5 s
// (the manager takes new settings a moment after the reload answers, so a
// count that is about to change is not taken for the one that stays).
func configuredPeers(t *testing.T, c *client.Client, want int, hold bool) int {
	t.Helper()
	deadline, held := time.Now().Add(3*time.Second), time.Now().Add(1500*time.Millisecond)
	for {
		s, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := s.Peers.Configured
		switch {
		case n != want && hold, n == want && (!hold || time.Now().After(held)), time.Now().After(deadline):
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantAccepted(t *testing.T, cond apitype.Condition, s *apitype.Snapshot, when string) {
	t.Helper()
	if cond.Status != apitype.ConditionOK || len(s.RefusedFiles) != 0 {
		t.Errorf("%s: InputRefused %s (%s): %s, refused_files %+v; want ok and none", when, cond.Status, cond.Reason, cond.Message, s.RefusedFiles)
	}
}

// TestRefusedPeersFile is issue #41 item 8 for [probe] peers_file: a
// peers file that others can write is refused, and that used to show only
// in the journal (the verdict said "no peer is probed"). Now GET
// /v1/health has InputRefused naming the file, why and the fix, the status
// has the file in refused_files, the peers read from it before stay in
// force, and a chmod with a reload clears it. A file refused at start
// leaves none of its peers probed, and says so.
func TestRefusedPeersFile(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "peers")
	if err := os.WriteFile(peers, []byte("127.0.0.9 tor-a\n127.0.0.10 tor-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := refusedFixture(t, dir, fmt.Sprintf("peers_file = %q\n", peers))
	cond, s := inputVerdict(t, c, false)
	wantAccepted(t, cond, s, "a peers file of mode 0600")
	if n := configuredPeers(t, c, 2, false); n != 2 {
		t.Fatalf("peers configured %d at start, want the file's 2", n)
	}

	if err := os.Chmod(peers, 0o666); err != nil {
		t.Fatal(err)
	}
	cond, s = inputVerdict(t, c, true)
	wantRefused(t, cond, s, inputPeersFile, peers, "writable by group or others (mode 0666)", "chmod go-w "+peers,
		"rdmactl reload", "the 2 peers read from it before stay in force")
	if strings.Contains(cond.Message, "chown") {
		t.Errorf("InputRefused %q says chown of a file root owns", cond.Message)
	}
	if n := configuredPeers(t, c, 2, true); n != 2 {
		t.Errorf("peers configured %d after the file was refused, want the 2 read before", n)
	}

	if err := os.Chmod(peers, 0o600); err != nil {
		t.Fatal(err)
	}
	cond, s = inputVerdict(t, c, true)
	wantAccepted(t, cond, s, "after chmod 600 and a reload")

	// Refused from the start: nothing of it was ever taken.
	dir2 := t.TempDir()
	peers2 := filepath.Join(dir2, "peers")
	os.WriteFile(peers2, []byte("127.0.0.9\n"), 0o600)
	os.Chmod(peers2, 0o646)
	c2 := refusedFixture(t, dir2, fmt.Sprintf("peers_file = %q\n", peers2))
	cond, s = inputVerdict(t, c2, false)
	wantRefused(t, cond, s, inputPeersFile, peers2, "writable by group or others (mode 0646)", "none of its peers is probed")
	if n := configuredPeers(t, c2, 0, true); n != 0 {
		t.Errorf("peers configured %d from a file refused at start, want 0", n)
	}
	os.Chmod(peers2, 0o644)
	cond, s = inputVerdict(t, c2, true)
	wantAccepted(t, cond, s, "after chmod 644 and a reload")
	if n := configuredPeers(t, c2, 1, false); n != 1 {
		t.Errorf("peers configured %d after the fix, want 1", n)
	}
}

// TestRefusedKeyFile is issue #41 item 8 for [probe] key_file: a key file
// others can read is refused. At start the peer probes do not start, at a
// reload they go on with the key in force; either way GET /v1/health has
// InputRefused naming the file, why and the fix (before, only the journal
// and a component's detail had it), and a chmod with a reload clears it.
func TestRefusedKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "fleet.key")
	if err := os.WriteFile(key, []byte("c2VjcmV0IGtleSBvZiB0aGUgZmxlZXQsIDMyIGJ5dGVzIQ==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(key, 0o644)
	c := refusedFixture(t, dir, fmt.Sprintf("key_file = %q\n[[peer]]\naddress = \"127.0.0.9\"\n", key))
	cond, s := inputVerdict(t, c, false)
	wantRefused(t, cond, s, inputKeyFile, key, "readable or writable by group or others (mode 0644)", "chmod 600 "+key,
		"not started until the key can be read")

	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	cond, s = inputVerdict(t, c, true)
	wantAccepted(t, cond, s, "after chmod 600 and a reload")
	if p := s.Components[apitype.ComponentPeers]; p.State == apitype.Error {
		t.Fatalf("peers component %+v after the key was fixed; want them started", p)
	}

	// Refused at a reload while the probes run on the key in force: the
	// refusal is InputRefused's, not a part of rdmad in error.
	os.Chmod(key, 0o640)
	cond, s = inputVerdict(t, c, true)
	wantRefused(t, cond, s, inputKeyFile, key, "(mode 0640)", "chmod 600 "+key, "go on with the key and settings in force")
	if d, _ := s.Health.Condition(apitype.CondDaemon); d.Status != apitype.ConditionOK {
		t.Errorf("DaemonDegraded %s: %s; want ok: the probes run, the key file is InputRefused's", d.Status, d.Message)
	}
	os.Chmod(key, 0o400)
	cond, s = inputVerdict(t, c, true)
	wantAccepted(t, cond, s, "after chmod 400 and a reload")
}

// TestRefusalOf: the few words of why a file was refused and the fix, for
// each way a read fails; the fix names only what is wrong.
func TestRefusalOf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "peers")
	os.WriteFile(p, []byte("127.0.0.1\n"), 0o600)
	os.Chown(p, 1000, 0)
	_, err := readPeersFile(p)
	why, fix := refusalOf(p, err, false)
	if why != "owned by uid 1000, not root: it decides whom rdmad trusts" || fix != "chown root: "+p+", then rdmactl reload" {
		t.Errorf("uid 1000, mode 0600: %q, %q", why, fix)
	}
	os.Chmod(p, 0o664)
	_, err = readPeersFile(p)
	why, fix = refusalOf(p, err, false)
	if !strings.Contains(why, "owned by uid 1000, not root and writable by group or others (mode 0664)") ||
		fix != "chown root: "+p+" && chmod go-w "+p+", then rdmactl reload" {
		t.Errorf("uid 1000, mode 0664: %q, %q", why, fix)
	}

	_, err = readPeersFile(filepath.Join(dir, "none"))
	if why, fix = refusalOf(filepath.Join(dir, "none"), err, false); why != "does not exist" || !strings.Contains(fix, "remove [probe] peers_file") {
		t.Errorf("missing: %q, %q", why, fix)
	}
	_, err = readPeersFile(dir)
	if why, _ = refusalOf(dir, err, false); why != "a directory, not a regular file" {
		t.Errorf("directory: %q", why)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("127.0.0.1\nnot an address at all\n"), 0o600)
	_, err = readPeersFile(bad)
	if why, fix = refusalOf(bad, err, false); !strings.HasPrefix(why, "line 2: ") || !strings.Contains(fix, "correct the lines") {
		t.Errorf("bad line: %q, %q", why, fix)
	}
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("0123456789\n"), 0o600)
	_, err = readProbeKey(short)
	if why, fix = refusalOf(short, err, true); why != "the key has 10 bytes, at least 16 are needed" || !strings.Contains(fix, "head -c 32 /dev/urandom") {
		t.Errorf("short key: %q, %q", why, fix)
	}
}

// TestPeersFileChmodSeen: the peers file's watch (fileChanged, every
// peersFileCheck) sees a chmod, which leaves the size and mtime as they
// were: a refused file fixed by chmod is taken without a reload.
func TestPeersFileChmodSeen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "peers")
	os.WriteFile(p, []byte("127.0.0.1\n"), 0o666)
	mtime := time.Now().Add(-time.Hour)
	os.Chtimes(p, mtime, mtime)
	r := &peerRunner{fileStat: fileStat(p)}
	if r.fileChanged(p) {
		t.Fatal("fileChanged without a change")
	}
	os.Chmod(p, 0o600)
	os.Chtimes(p, mtime, mtime)
	if !r.fileChanged(p) {
		t.Error("a chmod of the peers file is not seen as a change")
	}
}

// TestRefusedDropIn: a configuration drop-in rdmad refuses (a FIFO; a bad
// value; one its group may write, #41 item 8) is the verdict's
// ConfigInvalid and the status's config error (which rdmactl status prints
// under its config line), naming the file (and the line), why and the fix,
// while the last good configuration stays in force; the fix and a reload
// clear it. InputRefused is for the files the configuration names,
// not for its own files: it stays ok.
func TestRefusedDropIn(t *testing.T) {
	dir := t.TempDir()
	c := refusedFixture(t, dir, "")
	ctx := context.Background()
	dropins := filepath.Join(dir, "rdmad.d")
	if err := os.Mkdir(dropins, 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dropins, "50-bad.toml")
	for _, tc := range []struct {
		name string
		make func() error
		want string
	}{
		{"a FIFO", func() error { return unix.Mkfifo(bad, 0o644) }, bad + ": is a FIFO (named pipe), not a regular file"},
		{"a bad value", func() error { return os.WriteFile(bad, []byte("[daemon]\nlog_level = \"loud\"\n"), 0o644) }, bad + ":2"},
		// #41 item 8: a drop-in its group may write could grant
		// admin_group; refused with the file, why and the fix.
		{"a group-writable drop-in", func() error {
			if err := os.WriteFile(bad, []byte("[daemon]\nadmin_group = \"users\"\n"), 0o664); err != nil {
				return err
			}
			return os.Chmod(bad, 0o664)
		}, bad + ": is owned by uid 0 with mode 0664; it decides what rdmad does as root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(bad)
			s0, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.make(); err != nil {
				t.Fatal(err)
			}
			if res, err := c.Reload(ctx); err == nil && res.OK {
				t.Fatalf("reload with %s as a drop-in: %+v; want it rejected", tc.name, res)
			}
			s, err := c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cfg, _ := s.Health.Condition(apitype.CondConfig)
			if cfg.Status != apitype.ConditionProblem || !strings.Contains(cfg.Message, tc.want) || s.Config.Generation != s0.Config.Generation {
				t.Errorf("ConfigInvalid %s: %s (generation %d, was %d); want a problem naming %q, the last good configuration in force",
					cfg.Status, cfg.Message, s.Config.Generation, s0.Config.Generation, tc.want)
			}
			if !strings.Contains(s.Config.Error, tc.want) {
				t.Errorf("status config error %q; want it naming %q (rdmactl status prints it under its config line)", s.Config.Error, tc.want)
			}
			if in, _ := s.Health.Condition(apitype.CondInputRefused); in.Status != apitype.ConditionOK {
				t.Errorf("InputRefused %s: %s; want ok (a drop-in is ConfigInvalid's)", in.Status, in.Message)
			}
			os.Remove(bad)
			if res, err := c.Reload(ctx); err != nil || !res.OK {
				t.Fatalf("reload without the drop-in: %+v, %v", res, err)
			}
			s, _ = c.Status(ctx)
			if cfg, _ := s.Health.Condition(apitype.CondConfig); cfg.Status != apitype.ConditionOK {
				t.Errorf("ConfigInvalid after the fix: %s: %s; want ok", cfg.Status, cfg.Message)
			}
		})
	}
}
