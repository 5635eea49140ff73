package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"
)

// nestedMaxBytes bounds what FuzzLoadNested writes: a little over 2 MiB, so
// that the generated files fall on both sides of a 1 MiB file bound.
const nestedMaxBytes = 2<<20 + 4096

// FuzzLoadNested loads configurations shaped like the attacks of issue #13:
// arrays and inline tables nested up to a million deep (closed or not),
// dotted headers a million keys long, strings of megabytes, hundreds of
// thousands of keys or [[policy]] blocks, control characters in
// users_domain, in the main file or in a drop-in. The shape and its size
// come from the fuzz input (see nestedConfig). Whatever the file, Load
//   - returns (no panic, no stack overflow: either kills rdmad at start or
//     reload), within 10 s and a bounded amount of allocation;
//   - fails with a non-empty config.Errors whose every entry names one of the
//     files loaded and says something;
//   - or returns a configuration that satisfies what validation promises:
//     named, unique policies with a valid mode, absolute socket and limits
//     file, a known log level, a users_domain that is one limits.conf field
//     (no whitespace, '#' or control character), and the files it read.
func FuzzLoadNested(f *testing.F) {
	f.Add(uint8(0), uint32(3), "\"10.0.0.0/8\"", uint8(0))
	f.Add(uint8(1), uint32(64), "", uint8(1))
	f.Add(uint8(2), uint32(16), "1", uint8(0))
	f.Add(uint8(3), uint32(0), "@rdma", uint8(0))
	f.Add(uint8(4), uint32(1000), "x", uint8(2))
	f.Add(uint8(5), uint32(100), "1", uint8(0))
	f.Add(uint8(6), uint32(100), "", uint8(0))
	f.Add(uint8(7), uint32(50), "", uint8(1))
	f.Add(uint8(8), uint32(40), "\x55\xaa", uint8(0))
	f.Add(uint8(9), uint32(2), "[daemon]\nlog_level = \"debug\"\n", uint8(1))
	f.Fuzz(func(t *testing.T, shape uint8, n uint32, s string, where uint8) {
		body := nestedConfig(shape, n, s)
		dir := t.TempDir()
		main := filepath.Join(dir, "rdmad.toml")
		dropIn := filepath.Join(dir, DropInDir, "50-fuzz.toml")
		files := []string{main}
		mainBody := body
		switch where % 3 {
		case 1: // the body in a drop-in, a plain main file
			mainBody = []byte("[daemon]\nlog_level = \"info\"\n")
			files = append(files, dropIn)
		case 2: // the body in both
			files = append(files, dropIn)
		}
		if err := os.WriteFile(main, mainBody, 0o644); err != nil {
			t.Fatal(err)
		}
		if len(files) == 2 {
			if err := os.Mkdir(filepath.Dir(dropIn), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dropIn, body, 0o644); err != nil {
				t.Fatal(err)
			}
		}

		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		cfg, err := Load(main)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		desc := fmt.Sprintf("shape %d n %d s %.40q where %d (%d bytes)", shape%10, n, s, where%3, len(body))
		if took > 10*time.Second {
			t.Errorf("%s: Load took %v", desc, took)
		}
		// The whole input is at most 2 x 2 MiB; a load that allocates more
		// than 64 times that (plus slack for the runtime) is superlinear.
		// Not under the race detector: see raceEnabled. `make fuzz` runs
		// without it, so the bound is checked there and in plain go test.
		if alloc := after.TotalAlloc - before.TotalAlloc; !raceEnabled && alloc > 64*uint64(len(body)+len(mainBody))+64<<20 {
			t.Errorf("%s: Load allocated %d MiB", desc, alloc>>20)
		}
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("%s: Load error %.300q (%T) is not a non-empty config.Errors", desc, err, err)
			}
			for _, e := range errs {
				if e == nil || (e.File != main && e.File != dropIn) || e.Msg == "" {
					t.Fatalf("%s: error %.300q does not name a loaded file (%s, %s) or says nothing", desc, fmt.Sprint(e), main, dropIn)
				}
				if !strings.HasPrefix(e.Error(), e.File) {
					t.Fatalf("%s: error %.300q does not start with its file", desc, e.Error())
				}
			}
			return
		}
		checkLoaded(t, desc, cfg, files)
	})
}

