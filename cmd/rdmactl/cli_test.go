package main

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/client/apitype"
)

// goFlagText is what Go's flag package prints on a mistake; rdmactl has
// its own messages.
var goFlagText = []string{"flag provided but not defined", "Usage of ", "-flag"}

// TestCommandHelp: `rdmactl CMD -h`, `--help` and `rdmactl help CMD` show the
// command's own usage (its synopsis, flags and exit codes), on stdout,
// exit 0; not the list of all commands.
func TestCommandHelp(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}, {"-h", c.name}} {
			code, out, errs := rdmactl(t, args...)
			if code != exitOK || errs != "" {
				t.Errorf("rdmactl %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, errs)
			}
			if want := "Usage: rdmactl [FLAGS] " + c.name; !strings.HasPrefix(out, want) {
				t.Errorf("rdmactl %s: stdout does not start with %q:\n%s", strings.Join(args, " "), want, out)
			}
			if strings.Contains(out, "Commands:") {
				t.Errorf("rdmactl %s shows the list of all commands, not %s's help:\n%s", strings.Join(args, " "), c.name, out)
			}
			if !strings.Contains(out, "Exit codes: ") {
				t.Errorf("rdmactl %s does not say what its exit codes mean:\n%s", strings.Join(args, " "), out)
			}
		}
	}
	_, out, _ := rdmactl(t, "doctor", "-h")
	out = strings.Join(strings.Fields(out), " ") // as if not wrapped
	for _, want := range []string{"Usage: rdmactl [FLAGS] doctor [--interval DURATION] ", "--interval DURATION", "0 to 10s", "3 a check warns or fails"} {
		if !strings.Contains(out, want) {
			t.Errorf("rdmactl doctor -h lacks %q:\n%s", want, out)
		}
	}
	// A mistake after -h does not hide the help.
	if code, out, _ := rdmactl(t, "doctor", "--bogus", "-h"); code != exitOK || !strings.HasPrefix(out, "Usage: rdmactl [FLAGS] doctor") {
		t.Errorf("rdmactl doctor --bogus -h: exit %d, want doctor's help:\n%s", code, out)
	}
}

