package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rdmad/rdmad/client/apitype"
)

// The flags node-problem-detector's per-type conditions need
// (packaging/npd/rdmad-health.json): --type judges one condition type,
// --max-output bounds the npd line at NPD's max_output_length.

// healthSocket is a fake rdmad that serves h as GET /v1/health.
func healthSocket(t *testing.T, h apitype.Health) string {
	t.Helper()
	return fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/health": answer(t, h)})
}

// TestCheckType: --type's exit code is the condition's (0 ok, 1 problem,
// 2 unknown), whatever the other conditions are, and --format npd prints
// the condition's message alone, cut after a whole word at --max-output.
func TestCheckType(t *testing.T) {
	down := verdict("DOWN") // rdmad's verdict: PortDown a problem, every other type judged
	portDown, _ := down.Condition(apitype.CondPortDown)
	flapping, _ := down.Condition(apitype.CondPortFlapping)
	if portDown.Status != apitype.ConditionProblem || flapping.Status != apitype.ConditionOK || len(portDown.Message) <= 80 {
		t.Fatalf("fixture: PortDown %+v, PortFlapping %+v; want a problem longer than 80 bytes and an ok", portDown, flapping)
	}
	unknownNoDevice := apitype.Health{Status: apitype.ConditionUnknown, Conditions: []apitype.Condition{
		{Type: apitype.CondPortDown, Status: apitype.ConditionProblem, Message: "rxe0/1 (eth0) is DOWN/Disabled"},
		{Type: apitype.CondNoDevice, Status: apitype.ConditionUnknown, Message: "the RDMA inventory has not been read yet"}}}
	for _, tc := range []struct {
		name string
		h    apitype.Health
		args []string
		code int
		out  string // the whole output
	}{
		{"problem, whole", down, []string{"--type", "PortDown", "--max-output", "1024"}, 1, portDown.Message + "\n"},
		{"problem, 80 bytes by default", down, []string{"--type", "PortDown"}, 1,
			"rxe0/1 (eth0) is DOWN/Disabled: check the cable, the switch port and `ip...\n"},
		{"ok while another type is a problem", down, []string{"--type", "PortFlapping", "--max-output", "1024"}, 0, flapping.Message + "\n"},
		{"unknown", unknownNoDevice, []string{"--type", "NoDevice", "--format", "npd"}, 2, "the RDMA inventory has not been read yet\n"},
		{"a problem is not outweighed by another's unknown", unknownNoDevice, []string{"--type", "PortDown"}, 1, "rxe0/1 (eth0) is DOWN/Disabled\n"},
		{"not in the verdict (an older rdmad)", unknownNoDevice, []string{"--type", "LoopbackBandwidthLow", "--max-output", "1024"}, 2,
			"rdmad's verdict has no LoopbackBandwidthLow condition: this rdmad is older than rdmactl and does not check it; restart rdmad after an upgrade\n"},
		{"nhc, problem", down, []string{"--type", "PortDown", "--format", "nhc"}, 1, "rdmad: PortDown problem: " + portDown.Message + "\n"},
		{"nhc, ok", down, []string{"--type", "PortFlapping", "--format", "nhc"}, 0, "rdmad: healthy\n"},
		{"aggregate, whole", down, []string{"--max-output", "1024"}, 1, "PortDown: " + portDown.Message + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := rdmactl(t, append([]string{"--socket", healthSocket(t, tc.h), "check"}, tc.args...)...)
			if code != tc.code || out != tc.out {
				t.Errorf("exit %d, output %q (stderr %q)\nwant %d, %q", code, out, errOut, tc.code, tc.out)
			}
		})
	}
}

// TestCheckTypeJSON: --json --type prints the verdict of that condition
// alone, in GET /v1/health's shape.
func TestCheckTypeJSON(t *testing.T) {
	code, out, _ := rdmactl(t, "--socket", healthSocket(t, verdict("DOWN")), "--json", "check", "--type", "PortDown")
	var h apitype.Health
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if code != 1 || h.Healthy || h.Status != apitype.ConditionProblem || len(h.Conditions) != 1 || h.Conditions[0].Type != apitype.CondPortDown {
		t.Errorf("exit %d, %+v; want 1 and the PortDown problem alone", code, h)
	}
}

// TestCheckWithoutFlagsUnchanged: without the new flags the npd line is
// what rdmactl always printed (NHC, the aggregate NPD condition and
// scripts read it): at most 80 bytes, and --max-output 80 is the same.
func TestCheckWithoutFlagsUnchanged(t *testing.T) {
	sock := healthSocket(t, verdict("DOWN"))
	_, plain, _ := rdmactl(t, "--socket", sock, "check")
	_, eighty, _ := rdmactl(t, "--socket", sock, "check", "--format", "npd", "--max-output", "80")
	const want = "PortDown: rxe0/1 (eth0) is DOWN/Disabled: check the cable, the switch port...\n"
	if plain != want || eighty != want {
		t.Errorf("check: %q, --max-output 80: %q; want %q", plain, eighty, want)
	}
}

func TestCheckTypeUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // in stderr
	}{
		{"unknown type", []string{"--type", "PortFlap"}, append([]string{`--type "PortFlap" is not a condition type (did you mean PortFlapping?)`}, apitype.ConditionTypes...)},
		{"empty type", []string{"--type="}, []string{"--type needs a TYPE"}},
		{"no near type", []string{"--type", "Fine"}, []string{`--type "Fine" is not a condition type; use one of ConfigInvalid, InputRefused, NoDevice,`}},
		{"lower case", []string{"--type", "portflapping"}, []string{`--type "portflapping" is not a condition type`}},
		{"max-output not a number", []string{"--max-output", "1k"}, []string{`--max-output "1k" is not a number of bytes from 16 to 4096`}},
		{"max-output too small", []string{"--max-output", "15"}, []string{`--max-output "15" is not a number of bytes from 16 to 4096`}},
		{"max-output beyond NPD's buffer", []string{"--max-output", "4097"}, []string{`--max-output "4097"`}},
		{"max-output negative", []string{"--max-output", "-80"}, []string{`--max-output "-80"`}},
		{"max-output with nhc", []string{"--format", "nhc", "--max-output", "200"}, []string{"--max-output bounds the line of --format npd"}},
		{"max-output with json", []string{"--json", "--max-output", "200"}, []string{"--max-output bounds the line of --format npd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := rdmactl(t, append([]string{"check"}, tc.args...)...)
			if code != checkUnknown || out != "" {
				t.Errorf("exit %d, stdout %q; want 2 (usage) and nothing", code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
	// The bounds themselves are accepted.
	sock := healthSocket(t, verdict("ACTIVE"))
	for _, n := range []string{"16", "4096"} {
		if code, out, errOut := rdmactl(t, "--socket", sock, "check", "--max-output", n); code != 0 || errOut != "" || len(out) > 4097 {
			t.Errorf("--max-output %s: exit %d, %q, %q", n, code, out, errOut)
		}
	}
}

// TestClipWords: a line longer than n keeps the words that fit with "...",
// never more than n bytes, never a broken UTF-8 sequence, and cuts a word
// only when the first one alone is too long.
func TestClipWords(t *testing.T) {
	msg := "mlx5_0 (mlx5-health, 3×): health syndrome 0x8 (fw: Fatal internal error); `journalctl -k` has the context, and mlx5_1 (mlx5-health, 2×): ×××× ok"
	for n := minMaxOutput; n <= len(msg)+1; n++ {
		got := clipWords(msg, n)
		if !utf8.ValidString(got) || len(got) > n {
			t.Fatalf("n %d: %q (%d bytes) is not valid UTF-8 within n", n, got, len(got))
		}
		if len(msg) <= n {
			if got != msg {
				t.Errorf("n %d: %q, want it whole", n, got)
			}
			continue
		}
		head, ok := strings.CutSuffix(got, "...")
		rest, isPrefix := strings.CutPrefix(msg, head)
		if !ok || !isPrefix || rest == "" || !strings.ContainsRune(" ,;:.", rune(rest[0])) {
			t.Errorf("n %d: %q is not %q cut after a whole word with ...", n, got, msg)
		}
	}
	if got := clipWords(strings.Repeat("é", 20), 16); got != "éééééé..." {
		t.Errorf("one long word: %q, want it cut at a character", got)
	}
	// The line of --type and the aggregate's keep the message whole when it fits.
	c := apitype.Condition{Type: apitype.CondPortFlapping, Status: apitype.ConditionProblem, Message: "a\nb"}
	if got := npdTypeLine(c, 1024); got != "a b" {
		t.Errorf("npdTypeLine: %q", got)
	}
	if got := npdTypeLine(apitype.Condition{Type: apitype.CondPortDown, Status: apitype.ConditionUnknown}, 80); got != "PortDown unknown" {
		t.Errorf("npdTypeLine without a message: %q", got)
	}
	long := strings.Repeat("word ", 300)
	if got := npdLine(apitype.Health{Status: apitype.ConditionProblem, Conditions: []apitype.Condition{c, {Type: "X", Status: apitype.ConditionProblem, Message: long}}}, 1024); got != "PortFlapping: a b" {
		t.Errorf("npdLine: %q", got)
	}
	for _, n := range []int{80, 256, 1024} {
		h := apitype.Health{Status: apitype.ConditionProblem, Conditions: []apitype.Condition{{Type: "X", Status: apitype.ConditionProblem, Message: long}}}
		if got := npdLine(h, n); len(got) > n || !strings.HasSuffix(got, "word...") {
			t.Errorf("npdLine at %s: %d bytes, %q", strconv.Itoa(n), len(got), got)
		}
	}
}