// checkLoaded checks what validation promises of a configuration Load
// returned.
func checkLoaded(t *testing.T, desc string, cfg *Config, files []string) {
	t.Helper()
	if strings.Join(cfg.Files, "\n") != strings.Join(files, "\n") {
		t.Fatalf("%s: Files = %q, want %q", desc, cfg.Files, files)
	}
	names := map[string]bool{}
	for _, p := range cfg.Policies {
		if p.Name == "" || names[p.Name] {
			t.Fatalf("%s: accepted a policy without a name or twice: %q", desc, p.Name)
		}
		names[p.Name] = true
		if p.Mode != "enforce" && p.Mode != "observe" {
			t.Fatalf("%s: accepted policy %q with mode %q", desc, p.Name, p.Mode)
		}
	}
	if !filepath.IsAbs(cfg.Daemon.Socket) {
		t.Fatalf("%s: accepted a relative socket %q", desc, cfg.Daemon.Socket)
	}
	switch cfg.Daemon.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		t.Fatalf("%s: accepted log level %q", desc, cfg.Daemon.LogLevel)
	}
	if !filepath.IsAbs(cfg.Memlock.LimitsFile) {
		t.Fatalf("%s: accepted a relative limits_file %q", desc, cfg.Memlock.LimitsFile)
	}
	d := cfg.Memlock.UsersDomain
	if d == "" || strings.IndexFunc(d, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '#' }) >= 0 {
		t.Fatalf("%s: accepted users_domain %q, which limits.conf does not read as one domain", desc, d)
	}
}

// nestedConfig builds one configuration file of the given shape, n
// repetitions deep or long and with s inside, at most nestedMaxBytes.
func nestedConfig(shape uint8, n uint32, s string) []byte {
	if len(s) > 4096 {
		s = s[:4096]
	}
	// upto bounds n so that n repetitions of unit bytes stay within the
	// file bound.
	upto := func(unit int) int { return int(n % uint32(nestedMaxBytes/unit+1)) }
	var b strings.Builder
	switch shape % 10 {
	case 0: // allow = [[[...s...]]]
		k := upto(2)
		b.WriteString("[probe]\nallow = ")
		b.WriteString(strings.Repeat("[", k))
		b.WriteString(s)
		b.WriteString(strings.Repeat("]", k))
		b.WriteString("\n")
	case 1: // allow = [[[... never closed
		b.WriteString("[probe]\nallow = ")
		b.WriteString(strings.Repeat("[", upto(1)))
		b.WriteString(s)
	case 2: // inline tables {a={a={...}}} under a known and an unknown key
		k := upto(4)
		b.WriteString("[probe]\nallow = ")
		b.WriteString(strings.Repeat("{a=", k))
		b.WriteString(s)
		b.WriteString(strings.Repeat("}", k))
		b.WriteString("\nx = ")
		b.WriteString(strings.Repeat("{a=", k))
		b.WriteString(s)
		b.WriteString(strings.Repeat("}", k))
		b.WriteString("\n")
	case 3: // users_domain with any characters, through TOML escapes
		b.WriteString("[memlock]\nusers = \"64MiB\"\nusers_domain = ")
		b.WriteString(tomlBasicString(s))
		b.WriteString("\n")
	case 4: // a long string value
		b.WriteString("[daemon]\nlog_level = ")
		b.WriteString(tomlBasicString(strings.Repeat(s+"x", upto(len(s)+1))))
		b.WriteString("\n")
	case 5: // many keys with the value s
		k := upto(len(s) + 12)
		b.WriteString("[x]\n")
		for i := 0; i < k && b.Len() < nestedMaxBytes; i++ {
			fmt.Fprintf(&b, "k%d = %s\n", i, s)
		}
	case 6: // a dotted header a.a.a....a
		b.WriteString("[")
		b.WriteString(strings.Repeat("a.", upto(2)))
		b.WriteString("a]\n")
		b.WriteString(s)
	case 7: // many [[policy]] blocks
		unit := "[[policy]]\nname = \"p0000000\"\nnetdevs = [\"e*\"]\nmtu = 1500\n"
		k := upto(len(unit))
		for i := 0; i < k && b.Len() < nestedMaxBytes; i++ {
			fmt.Fprintf(&b, "[[policy]]\nname = \"p%d\"\nnetdevs = [\"e*\"]\nmtu = 1500\n", i%max(1, len(s)*1000+1))
		}
	case 8: // arrays and inline tables mixed, opened as the bits of s say
		k := upto(4)
		b.WriteString("[probe]\nallow = ")
		var closes []string
		for i := 0; i < k; i++ {
			bit := len(s) > 0 && s[(i/8)%len(s)]>>(i%8)&1 == 1
			if bit {
				b.WriteString("{a=")
				closes = append(closes, "}")
			} else {
				b.WriteString("[")
				closes = append(closes, "]")
			}
		}
		b.WriteString("1")
		for i := len(closes) - 1; i >= 0; i-- {
			b.WriteString(closes[i])
		}
		b.WriteString("\n")
	case 9: // s itself, repeated
		if s != "" {
			b.WriteString(strings.Repeat(s, upto(len(s))))
		}
	}
	out := b.String()
	if len(out) > nestedMaxBytes {
		out = out[:nestedMaxBytes]
	}
	return []byte(out)
}

// tomlBasicString quotes s as a TOML basic string; every byte a TOML string
// cannot hold raw is escaped (\uXXXX for control characters, U+FFFD for
// invalid UTF-8 bytes, which TOML cannot carry).
func tomlBasicString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
