package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/internal/safefile"
)

// loadWithin runs Load and fails the test if it takes longer than d: every
// attack here is an attempt to crash or stall the daemon's main loop.
func loadWithin(t *testing.T, d time.Duration, path string) (*Config, error) {
	t.Helper()
	type result struct {
		cfg *Config
		err error
	}
	done := make(chan result, 1)
	go func() {
		cfg, err := Load(path)
		done <- result{cfg, err}
	}()
	select {
	case r := <-done:
		return r.cfg, r.err
	case <-time.After(d):
		t.Fatalf("Load(%s) did not return within %v", path, d)
		return nil, nil
	}
}

// wantLoadError checks that err is a config.Errors whose text holds every
// want, and that the message stays short.
func wantLoadError(t *testing.T, err error, want ...string) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Load error = %v (%T), want config.Errors", err, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Load error %q does not contain %q", clipText(err.Error()), w)
		}
	}
	if len(err.Error()) > 8<<10 {
		t.Errorf("Load error is %d bytes long: %q", len(err.Error()), clipText(err.Error()))
	}
}

func clipText(s string) string {
	if len(s) > 500 {
		return s[:500] + "..."
	}
	return s
}

// TestNestedDropIn is issue #13 item 10: `allow = [[[...]]]` nested 10^6
// deep (2 MB) in a drop-in killed the daemon with a stack overflow when the
// value was formatted into an error. Now it is refused before decoding, by
// size, and the same nesting within the size bound is refused by depth.
func TestNestedDropIn(t *testing.T) {
	const good = "[daemon]\nlog_level = \"warn\"\n"
	for _, tt := range []struct {
		name  string
		depth int
		want  []string
	}{
		{"10^6 deep, 2 MB", 1000000, []string{"rdmad.d/50-nest.toml: is larger than 1 MiB"}},
		{"400,000 deep, 800 KB", 400000, []string{"rdmad.d/50-nest.toml:2: probe.allow: arrays and inline tables are nested more than 32 deep"}},
		{"33 deep", 33, []string{"rdmad.d/50-nest.toml:2: probe.allow: arrays and inline tables are nested more than 32 deep (line 2)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nest := "[probe]\nallow = " + strings.Repeat("[", tt.depth) + strings.Repeat("]", tt.depth) + "\n"
			p := write(t, map[string]string{"rdmad.toml": good, "rdmad.d/50-nest.toml": nest})
			_, err := loadWithin(t, 10*time.Second, p)
			wantLoadError(t, err, tt.want...)
		})
	}
	// 32 deep passes the scan; the decoder then says what is wrong with
	// the value, without printing it.
	nest := "[probe]\nallow = " + strings.Repeat("[", 32) + strings.Repeat("]", 32) + "\n"
	p := write(t, map[string]string{"rdmad.toml": good, "rdmad.d/50-nest.toml": nest})
	_, err := loadWithin(t, 10*time.Second, p)
	wantLoadError(t, err, "50-nest.toml:2: probe.allow: an element of type []interface {} is not a string")
	if strings.Contains(err.Error(), "[[") {
		t.Errorf("the error prints the raw value: %q", err)
	}
}