// TestUsageErrors: every mistake on the command line gets rdmactl's own
// message (the command, what is wrong, what to do), the usage line, and
// exit code 2.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--intervl", "5s"}, "rdmactl doctor: unknown flag --intervl; did you mean --interval?\nUsage: rdmactl [FLAGS] doctor [--interval DURATION]\n"},
		{[]string{"doctor", "-x"}, "rdmactl doctor: unknown flag -x\n"},
		{[]string{"doctor", "--interval"}, "rdmactl doctor: --interval needs a DURATION, e.g. --interval 5s\n"},
		{[]string{"doctor", "--interval", "5x"}, `rdmactl doctor: --interval "5x" is not a duration; give one such as 5s or 500ms`},
		{[]string{"doctor", "--interval=20s"}, "rdmactl doctor: --interval 20s is out of range; use 0 to 10s\n"},
		{[]string{"doctor", "now"}, `rdmactl doctor: unexpected argument "now"; doctor takes none`},
		{[]string{"doctor", "--", "--json"}, "rdmactl doctor: --json is rdmactl's own flag: give it before --\n"},
		{[]string{"--interval", "5s", "doctor"}, "rdmactl: --interval is a flag of doctor: give it after the command, e.g. rdmactl doctor --interval 5s\n"},
		{[]string{"stauts"}, `rdmactl: unknown command "stauts"; did you mean status?`},
		{[]string{"bogus"}, `rdmactl: unknown command "bogus"; the commands are status, check, reload, policy, peers, qos, probe, bw, doctor, bugreport, watch, resources, version, help` + "\n"},
		{[]string{"help", "bogus"}, `rdmactl: unknown command "bogus"`},
		{[]string{"policy"}, "rdmactl policy: say which: `rdmactl policy diff`"},
		{[]string{"policy", "dif"}, `rdmactl policy: unknown action "dif"; did you mean diff?`},
		{[]string{"policy", "diff", "now"}, `rdmactl policy: unexpected argument "now"; policy diff takes none`},
		{[]string{"probe"}, "rdmactl probe: say which peer, e.g. `rdmactl probe 192.0.2.17`"},
		{[]string{"probe", "a", "b"}, `rdmactl probe: unexpected argument "b"; probe takes only PEER`},
		{[]string{"bw"}, "rdmactl bw: say which peer, e.g. `rdmactl bw 192.0.2.17`"},
		{[]string{"bw", "a", "b"}, `rdmactl bw: unexpected argument "b"; bw takes only PEER`},
		{[]string{"bw", "p", "--op", "atomic"}, `rdmactl bw: --op "atomic": use write, read or send`},
		{[]string{"bw", "p", "--size", "2MiB"}, "rdmactl bw: --size 2MiB is out of range; use 1 byte to 1MiB"},
		{[]string{"bw", "p", "--size", "0"}, "rdmactl bw: --size 0 is out of range"},
		{[]string{"bw", "p", "--size", "lots"}, `rdmactl bw: --size "lots" is not a size`},
		{[]string{"bw", "p", "--duration", "1m"}, "rdmactl bw: --duration 1m0s is out of range; use 100ms to 30s"},
		{[]string{"bw", "p", "--duration", "soon"}, `rdmactl bw: --duration "soon" is not a duration`},
		{[]string{"bw", "p", "--duratoin", "3s"}, "rdmactl bw: unknown flag --duratoin; did you mean --duration?"},
		{[]string{"status", "--json=yes"}, "rdmactl status: --json takes no value\n"},
		{[]string{"--socket"}, "rdmactl: --socket needs a PATH, e.g. --socket /run/rdmad/rdmad.sock\n"},
		{[]string{"--socket="}, "rdmactl: --socket needs a PATH, not an empty one"},
		{[]string{"--bogus", "status"}, "rdmactl: unknown flag --bogus\n"},
		{[]string{"--jsno", "status"}, "rdmactl: unknown flag --jsno; did you mean --json?\n"},
		{[]string{}, "rdmactl: no command given\n"},
		{[]string{"completion", "tcsh"}, `rdmactl completion: unknown action "tcsh"; say bash or zsh or fish`},
	} {
		code, out, errs := rdmactl(t, tc.args...)
		if code != exitUsage {
			t.Errorf("rdmactl %s: exit %d, want %d (usage)", strings.Join(tc.args, " "), code, exitUsage)
		}
		if !strings.Contains(errs, tc.want) {
			t.Errorf("rdmactl %s: stderr lacks %q:\n%s", strings.Join(tc.args, " "), tc.want, errs)
		}
		if !strings.Contains(errs, "Usage: rdmactl") {
			t.Errorf("rdmactl %s: stderr lacks the usage line:\n%s", strings.Join(tc.args, " "), errs)
		}
		for _, bad := range goFlagText {
			if strings.Contains(errs, bad) {
				t.Errorf("rdmactl %s: stderr has Go's flag package text %q:\n%s", strings.Join(tc.args, " "), bad, errs)
			}
		}
		if out != "" {
			t.Errorf("rdmactl %s: a usage error printed to stdout:\n%s", strings.Join(tc.args, " "), out)
		}
	}
}

// TestVersionFlag: rdmactl --version prints rdmactl's version without
// asking rdmad (which need not run).
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"--socket", "/nonexistent/rdmad.sock", "--version"}} {
		code, out, errs := rdmactl(t, args...)
		if code != exitOK || out != "rdmactl "+version+"\n" || errs != "" {
			t.Errorf("rdmactl %s: exit %d, stdout %q, stderr %q; want 0, %q, nothing", strings.Join(args, " "), code, out, errs, "rdmactl "+version+"\n")
		}
	}
}

