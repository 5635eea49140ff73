package main

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
)

// bugHost is a fixture host for rdmactl bugreport: a configuration under
// root/etc/rdmad (a main file with an inline secret and a key_file, a
// drop-in, the key itself), /proc/version, and tools: name -> a shell
// script body, "" for a tool that is not installed.
func bugHost(t *testing.T, tools map[string]string) (root string) {
	t.Helper()
	root = t.TempDir()
	conf := filepath.Join(root, "etc/rdmad")
	for name, body := range map[string]string{
		"rdmad.toml":              "[probe]\nkey_file = \"" + conf + "/fleet.key\"\napi_token = \"hunter2\"\n# a comment = kept\n",
		"rdmad.d/50-mtu.toml":     "[[policy]]\nname = \"mtu\"\nmtu = 4200\n",
		"fleet.key":               "SUPERSECRET-KEY-BYTES\n",
		"../../proc/version":      "Linux version 6.8.0-test\n",
		"../../etc/os-release":    "ID=debian\n",
		"../../bin/rdma":          "#!/bin/sh\necho \"rdma $*\"\n",
		"../../bin/slow":          "#!/bin/sh\nexec sleep 30\n",
		"../../bin/huge":          "#!/bin/sh\nexec head -c 8500000 /dev/zero\n",
		"../../bin/rdmad":         "#!/bin/sh\necho \"valid: $*\"\n",
		"../../bin/ibv_devinfo":   "#!/bin/sh\necho hca_id: rxe0\n",
		"../../bin/journalctl":    "#!/bin/sh\necho \"journal $*\"\n",
		"../../sys/class/.keep":   "",
		"../../bin/.keep":         "",
		"../../proc/.keep":        "",
		"rdmad.d/.keep-not-toml":  "x",
		"../../etc/rdmad-dir/.ok": "",
	} {
		p := filepath.Join(conf, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := newBugReport
	t.Cleanup(func() { newBugReport = old })
	newBugReport = func() *bugReport {
		return &bugReport{sysRoot: root, procRoot: filepath.Join(root, "proc"), confDir: conf + "/", now: time.Now(),
			doctorInterval: "0s", toolTimeout: 10 * time.Second, // long enough to read 8 MiB under -race on a loaded host
			lookPath: func(name string) (string, error) {
				if v, ok := tools[name]; ok {
					if v == "" {
						return "", exec.ErrNotFound
					}
					name = v
				}
				return filepath.Join(root, "bin", name), nil
			}}
	}
	return root
}

// untar reads a bug report's files, by name under its top directory, and
// checks each is mode 0600.
func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Errorf("%s: mode %v, want a regular file 0600", path, fi.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Mode != 0o600 {
			t.Errorf("%s: mode %o in the archive", h.Name, h.Mode)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		_, name, _ := strings.Cut(h.Name, "/")
		out[name] = string(b)
	}
}

func TestBugreportArchive(t *testing.T) {
	root := bugHost(t, map[string]string{"journalctl": ""}) // no journalctl on this host
	conf := filepath.Join(root, "etc/rdmad")
	files := []string{conf + "/rdmad.toml", conf + "/rdmad.d/50-mtu.toml", "/etc/shadow", conf + "/fleet.key"}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"GET /v1/status": answer(t, &apitype.Snapshot{Version: "9.9.9", State: apitype.Running,
			Config: apitype.Config{Path: conf + "/rdmad.toml", Files: files, Generation: 4}}),
		"GET /v1/health":      answer(t, apitype.Health{}),
		"GET /v1/policy/diff": answer(t, apitype.DiffResult{}),
		"GET /v1/resources":   answer(t, apitype.Resources{}),
		"GET /v1/doctor":      answer(t, apitype.DoctorReport{Worst: "ok"}),
	})
	out := filepath.Join(t.TempDir(), "report.tar.gz")
	code, stdout, stderr := rdmactl(t, "--socket", sock, "bugreport", "--output", out, "--since", "2h")
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	got := untar(t, out)
	for _, name := range []string{"MANIFEST", "status.json", "health.json", "policy-diff.json", "resources.json", "doctor.json",
		"version.txt", "kernel.txt", "inventory.json", "rdma-dev.txt", "rdma-link.txt", "ibv_devinfo.txt", "journal.txt",
		"config" + conf + "/rdmad.toml", "config" + conf + "/rdmad.d/50-mtu.toml", "config/check-config.txt"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s in the archive; it has %v", name, keys(got))
		}
	}
	man := got["MANIFEST"]
	for _, want := range []string{
		"failed    journal.txt", "journalctl is not installed here",
		"ok        status.json",
		"failed    config/etc/shadow", "not a *.toml file under",
		"failed    config" + conf + "/fleet.key",
	} {
		if !strings.Contains(man, want) {
			t.Errorf("MANIFEST lacks %q:\n%s", want, man)
		}
	}
	if !strings.Contains(got["version.txt"], "rdmad 9.9.9") || !strings.Contains(got["kernel.txt"], "6.8.0-test") {
		t.Errorf("versions %q, kernel %q", got["version.txt"], got["kernel.txt"])
	}
	if !strings.Contains(got["rdma-dev.txt"], "rdma -d dev show") || !strings.Contains(got["config/check-config.txt"], "valid: --check-config "+conf+"/rdmad.toml") {
		t.Errorf("tools: %q, %q", got["rdma-dev.txt"], got["config/check-config.txt"])
	}
	main := got["config"+conf+"/rdmad.toml"]
	if !strings.Contains(main, `key_file = "`+conf+`/fleet.key"`) || strings.Contains(main, "hunter2") || !strings.Contains(main, `api_token = "(redacted by rdmactl bugreport)"`) {
		t.Errorf("the main file, redacted:\n%s", main)
	}
	for name, body := range got {
		if strings.Contains(body, "SUPERSECRET") || strings.Contains(body, "hunter2") {
			t.Errorf("%s holds a secret:\n%s", name, body)
		}
	}
	if !strings.Contains(stdout, "wrote "+out) {
		t.Errorf("stdout: %q", stdout)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestBugreportRdmadDown: with rdmad down the rest is collected, and the
// report says rdmad did not answer; a tool that hangs is killed, one that
// floods is cut.
func TestBugreportRdmadDown(t *testing.T) {
	bugHost(t, map[string]string{"ibv_devinfo": "slow", "rdma": "huge"})
	dir := t.TempDir()
	out := filepath.Join(dir, "down")
	code, stdout, stderr := rdmactl(t, "--socket", filepath.Join(dir, "no.sock"), "bugreport", "--dir", "--output", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	man := read("MANIFEST")
	for _, want := range []string{"failed    status.json", "rdmad did not answer", "ok        doctor.json", "killed after 10s", "truncated rdma-dev.txt"} {
		if !strings.Contains(man, want) {
			t.Errorf("MANIFEST lacks %q:\n%s", want, man)
		}
	}
	if n := len(read("rdma-dev.txt")); n != bugItemMax {
		t.Errorf("rdma-dev.txt has %d bytes, want %d (cut)", n, bugItemMax)
	}
	if !strings.Contains(read("version.txt"), "rdmad: did not answer") {
		t.Errorf("version.txt: %q", read("version.txt"))
	}
	fi, err := os.Lstat(out)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the directory: %v, %v; want 0700", fi.Mode(), err)
	}
}

// TestBugreportRefusesExisting: the output is never written through what is
// at its path: a symlink (to a file root cares about, or dangling), a file,
// a directory.
func TestBugreportRefusesExisting(t *testing.T) {
	bugHost(t, nil)
	dir := t.TempDir()
	victim := filepath.Join(dir, "passwd")
	if err := os.WriteFile(victim, []byte("root:x:0:0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "report.tar.gz")
	dangling := filepath.Join(dir, "dangling.tar.gz")
	for _, l := range [][2]string{{victim, link}, {filepath.Join(dir, "created-through"), dangling}} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "no.sock")
	for _, args := range [][]string{
		{"--output", link}, {"--output", dangling}, {"--output", victim}, {"--output", dir},
		{"--dir", "--output", link}, {"--dir", "--output", dangling},
	} {
		code, _, stderr := rdmactl(t, append([]string{"--socket", sock, "bugreport"}, args...)...)
		if code != exitError || !strings.Contains(stderr, "exists") {
			t.Errorf("bugreport %v: exit %d, %q; want 1, refused", args, code, stderr)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0\n" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "created-through")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was created through the dangling symlink: %v", err)
	}
}

// TestBugreportHugeAnswer: an answer larger than the client's bound fails
// that item, the report is still written.
func TestBugreportHugeAnswer(t *testing.T) {
	bugHost(t, nil)
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"GET /v1/status": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"version":"`)
			chunk := strings.Repeat("x", 1<<20)
			for i := 0; i < 40; i++ {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
			io.WriteString(w, `"}`)
		},
		"GET /v1/health": answer(t, apitype.Health{}),
	})
	out := filepath.Join(t.TempDir(), "r.tar.gz")
	code, stdout, stderr := rdmactl(t, "--socket", sock, "bugreport", "-o", out)
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	got := untar(t, out)
	if !strings.Contains(got["MANIFEST"], "ok        health.json") {
		t.Errorf("the other answers were not collected after the huge one:\n%s", got["MANIFEST"])
	}
	if !strings.Contains(got["MANIFEST"], "failed    status.json") || !strings.Contains(got["status.json"], "32 MiB") || len(got["status.json"]) > 4096 {
		t.Errorf("status.json: %d bytes; MANIFEST:\n%s", len(got["status.json"]), got["MANIFEST"])
	}
	for name, body := range got {
		if len(body) > bugJournalMax {
			t.Errorf("%s: %d bytes, over every bound", name, len(body))
		}
	}
}