func TestCheckNesting(t *testing.T) {
	deep := func(open, close string, n int) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	keys := func(n int) string { return strings.TrimSuffix(strings.Repeat("a.", n), ".") }
	for _, tt := range []struct {
		name string
		doc  string
		line int // 0: accepted
		msg  string
	}{
		{"flat", "a = 1\n[b]\nc = [1, 2]\n", 0, ""},
		{"32 arrays", "a = " + deep("[", "]", 32) + "\n", 0, ""},
		{"33 arrays", "\n\na = " + deep("[", "]", 33) + "\n", 3, "nested more than 32 deep (line 3)"},
		{"33 over lines", "a = [\n" + deep("[", "]", 32) + "\n]\n", 1, "nested more than 32 deep (line 2)"},
		{"inline tables", "a = " + strings.Repeat("{b=", 33) + "1" + strings.Repeat("}", 33) + "\n", 1, "nested more than 32 deep"},
		{"mixed", "a = " + strings.Repeat("[{b=", 17) + "1" + strings.Repeat("}]", 17) + "\n", 1, "nested more than 32 deep"},
		{"brackets in strings", "a = \"" + deep("[", "]", 100) + "\"\nb = '" + deep("{", "}", 100) + "'\n", 0, ""},
		{"escaped quote", `a = "\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[" ` + "\n", 0, ""},
		{"multi-line strings", "a = \"\"\"\n" + deep("[", "]", 100) + "\n\"\"\"\"\nb = '''" + deep("[", "]", 40) + "'''\nc = 1\n", 0, ""},
		{"brackets in comments", "# " + deep("[", "]", 100) + "\na = 1 # {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{\n", 0, ""},
		{"after a string", "a = \"x\"\nb = " + deep("[", "]", 33) + "\n", 2, "nested"},
		{"32-part key", keys(32) + " = 1\n", 0, ""},
		{"33-part key", "x = 1\n" + keys(33) + " = 1\n", 2, "more than 32 dotted parts"},
		{"33-part table", "[" + keys(33) + "]\n", 1, "more than 32 dotted parts"},
		{"33-part array table", "[[" + keys(33) + "]]\n", 1, "more than 32 dotted parts"},
		{"33-part inline key", "x = {" + keys(33) + " = 1}\n", 1, "more than 32 dotted parts"},
		{"quoted dots", "\"" + keys(100) + "\" = 1\n['" + keys(100) + "']\n", 0, ""},
		{"floats", "a = [" + strings.Repeat("1.5, ", 100) + "2.5]\nb = {c = 1.5, d.e = 2.5}\n", 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			line, _, msg := checkNesting([]byte(tt.doc))
			if line != tt.line || !strings.Contains(msg, tt.msg) || (tt.msg == "") != (msg == "") {
				t.Errorf("checkNesting = %d, %q; want %d, %q", line, msg, tt.line, tt.msg)
			}
		})
	}
}

