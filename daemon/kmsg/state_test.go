package kmsg

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// checkPrintable fails t unless s is valid UTF-8 of printable characters
// and spaces, with no bidirectional controls, at most MaxLine bytes.
func checkPrintable(t *testing.T, b []byte) {
	t.Helper()
	s := string(b)
	if len(s) > MaxLine || !utf8.ValidString(s) {
		t.Fatalf("%q: %d bytes, valid UTF-8 %v", s, len(s), utf8.ValidString(s))
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' || bidiControl(r) {
			t.Fatalf("%q has %U", s, r)
		}
	}
}

func TestPrintable(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct{ in, want string }{
		{"infiniband rxe0: test fault", "infiniband rxe0: test fault"},
		{"tab\tnl\nesc\x1b[31m del\x7f", `tab\x09nl\x0aesc\x1b[31m del\x7f`},
		{"c1 \u0085 \u009b", `c1 \x85 \x9b`},
		{"bidi \u202eevil\u202c \u2066x\u2069 \u200f", `bidi \u202eevil\u202c \u2066x\u2069 \u200f`},
		{"bad utf8 \xff\xc3(", `bad utf8 \xff\xc3(`},
		{"é ü 日本", "é ü 日本"},
		{"zero width \u200b, unassigned \u05cf, plane 14 \U000e0001", `zero width \u200b, unassigned \u05cf, plane 14 \U000e0001`},
		{long, long[:MaxLine-3] + "..."},
		{long[:MaxLine], long[:MaxLine]},
		// An escape is never cut in half.
		{long[:MaxLine-4] + "\x01\x02", long[:MaxLine-4] + `...`},
		{long[:MaxLine-4] + "\x01", long[:MaxLine-4] + `\x01`},
		// Nor a character.
		{long[:MaxLine-4] + "日本", long[:MaxLine-4] + "..."},
	}
	for _, tt := range tests {
		got := string(printable(nil, []byte(tt.in), MaxLine))
		if got != tt.want {
			t.Errorf("printable(%q) =\n %q, want\n %q", tt.in, got, tt.want)
		}
		checkPrintable(t, []byte(got))
	}
}

// fatal is a hit of a fatal per-device pattern.
func fatal(device, pattern string) hit {
	return hit{device: device, pattern: pattern, class: ClassFatal}
}

func TestTableWindowAndForget(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tab := newTable(64)
	if isNew, _ := tab.add(fatal("rxe0", "err"), 3, []byte("first"), t0); !isNew {
		t.Fatal("first add is not new")
	}
	if isNew, _ := tab.add(fatal("rxe0", "err"), 2, []byte("second"), t0.Add(time.Minute)); isNew {
		t.Fatal("second add of the same key is new")
	}
	tab.add(fatal("mlx5_0", "mlx5-health"), 3, []byte("h"), t0.Add(2*time.Minute))
	l := tab.list()
	if len(l) != 2 || l[0].Device != "mlx5_0" || l[1].Device != "rxe0" {
		t.Fatalf("list = %+v, want mlx5_0 then rxe0", l)
	}
	e := l[1]
	if e.Count != 2 || e.Line != "second" || e.Priority != 2 || !e.First.Equal(t0) || !e.Last.Equal(t0.Add(time.Minute)) {
		t.Errorf("rxe0 entry = %+v, want count 2, the second line and priority, First t0, Last t0+1m", e)
	}
	const window = 10 * time.Minute
	if next := tab.nextExpiry(window); !next.Equal(t0.Add(11 * time.Minute)) {
		t.Errorf("next expiry %v, want t0+11m", next)
	}
	if tab.expire(t0.Add(11*time.Minute-time.Nanosecond), window) {
		t.Error("expired before the window ended")
	}
	if !tab.expire(t0.Add(11*time.Minute), window) || len(tab.list()) != 1 {
		t.Errorf("rxe0 not expired at Last+window: %+v", tab.list())
	}
	if !tab.forget("mlx5_0") || len(tab.list()) != 0 {
		t.Errorf("forget left %+v", tab.list())
	}
	if tab.forget("mlx5_0") {
		t.Error("forget of nothing reported a drop")
	}
}

func TestTableEvictsLeastRecent(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tab := newTable(4)
	for i := range 4 {
		tab.add(fatal(fmt.Sprintf("dev%d", i), "err"), 3, nil, t0.Add(time.Duration(i)*time.Second))
	}
	tab.add(fatal("dev0", "err"), 3, nil, t0.Add(10*time.Second)) // dev1 is now the least recent
	if _, ev := tab.add(fatal("dev9", "err"), 3, nil, t0.Add(11*time.Second)); !ev {
		t.Fatal("a fifth key did not evict")
	}
	var got []string
	for _, e := range tab.list() {
		got = append(got, e.Device)
	}
	if strings.Join(got, ",") != "dev0,dev2,dev3,dev9" {
		t.Errorf("after eviction: %v, want dev1 evicted", got)
	}
}

// TestTableAddNoAlloc: a flood of one message costs no allocation.
func TestTableAddNoAlloc(t *testing.T) {
	tab := newTable(64)
	line := []byte("mlx5_core 0000:03:00.0: CREATE_QP(0x500) op_mod(0x0) failed, status bad parameter(0x3)")
	now := time.Now()
	tab.add(fatal("mlx5_0", "mlx5-cmd-failed"), 3, line, now)
	if n := testing.AllocsPerRun(1000, func() { tab.add(fatal("mlx5_0", "mlx5-cmd-failed"), 3, line, now) }); n != 0 {
		t.Errorf("add of a known fault allocates %v times, want 0", n)
	}
}
