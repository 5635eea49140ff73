package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/daemon/config"
)

// checkConfig runs rdmad --check-config with args and returns its stderr
// and exit status.
func checkConfig(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "rdmad"), append([]string{"--check-config"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if o.Len() > 0 {
		t.Errorf("--check-config wrote to stdout: %q", o.String())
	}
	return e.String(), code
}

// TestCheckConfig is issue #27 item 1: rdmad --check-config [FILE] checks
// the file and its drop-ins without starting: exit 0 and nothing printed
// when valid; exit 1 with each error as file:line on stderr when not (the
// drop-in's too); a missing file is invalid. --config names the file when
// no argument does.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "rdmad.toml")
	os.WriteFile(main, []byte("[daemon]\nlog_level = \"debug\"\n[[policy]]\nname = \"fabric\"\nnetdevs = [\"ens*\"]\nmtu = 9000\n"), 0o644)
	if errOut, code := checkConfig(t, main); code != 0 || errOut != "" {
		t.Errorf("good file: exit %d, stderr %q; want 0 and nothing", code, errOut)
	}
	if errOut, code := checkConfig(t, "--config", main); code != 0 || errOut != "" {
		t.Errorf("good file by --config: exit %d, stderr %q", code, errOut)
	}

	os.Mkdir(filepath.Join(dir, "rdmad.d"), 0o755)
	dropIn := filepath.Join(dir, "rdmad.d", "50-site.toml")
	os.WriteFile(main, []byte("[daemon]\nlog_levle = \"debug\"\n[[policy]]\nname = \"fabric\"\nnetdevs = [\"ens*\"]\nmtu = 9000\n"), 0o644)
	os.WriteFile(dropIn, []byte("[probes]\npeers = true\n"), 0o644)
	errOut, code := checkConfig(t, main)
	for _, want := range []string{
		main + ":2: daemon.log_levle: unknown key; did you mean log_level?",
		dropIn + ":1: probes: unknown table; did you mean [probe]?",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("bad files: stderr lacks %q:\n%s", want, errOut)
		}
	}
	if code != 1 || strings.Count(errOut, "\n") != 2 {
		t.Errorf("bad files: exit %d, stderr:\n%s\nwant 1 and one line per error", code, errOut)
	}

	// A type error, in words.
	os.Remove(dropIn)
	os.WriteFile(main, []byte("[[policy]]\nname = \"fabric\"\nnetdevs = [\"ens*\"]\nmtu = 9000.5\n"), 0o644)
	if errOut, code := checkConfig(t, main); code != 1 || !strings.Contains(errOut, main+`:4: policy "fabric".mtu: mtu must be an integer, not 9000.5`) {
		t.Errorf("type error: exit %d, stderr %q", code, errOut)
	}
	if errOut, code := checkConfig(t, filepath.Join(dir, "none.toml")); code != 1 || !strings.Contains(errOut, "none.toml") {
		t.Errorf("missing file: exit %d, stderr %q; want 1 naming it", code, errOut)
	}
	if _, code := checkConfig(t, main, main); code != 2 {
		t.Errorf("two files: exit %d, want 2 (usage)", code)
	}
}