func TestBugreportConfigPaths(t *testing.T) {
	b := &bugReport{confDir: "/etc/rdmad/"}
	for p, ok := range map[string]bool{
		"/etc/rdmad/rdmad.toml": true, "/etc/rdmad/rdmad.d/10-a.toml": true,
		"/etc/shadow": false, "/etc/rdmad/../shadow.toml": false, "/etc/rdmad/fleet.key": false,
		"etc/rdmad/rdmad.toml": false, "/etc/rdmadx/rdmad.toml": false, "": false,
	} {
		if got := b.configPathOK(p); got != ok {
			t.Errorf("configPathOK(%q) = %v, want %v", p, got, ok)
		}
	}
}

func TestRedactTOML(t *testing.T) {
	in := "[probe]\nkey_file = \"/etc/rdmad/fleet.key\"\nkey = \"abc\"\npsk_key=\"x\"\n\"Secret\" = 1\n# password = kept in a comment\nname = \"token-free\"\nsession_password = 'p'"
	want := "[probe]\nkey_file = \"/etc/rdmad/fleet.key\"\nkey = \"(redacted by rdmactl bugreport)\"\npsk_key= \"(redacted by rdmactl bugreport)\"\n\"Secret\" = \"(redacted by rdmactl bugreport)\"\n# password = kept in a comment\nname = \"token-free\"\nsession_password = \"(redacted by rdmactl bugreport)\""
	if got := string(redactTOML([]byte(in))); got != want {
		t.Errorf("redactTOML:\n%s\nwant:\n%s", got, want)
	}
}

