package memlock

import (
	"encoding/binary"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/internal/size"
)

// FuzzRenderLimits renders rules with arbitrary domains and sizes. The
// output is read by pam_limits as root at every login, so whatever it is
// given, RenderLimits either refuses or writes a file in which
//   - every line is a header comment or a memlock rule, and there are exactly
//     the header's lines plus a soft and a hard line per rule, in order;
//   - each rule line, read the way pam_limits reads it (a '#' starts a
//     comment, fields are split at C isspace), is exactly
//     "<domain> <soft|hard> memlock <value>" of its rule, the value being the
//     size rounded up to KiB or "unlimited";
//   - there is no control character other than the tab between fields and
//     the newline ending each line.
//
// It must also not refuse a plain rule: a short user or @group name with
// soft <= hard.
func FuzzRenderLimits(f *testing.F) {
	ki, mi := uint64(size.KiB), uint64(size.MiB)
	inf := uint64(Unlimited)
	f.Add("*", 64*mi, inf, "@rdma", inf, inf, []byte(nil))
	f.Add("alice", uint64(1), uint64(1025), "bob", uint64(0), uint64(0), []byte(nil))
	f.Add("* hard nofile 1\n*", ki, ki, "x", ki, ki, []byte(nil))
	f.Add("a\vb", ki, ki, "c\x00d", ki, ki, []byte(nil))
	f.Add("@rdma#x", ki, ki, "\u0085", ki, ki, []byte(nil))
	f.Add("*", inf-1, inf, "x", inf-1, inf-1, []byte(nil))
	f.Add("x", 2*mi, mi, "y", ki, ki, encodeRules([]Rule{{Domain: "z", Soft: 1, Hard: 2}, {Domain: "w\f", Soft: 3, Hard: 4}}))
	f.Fuzz(func(t *testing.T, d1 string, s1, h1 uint64, d2 string, s2, h2 uint64, more []byte) {
		rules := []Rule{{Domain: d1, Soft: Size(s1), Hard: Size(h1)}, {Domain: d2, Soft: Size(s2), Hard: Size(h2)}}
		rules = append(rules, decodeRules(more)...)
		for n := 0; n <= len(rules); n++ {
			checkRender(t, rules[:n])
		}
	})
}

// plainDomain is a domain every pam_limits version reads as one field and
// RenderLimits must accept.
var plainDomain = regexp.MustCompile(`^(\*|@?[A-Za-z_][A-Za-z0-9_.-]{0,31})$`)

func checkRender(t *testing.T, rules []Rule) {
	t.Helper()
	out, err := RenderLimits(rules)
	plain := true
	for _, r := range rules {
		if !plainDomain.MatchString(r.Domain) || r.Soft > r.Hard {
			plain = false
		}
	}
	if err != nil {
		if plain {
			t.Fatalf("RenderLimits(%q) refused plain rules: %v", rules, err)
		}
		if err.Error() == "" {
			t.Fatalf("RenderLimits(%q): empty error", rules)
		}
		return
	}
	for _, r := range rules {
		if r.Soft > r.Hard {
			t.Fatalf("RenderLimits(%q) accepted soft %d above hard %d (pam_limits refuses logins)", rules, r.Soft, r.Hard)
		}
	}
	s := string(out)
	if !strings.HasSuffix(s, "\n") {
		t.Fatalf("RenderLimits(%q) = %q: does not end with a newline", rules, s)
	}
	for i := 0; i < len(out); i++ {
		if c := out[i]; (c < 0x20 && c != '\t' && c != '\n') || c == 0x7f {
			t.Fatalf("RenderLimits(%q) = %q: control byte %#x at %d", rules, s, c, i)
		}
	}
	headerLines := strings.Count(limitsHeader, "\n")
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	if want := headerLines + 2*len(rules); len(lines) != want {
		t.Fatalf("RenderLimits(%q): %d lines, want %d (header %d + 2 per rule):\n%s", rules, len(lines), want, headerLines, s)
	}
	for i, l := range lines[:headerLines] {
		if !strings.HasPrefix(l, "#") {
			t.Fatalf("RenderLimits(%q): header line %d %q is not a comment", rules, i+1, l)
		}
	}
	for i, r := range rules {
		got := map[string]bool{}
		for _, l := range lines[headerLines+2*i : headerLines+2*i+2] {
			f := pamFields(l)
			if len(f) != 4 {
				t.Fatalf("RenderLimits(%q): line %q of rule %d reads as %d fields %q, want 4", rules, l, i, len(f), f)
			}
			if f[0] != r.Domain {
				t.Fatalf("RenderLimits(%q): line %q reads as domain %q, want %q", rules, l, f[0], r.Domain)
			}
			if f[2] != "memlock" {
				t.Fatalf("RenderLimits(%q): line %q sets %q, want memlock", rules, l, f[2])
			}
			var want Size
			switch f[1] {
			case "soft":
				want = r.Soft
			case "hard":
				want = r.Hard
			default:
				t.Fatalf("RenderLimits(%q): line %q has type %q, want soft or hard", rules, l, f[1])
			}
			if got[f[1]] {
				t.Fatalf("RenderLimits(%q): two %s lines for rule %d", rules, f[1], i)
			}
			got[f[1]] = true
			if f[3] != kibValue(want) {
				t.Fatalf("RenderLimits(%q): line %q: value %q, want %q (size %d rounded up to KiB)", rules, l, f[3], kibValue(want), uint64(want))
			}
		}
	}
}

// pamFields splits a limits.conf line as pam_limits does: the text from '#'
// on is a comment, fields are separated by C isspace (sscanf %s).
func pamFields(l string) []string {
	if i := strings.IndexByte(l, '#'); i >= 0 {
		l = l[:i]
	}
	return strings.FieldsFunc(l, func(r rune) bool {
		switch r {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			return true
		}
		return false
	})
}

// kibValue is what pam_limits must read for s: "unlimited", or s in KiB,
// rounded up (computed without overflow).
func kibValue(s Size) string {
	if s == Unlimited {
		return "unlimited"
	}
	v := uint64(s) / 1024
	if uint64(s)%1024 != 0 {
		v++
	}
	return strconv.FormatUint(v, 10)
}

// decodeRules reads more rules from b: a length byte, that many bytes of
// domain, then soft and hard as 8 bytes each (big endian); at most 16.
func decodeRules(b []byte) []Rule {
	var rules []Rule
	for len(b) > 0 && len(rules) < 16 {
		n := int(b[0])
		b = b[1:]
		if n > len(b) {
			n = len(b)
		}
		r := Rule{Domain: string(b[:n])}
		b = b[n:]
		var v [16]byte
		copy(v[:], b)
		b = b[min(16, len(b)):]
		r.Soft = Size(binary.BigEndian.Uint64(v[:8]))
		r.Hard = Size(binary.BigEndian.Uint64(v[8:]))
		rules = append(rules, r)
	}
	return rules
}

// encodeRules is decodeRules' inverse, for seeds.
func encodeRules(rules []Rule) []byte {
	var b []byte
	for _, r := range rules {
		b = append(b, byte(len(r.Domain)))
		b = append(b, r.Domain...)
		b = binary.BigEndian.AppendUint64(b, uint64(r.Soft))
		b = binary.BigEndian.AppendUint64(b, uint64(r.Hard))
	}
	return b
}