// TestDefaultFileLoads: the documented default configuration passes every
// bound (a legitimate config still loads). It names the group the packages
// create (socket_group = "rdmad"); on a host without that group it loads
// with the group rdmad itself runs as instead, so that the rest of the file
// is still checked.
func TestDefaultFileLoads(t *testing.T) {
	b, err := os.ReadFile("../../etc/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	const shipped = "\nsocket_group = \"rdmad\"\n"
	if !bytes.Contains(b, []byte(shipped)) {
		t.Fatalf("etc/rdmad.toml does not set socket_group = \"rdmad\", the group the packages create")
	}
	if _, err := user.LookupGroup("rdmad"); err != nil {
		g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
		if err != nil {
			t.Fatalf("look up this process's group: %v", err)
		}
		b = bytes.Replace(b, []byte(shipped), []byte("\nsocket_group = \""+g.Name+"\"\n"), 1)
	}
	if line, _, msg := checkNesting(b); msg != "" {
		t.Fatalf("etc/rdmad.toml: line %d: %s", line, msg)
	}
	p := write(t, map[string]string{"rdmad.toml": string(b)})
	if _, err := Load(p); err != nil {
		t.Fatalf("etc/rdmad.toml does not load: %v", err)
	}
}

func TestFileSizeBound(t *testing.T) {
	comment := func(n int) string { return "#" + strings.Repeat("x", n-2) + "\n" }
	p := write(t, map[string]string{"rdmad.toml": "", "rdmad.d/10-big.toml": comment(MaxFileSize)})
	if _, err := Load(p); err != nil {
		t.Errorf("a drop-in of exactly 1 MiB: %v", err)
	}
	p = write(t, map[string]string{"rdmad.toml": "", "rdmad.d/10-big.toml": comment(MaxFileSize + 1)})
	_, err := Load(p)
	wantLoadError(t, err, "rdmad.d/10-big.toml: is larger than 1 MiB, the most rdmad reads here")
	p = write(t, map[string]string{"rdmad.toml": comment(MaxFileSize + 1)})
	_, err = Load(p)
	wantLoadError(t, err, "rdmad.toml: is larger than 1 MiB")
	if !errors.Is(err, safefile.ErrTooLarge) && !strings.Contains(err.Error(), "larger") {
		t.Errorf("main file too large: %v", err)
	}
}

func TestDropInCountBound(t *testing.T) {
	files := map[string]string{"rdmad.toml": ""}
	for i := 0; i < MaxDropIns; i++ {
		files[fmt.Sprintf("rdmad.d/%03d.toml", i)] = "[daemon]\nlog_level = \"warn\"\n"
	}
	p := write(t, files)
	if _, err := Load(p); err != nil {
		t.Fatalf("%d drop-ins: %v", MaxDropIns, err)
	}
	os.WriteFile(filepath.Join(filepath.Dir(p), "rdmad.d", "999.toml"), nil, 0o644)
	_, err := Load(p)
	wantLoadError(t, err, "rdmad.d: holds 257 drop-ins (*.toml); rdmad reads at most 256")
}

// TestFIFODropIn is issue #13 item 11 at the unit level: a FIFO in rdmad.d
// (or as the main file) is refused at once, naming it; Load never blocks on
// it waiting for a writer.
func TestFIFODropIn(t *testing.T) {
	p := write(t, map[string]string{"rdmad.toml": "", "rdmad.d/20-ok.toml": "[daemon]\nlog_level = \"warn\"\n"})
	fifo := filepath.Join(filepath.Dir(p), "rdmad.d", "10-fifo.toml")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadWithin(t, 5*time.Second, p)
	wantLoadError(t, err, "rdmad.d/10-fifo.toml: is a FIFO (named pipe), not a regular file")

	main := filepath.Join(t.TempDir(), "rdmad.toml")
	unix.Mkfifo(main, 0o644)
	_, err = loadWithin(t, 5*time.Second, main)
	wantLoadError(t, err, main+": is a FIFO")

	// A symlink in rdmad.d to a regular file is the admin's choice.
	os.Remove(fifo)
	target := filepath.Join(t.TempDir(), "shared.toml")
	os.WriteFile(target, []byte("[daemon]\nlog_level = \"error\"\n"), 0o644)
	os.Symlink(target, filepath.Join(filepath.Dir(p), "rdmad.d", "30-link.toml"))
	cfg, err := Load(p)
	if err != nil || cfg.Daemon.LogLevel != "error" {
		t.Errorf("symlinked drop-in: %v, %+v", err, cfg)
	}
	// A directory named *.toml is not a file either.
	os.Mkdir(filepath.Join(filepath.Dir(p), "rdmad.d", "40-dir.toml"), 0o755)
	_, err = Load(p)
	wantLoadError(t, err, "40-dir.toml: is a directory, not a regular file")
}

// TestErrorFlood: a file of 35,000 unknown keys is reported by its first
// problems, in linear time; before, finding each key's line made the load
// quadratic (over 20 minutes with the main loop stalled for the 90,000 keys
// that fit in 1 MiB) and the message megabytes long. The bounds are loose
// for the race detector on a busy machine.
func TestErrorFlood(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 300<<10; i++ {
		fmt.Fprintf(&b, "k%d = 1\n", i)
	}
	p := write(t, map[string]string{"rdmad.toml": b.String()})
	_, err := loadWithin(t, 30*time.Second, p)
	wantLoadError(t, err, "unknown keys in all; the first 20 follow", "rdmad.toml:1: k0: unknown key")
	var errs Errors
	errors.As(err, &errs)
	if len(errs) > maxErrors+1 {
		t.Errorf("%d errors listed, want at most %d", len(errs), maxErrors+1)
	}

	// The same with validation errors: 5,000 bad policies.
	b.Reset()
	for i := 0; i < 5000; i++ {
		fmt.Fprintf(&b, "[[policy]]\nname = \"p%d\"\nmtu = 1\n", i)
	}
	p = write(t, map[string]string{"rdmad.toml": b.String()})
	_, err = loadWithin(t, 30*time.Second, p)
	wantLoadError(t, err, `policy "p0"`, "more problems not listed")

	// A megabyte-long value is clipped in the message.
	p = write(t, map[string]string{"rdmad.toml": "[daemon]\nlog_level = \"" + strings.Repeat("x", 900000) + "\"\n"})
	_, err = loadWithin(t, 5*time.Second, p)
	wantLoadError(t, err, "rdmad.toml:2: daemon.log_level: \"xxx", "...(900000 bytes)")
}

// TestUsersDomainInjection is issue #13 item 12: users_domain ends up as the
// first field of lines in a pam_limits file read as root at every login.
// "\v" and "\0" split it into a second rule there (proven: NPROC 0 for
// everyone). Each injection is refused with file:line and the key.
func TestUsersDomainInjection(t *testing.T) {
	for _, tt := range []struct{ name, toml string }{
		{"vertical tab", `"*\u000bhard\u000bnproc\u000b0"`},
		{"NUL", `"*\u0000hard nproc 0"`},
		{"newline", `"*\nhard nproc 0"`},
		{"carriage return", `"*\rhard nproc 0"`},
		{"form feed", `"*\fx"`},
		{"space", `"* hard nproc 0"`},
		{"tab", `"*\thard"`},
		{"comment", `"@rdma#x"`},
		{"NEL", `"\u0085"`},
		{"percent group", `"%rdma"`},
		{"dash", `"-rdma"`},
		{"empty", `""`},
		{"too long", `"` + strings.Repeat("a", 33) + `"`},
		{"bad range", `"2000:1000"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := write(t, map[string]string{"rdmad.toml": "[daemon]\nlog_level = \"info\"\n",
				"rdmad.d/60-memlock.toml": "# users\n[memlock]\nusers = \"64MiB\"\nusers_domain = " + tt.toml + "\n"})
			_, err := Load(p)
			wantLoadError(t, err, "rdmad.d/60-memlock.toml:4: memlock.users_domain: ")
			if err != nil && strings.ContainsAny(err.Error(), "\v\x00\r\f\u0085") {
				t.Errorf("the error carries the control character: %q", err)
			}
			if err != nil && strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("one bad value made a multi-line error: %q", err)
			}
		})
	}
	for _, d := range []string{"*", "@rdma", "alice", "1000:", "@1000:1999", ":999", "svc.rdma-1"} {
		p := write(t, map[string]string{"rdmad.toml": "[memlock]\nusers = \"64MiB\"\nusers_domain = \"" + d + "\"\n"})
		if cfg, err := Load(p); err != nil || cfg.Memlock.UsersDomain != d {
			t.Errorf("users_domain %q: %v", d, err)
		}
	}
}

// TestUntrustedConfigFiles is #41's review of the files rdmad reads as
// root: the configuration decides the policy rdmad applies, who is an
// admin ([daemon] admin_group) and whom the control endpoint answers, so a
// drop-in that another user may write (or owns), or a configuration
// directory another user may write (and so empty or rename), is refused
// with the file, its owner and mode and the fix; before, such a file was
// read like root's. As root the untrusted owner is uid 65534, as another
// user only the modes are tried.
func TestUntrustedConfigFiles(t *testing.T) {
	const grab = "[daemon]\nadmin_group = \"users\"\n"
	for _, tt := range []struct {
		name  string
		mode  os.FileMode
		owner int // -1: this user
		want  string
	}{
		{"world-writable drop-in", 0o666, -1, " mode 0666; it decides what rdmad does as root"},
		{"group-writable drop-in", 0o664, -1, "with mode 0664"},
		{"another user's drop-in", 0o644, 65534, "is owned by uid 65534 with mode 0644"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.owner >= 0 && os.Geteuid() != 0 {
				t.Skip("needs root to give the file to another user")
			}
			p := write(t, map[string]string{"rdmad.toml": "", "rdmad.d/50-grab.toml": grab})
			drop := filepath.Join(filepath.Dir(p), "rdmad.d", "50-grab.toml")
			if err := os.Chmod(drop, tt.mode); err != nil {
				t.Fatal(err)
			}
			if tt.owner >= 0 {
				if err := os.Chown(drop, tt.owner, tt.owner); err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := Load(p)
			if err == nil {
				t.Fatalf("loaded, admin_group %q; want the drop-in refused", cfg.Daemon.AdminGroup)
			}
			wantLoadError(t, err, "50-grab.toml: ", tt.want, "chown root: "+drop+" && chmod go-w "+drop)
		})
	}
	t.Run("world-writable drop-in directory", func(t *testing.T) {
		p := write(t, map[string]string{"rdmad.toml": "", "rdmad.d/20-ok.toml": "[daemon]\nlog_level = \"warn\"\n"})
		dir := filepath.Join(filepath.Dir(p), "rdmad.d")
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p)
		wantLoadError(t, err, dir+": is owned by uid", "mode 0777", "chmod go-w "+dir)
		// Sticky, as /tmp: others cannot rename or remove this user's
		// files there, and a file of theirs is refused by the file check.
		if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
			t.Fatal(err)
		}
		if cfg, err := Load(p); err != nil || cfg.Daemon.LogLevel != "warn" {
			t.Errorf("sticky drop-in directory: %v", err)
		}
	})
	t.Run("root's 0644 and 0600", func(t *testing.T) {
		p := write(t, map[string]string{"rdmad.toml": "", "rdmad.d/50-grab.toml": grab})
		for _, m := range []os.FileMode{0o644, 0o600, 0o444} {
			os.Chmod(filepath.Join(filepath.Dir(p), "rdmad.d", "50-grab.toml"), m)
			if cfg, err := Load(p); err != nil || cfg.Daemon.AdminGroup != "users" {
				t.Errorf("mode %04o: %v", m, err)
			}
		}
	})
}