// TestBugreportDirSwapped is #41 item 5: between bugreport --dir's mkdir
// and its writes, a user who may write the parent directory (root writing
// the report into that user's home) replaces the new directory with a
// symlink to a directory of theirs, or with a directory of their own.
// Before, root then wrote the report through the symlink (3 of 3 tries in
// the review). Now nothing is written anywhere and the error says the
// directory was replaced. As root the swap is made by uid 65534, the
// attacker of the review; otherwise by this user.
func TestBugreportDirSwapped(t *testing.T) {
	items := []bugItem{{name: "MANIFEST", data: []byte("m\n")}, {name: "cmd/ibv_devinfo.txt", data: []byte("x\n")}}
	for _, how := range []string{"symlink", "own directory"} {
		t.Run(how, func(t *testing.T) {
			parent := t.TempDir()
			target := t.TempDir() // where the attacker wants root's files
			attacker := os.Geteuid() != 0
			if !attacker {
				// The parent is the attacker's: they may rename in it
				// (and reach it: t.TempDir's own parent is 0700).
				for _, d := range []string{filepath.Dir(parent), filepath.Dir(target)} {
					if err := os.Chmod(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				for _, d := range []string{parent, target} {
					if err := os.Chown(d, 65534, 65534); err != nil {
						t.Fatal(err)
					}
				}
			}
			out := filepath.Join(parent, "report")
			script := `mv "$1" "$1.moved" && ln -s "$2" "$1"`
			if how == "own directory" {
				script = `mv "$1" "$1.moved" && mkdir -m 0755 "$1"`
			}
			b := &bugReport{items: items, afterMkdir: func(path string) {
				cmd := exec.Command("sh", "-c", script, "sh", path, target)
				if !attacker {
					cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
				}
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("the swap: %v: %s", err, b)
				}
			}}
			err := b.writeDir(out)
			if err == nil || !strings.Contains(err.Error(), "was replaced after rdmactl created it") {
				t.Errorf("writeDir after the swap: %v; want an error saying the directory was replaced", err)
			}
			for _, d := range []string{target, out, out + ".moved"} {
				if es, _ := os.ReadDir(d); len(es) != 0 {
					t.Errorf("%s holds %d entries after the swap, want none: the report went there", d, len(es))
				}
			}
		})
	}
	// Without a swap the report is written, subdirectories included.
	out := filepath.Join(t.TempDir(), "report")
	if err := (&bugReport{items: items}).writeDir(out); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "cmd", "ibv_devinfo.txt")); err != nil || string(b) != "x\n" {
		t.Errorf("cmd/ibv_devinfo.txt: %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(out, "cmd")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("cmd/: %v, %v; want mode 0700", st, err)
	}
}