// TestCheckConfigHost is issue #40 item 4: --check-config says what depends
// on the host it runs on, as a warning, and checks what a start checks. The
// shipped configuration (its groups need not exist in CI or a pre-commit
// hook) passes with a warning naming the group; a key file others can read
// and a peers file others can write, which a start refuses, fail the check
// naming the file and the fix; a key or peers file that is not on this host
// is a warning.
func TestCheckConfigHost(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "rdmad.toml")
	key, peers := filepath.Join(dir, "key"), filepath.Join(dir, "peers")
	os.WriteFile(main, []byte("[daemon]\nadmin_group = \"rdmad-no-such-group\"\n[probe]\npeers = true\nkey_file = \""+key+"\"\npeers_file = \""+peers+"\"\n"), 0o644)
	errOut, code := checkConfig(t, main)
	for _, want := range []string{
		"warning: " + main + `:2: daemon.admin_group: group "rdmad-no-such-group" does not exist`,
		"of this host, not of the files",
		"warning: [probe] key_file " + key + ": does not exist",
		"warning: read [probe] peers_file: " + peers + ": does not exist",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("files absent here: stderr lacks %q:\n%s", want, errOut)
		}
	}
	if code != 0 {
		t.Errorf("files absent here: exit %d, want 0 (warnings only):\n%s", code, errOut)
	}

	os.WriteFile(key, []byte("c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA==\n"), 0o644)
	os.Chmod(key, 0o644)
	os.WriteFile(peers, []byte("10.0.0.1 tor-a\n"), 0o666)
	os.Chmod(peers, 0o666)
	errOut, code = checkConfig(t, main)
	for _, want := range []string{
		"[probe] key_file " + key + ": is owned by uid",
		"chmod 600 " + key,
		"[probe] peers_file: " + peers + ": is owned by uid",
		"chmod go-w " + peers,
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("files refused: stderr lacks %q:\n%s", want, errOut)
		}
	}
	if code != 1 {
		t.Errorf("files a start refuses: exit %d, want 1:\n%s", code, errOut)
	}
	if os.Geteuid() == 0 {
		os.Chmod(key, 0o600)
		os.Chmod(peers, 0o644)
		if errOut, code := checkConfig(t, main); code != 0 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("files fixed: exit %d, stderr:\n%s\nwant 0 and the group's warning alone", code, errOut)
		}
	}

	// The shipped configuration, where its groups may not exist.
	shipped, err := filepath.Abs("../../etc/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	if errOut, code := checkConfig(t, shipped); code != 0 {
		t.Errorf("the shipped configuration: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestStartOnSavedCopy is issue #27 item 1: rdmad keeps a copy of each
// configuration it accepts in its state directory (0600); a start whose
// files have errors runs on that copy, reports the errors as a reload does
// (degraded, config.error, the journal with every error) and picks up the
// fix. The component transition of the configuration is logged with its
// MESSAGE_ID, its end too.
func TestStartOnSavedCopy(t *testing.T) {
	good := "[daemon]\nlog_level = \"info\"\n"
	n := start(t, good)
	saved := config.SavedPath(n.dir)
	eventually(t, "the accepted configuration to be saved", func() bool {
		fi, err := os.Lstat(saved)
		return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == 0o600
	})
	n.stopsOnSIGTERM(t)

	n.write("[daemon]\nlog_levle = \"info\"\nresync_interval = \"1s\"\n[probes]\nx = 1\n")
	m := launchOn(t, n.dir)
	s, code := m.status()
	if code != 3 || s.State != apitype.Degraded || s.Config.Generation != 1 ||
		!strings.Contains(s.Config.Error, "rdmad.toml:2: daemon.log_levle: unknown key; did you mean log_level?") ||
		!strings.Contains(s.Config.Error, "rdmad.toml:4: probes: unknown table") {
		t.Errorf("start with a bad file: exit %d, %+v; want degraded on generation 1 with both errors", code, s)
	}
	log := m.log.String()
	for _, want := range []string{
		"running on the copy of the last accepted configuration",
		"MESSAGE_ID=" + apitype.MsgConfigRejected,
		"did you mean [probe]?", // the second error, not "(and 1 more)"
		"MESSAGE_ID=" + apitype.MsgComponentProblem + " component=config from=ok to=error",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	// The copy is what runs, and a fix is picked up.
	m.write(good)
	eventually(t, "the fix to be loaded", func() bool {
		s, _ = m.status()
		return s.Config.Error == "" && s.Config.Generation == 2
	})
	eventually(t, "the config component's recovery in the log", func() bool {
		return strings.Contains(m.log.String(), "MESSAGE_ID="+apitype.MsgComponentOK+" component=config from=error to=ok")
	})
	// The fixture has no verbs: its unavailability is logged once, with
	// the reason.
	if l := grepLines(m.log.String(), "MESSAGE_ID="+apitype.MsgComponentProblem+" component=verbs from=none to=unavailable"); l == "" || strings.Contains(l, "\n") || !strings.Contains(l, "reason=") {
		t.Errorf("verbs unavailable logged as:\n%s\nwant one line with its reason", l)
	}
	m.stopsOnSIGTERM(t)

	// A copy this rdmad no longer reads is not used: exit 78.
	b, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(saved, bytes.Replace(b, []byte(`"format":1`), []byte(`"format":7`), 1), 0o600)
	m.write("bogus = 1\n")
	errOut, code := runToExit(t, m.dir)
	if code != 78 || !strings.Contains(errOut, "format 7") || !strings.Contains(errOut, "rdmad.toml:1: bogus: unknown key") {
		t.Errorf("start with a bad file and an unusable copy: exit %d\n%s", code, errOut)
	}
}

// TestStartBadConfigNoCopy is issue #27 item 1: with errors at start and
// no accepted configuration to run on, rdmad exits with status 78
// (EX_CONFIG; rdmad.service does not restart it) and prints every error.
func TestStartBadConfigNoCopy(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rdmad.toml"), []byte("[daemon]\nlog_levle = \"info\"\nsockett = \"/x\"\n"), 0o644)
	errOut, code := runToExit(t, dir)
	if code != 78 {
		t.Errorf("exit %d, want 78\n%s", code, errOut)
	}
	for _, want := range []string{
		"no accepted configuration to run on",
		"rdmad.toml:2: daemon.log_levle: unknown key; did you mean log_level?",
		"rdmad.toml:3: daemon.sockett: unknown key; did you mean socket?",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if _, err := os.Lstat(config.SavedPath(dir)); err == nil {
		t.Error("a rejected configuration was saved")
	}
}

// runToExit runs rdmad on dir's configuration (dir is its state directory
// too) and returns its stderr and exit status; it must exit within 10 s.
func runToExit(t *testing.T, dir string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "rdmad"), "--config", filepath.Join(dir, "rdmad.toml"),
		"--socket", filepath.Join(dir, "rdmad.sock"), "--sysfs-root", fixture)
	cmd.Env = append(os.Environ(), "STATE_DIRECTORY="+dir)
	var e bytes.Buffer
	cmd.Stderr, cmd.Stdout = &e, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); ok {
			return e.String(), ee.ExitCode()
		}
		return e.String(), 0
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("rdmad did not exit within 10s:\n%s", e.String())
		return "", 0
	}
}