// TestFlagForms: the global flags work before and after the command, long
// and short, grouped, with = or a separate value; doctor's --interval also
// in the -interval form of Go's flag package it used to be parsed with.
func TestFlagForms(t *testing.T) {
	sock := fakeRdmad(t, map[string]http.HandlerFunc{
		"GET /v1/status": answer(t, apitype.Snapshot{Version: "9.9", State: "running"}),
	})
	for _, args := range [][]string{
		{"--socket", sock, "--json", "version"},
		{"--socket=" + sock, "version", "--json"},
		{"-s", sock, "-j", "version"},
		{"-js", sock, "version"},
		{"-s" + sock, "version", "-j"},
		{"version", "-s=" + sock, "--json"},
		{"version", "-jl", "--socket", sock},
	} {
		code, out, errs := rdmactl(t, args...)
		if code != exitOK || !strings.Contains(out, `"rdmad": "9.9"`) {
			t.Errorf("rdmactl %s: exit %d, stdout %q, stderr %q; want the versions as JSON from the fake rdmad", strings.Join(args, " "), code, out, errs)
		}
	}
	for _, args := range [][]string{{"doctor", "-interval", "20s"}, {"doctor", "--", "--interval", "20s"}} {
		if code, _, errs := rdmactl(t, args...); code != exitUsage || !strings.Contains(errs, "20s is out of range") {
			t.Errorf("rdmactl %s: exit %d, stderr %q; want doctor's own range check", strings.Join(args, " "), code, errs)
		}
	}
}

// helpRow finds where the description starts in a row of a help table: a
// left column ("status", "probe PEER", "-s, --socket PATH",
// "    --version") two or more spaces before it; a continuation line is
// indented to it.
var (
	helpHead = regexp.MustCompile(`^[A-Z][a-z]+( [a-z]+)*( \([^)]*\))?:$`)
	helpRow  = regexp.MustCompile(`^  ( {4})?\S+( \S+)*  +\S`)
	helpCont = regexp.MustCompile(`^ {8,}\S`)
)

// descColumns returns the columns at which the descriptions of the help
// tables in out start.
func descColumns(t *testing.T, out string) map[int][]string {
	cols := map[int][]string{}
	inTable := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case helpHead.MatchString(l):
			inTable = true
		case l == "":
			inTable = false
		case inTable && helpCont.MatchString(l):
			cols[len(l)-len(strings.TrimLeft(l, " "))] = append(cols[len(l)-len(strings.TrimLeft(l, " "))], l)
		case inTable:
			m := helpRow.FindStringIndex(l)
			if m == nil {
				t.Errorf("help row %q has no description column", l)
				continue
			}
			cols[m[1]-1] = append(cols[m[1]-1], l)
		}
	}
	return cols
}

// TestHelpAligns: in rdmactl help and each command's help, every
// description starts at the same column, commands and flags alike, and
// no line is wider than 80 columns but the synopsis.
func TestHelpAligns(t *testing.T) {
	pages := map[string][]string{"help": {"help"}}
	for _, c := range commands {
		pages[c.name+" -h"] = []string{c.name, "-h"}
	}
	for name, args := range pages {
		_, out, _ := rdmactl(t, args...)
		cols := descColumns(t, out)
		if len(cols) != 1 {
			t.Errorf("rdmactl %s: descriptions start at %d different columns, want one: %v\n%s", name, len(cols), cols, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if len(l) > helpWidth && !strings.HasPrefix(l, "Usage: ") {
				t.Errorf("rdmactl %s: line of %d columns: %q", name, len(l), l)
			}
		}
	}
	// The list itself: every visible command once, in the table's order.
	_, out, _ := rdmactl(t, "help")
	var got []string
	for _, l := range strings.Split(out[strings.Index(out, "Commands:\n"):], "\n")[1:] {
		if l == "" {
			break
		}
		if f := strings.Fields(l); strings.HasPrefix(l, "  ") && !helpCont.MatchString(l) {
			got = append(got, f[0])
		}
	}
	var want []string
	for _, c := range visible() {
		want = append(want, c.name)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("rdmactl help lists %q, want %q", got, want)
	}
	if strings.Contains(out, "completion") {
		t.Errorf("rdmactl help lists the hidden completion command:\n%s", out)
	}
}
