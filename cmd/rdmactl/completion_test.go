package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/internal/testenv"
)

var update = flag.Bool("update", false, "write packaging/completions/ from the command table")

// completionFiles are the checked-in completions, by shell.
var completionFiles = map[string]string{
	"bash": "../../packaging/completions/rdmactl.bash",
	"zsh":  "../../packaging/completions/_rdmactl",
	"fish": "../../packaging/completions/rdmactl.fish",
}

func completion(t *testing.T, shell string) string {
	t.Helper()
	code, out, errs := rdmactl(t, "completion", shell)
	if code != exitOK || errs != "" {
		t.Fatalf("rdmactl completion %s: exit %d, stderr %q", shell, code, errs)
	}
	return out
}

// TestCompletionFiles: packaging/completions/ holds what the command table
// generates; -update writes it.
func TestCompletionFiles(t *testing.T) {
	for shell, path := range completionFiles {
		want := completion(t, shell)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s differs from `rdmactl completion %s` (the command table changed): run go test ./cmd/rdmactl -run TestCompletionFiles -update\n%s",
				path, shell, lineDiff(want, string(got)))
		}
	}
}

// lineDiff shows the first line where got differs from want.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n-%s\n+%s", i+1, wl, gl)
		}
	}
	return ""
}

// TestCompletionsOfferTheCommands reads the commands as packaging/check
// does: from rdmactl help, the bash list and the zsh list. They are the
// visible commands of the table, and the hidden completion command is
// offered by neither.
func TestCompletionsOfferTheCommands(t *testing.T) {
	_, help, _ := rdmactl(t, "help")
	var fromHelp []string
	for _, l := range strings.Split(help[strings.Index(help, "Commands:\n")+len("Commands:\n"):], "\n") {
		if l == "" {
			break
		}
		if regexp.MustCompile(`^  [a-z]`).MatchString(l) {
			fromHelp = append(fromHelp, strings.Fields(l)[0])
		}
	}
	m := regexp.MustCompile(`(?m)^\tlocal commands='([a-z ]*)'$`).FindStringSubmatch(completion(t, "bash"))
	if m == nil {
		t.Fatal("the bash completion has no line \\tlocal commands='...' (packaging/check reads it)")
	}
	var fromZsh []string
	for _, m := range regexp.MustCompile(`(?m)^\t'([a-z]*):`).FindAllStringSubmatch(completion(t, "zsh"), -1) {
		fromZsh = append(fromZsh, m[1])
	}
	want := "status check reload policy peers qos probe bw doctor bugreport watch resources version help"
	for name, got := range map[string]string{"rdmactl help": strings.Join(fromHelp, " "), "bash": m[1], "zsh": strings.Join(fromZsh, " ")} {
		if got != want {
			t.Errorf("%s offers %q, want %q", name, got, want)
		}
	}
}

// TestBashCompletion completes command lines with the generated script in
// bash, with bash-completion as the packages depend on it.
func TestBashCompletion(t *testing.T) {
	const lib = "/usr/share/bash-completion/bash_completion"
	testenv.Tool(t, "bash", "apt-get install bash")
	testenv.File(t, lib, "apt-get install bash-completion")
	dir := t.TempDir()
	script := filepath.Join(dir, "rdmactl.bash")
	if err := os.WriteFile(script, []byte(completion(t, "bash")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rdmad.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ words, want string }{
		// packaging/check's cases.
		{"rdmactl st", "status"},
		{"rdmactl --json ''", "status check reload policy peers qos probe bw doctor bugreport watch resources version help"},
		{"rdmactl status ''", ""},
		{"rdmactl --j", "--json"},
		{"rdmactl policy ''", "diff apply"},
		{"rdmactl policy diff ''", ""},
		// Flags of a command, after it; --version only before it.
		{"rdmactl doctor --i", "--interval"},
		{"rdmactl doctor --interval ''", ""},
		{"rdmactl --v", "--version"},
		{"rdmactl status --v", ""},
		{"rdmactl status --f", "--full"},
		{"rdmactl -", "--socket --json --full --help --version"},
		// A flag's value is no command.
		{"rdmactl --socket " + dir + "/rdmad.", dir + "/rdmad.sock"},
		{"rdmactl -s " + dir + "/rdmad.", dir + "/rdmad.sock"},
		{"rdmactl --socket " + dir + "/rdmad.sock pol", "policy"},
		{"rdmactl --socket=" + dir + "/rdmad.", dir + "/rdmad.sock"},
		{"rdmactl help d", "doctor"},
		{"rdmactl help doctor ''", ""},
		{"rdmactl comp", ""},
		// Fixed values, and live ones from rdmactl __complete (the
		// function below stands for it).
		{"rdmactl peers --state d", "degraded down"},
		{"rdmactl bw x --op ''", "write read send"},
		{"rdmactl check --format n", "npd nhc"},
		{"rdmactl probe ''", "192.0.2.7 node2"},
		{"rdmactl bw n", "node2"},
		{"rdmactl probe node2 ''", ""},
		{"rdmactl peers --group ''", "tor-a tor-b"},
		{"rdmactl qos ''", "ens1f0"},
		// From the rdmad of the socket on the line.
		{"rdmactl --socket " + dir + "/rdmad.sock probe ''", "via" + dir + "/rdmad.sock"},
		{"rdmactl probe -s " + dir + "/rdmad.sock ''", "via" + dir + "/rdmad.sock"},
		{"rdmactl --socket=" + dir + "/rdmad.sock peers --group ''", "tor-a tor-b"},
	}
	var prog strings.Builder
	prog.WriteString("source " + lib + "\nsource " + script + "\n")
	prog.WriteString(`rdmactl() { local s=; [[ $1 == --socket ]] && { s=$2; shift 2; }; [[ $1 == __complete ]] || return 1; ` +
		`case $2 in peers) if [[ $s ]]; then echo "via$s"; else printf '%s\n' 192.0.2.7 node2; fi ;; groups) printf '%s\n' tor-a tor-b ;; netdevs) echo ens1f0 ;; esac; }` + "\n")
	prog.WriteString(`t() { COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; read -ra COMP_WORDS <<<"$COMP_LINE"; [[ $COMP_LINE == *\  ]] && COMP_WORDS+=(""); ` +
		`COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _rdmactl; echo "${COMPREPLY[*]}"; }` + "\n")
	for _, c := range cases {
		line := strings.ReplaceAll(c.words, "''", "")
		if strings.HasSuffix(c.words, "''") {
			line = strings.TrimSuffix(line, " ") + " "
		}
		prog.WriteString("t '" + line + "'\n")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--norc", "--noprofile", "-c", prog.String())
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bash: %v\n%s", err, errb.String())
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != len(cases) {
		t.Fatalf("bash printed %d lines for %d cases:\n%s\n%s", len(got), len(cases), out.String(), errb.String())
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("bash completes %q to %q, want %q", c.words, got[i], c.want)
		}
	}
}

// zshCapture completes the command line $2 with the completion functions
// in directory $1 in an interactive zsh on a pseudo-terminal (zsh/zpty),
// and prints each match on its own line.
const zshCapture = `
zmodload zsh/zpty || exit 3
fdir=$1
zpty z zsh -f -i
setup=$fdir/setup.$$.zsh
cat > $setup <<SETUP
PROMPT=
# The completion system's own directories only: compinit reads every
# file of fpath, and these suffice for rdmactl's.
comp=(\${(M)fpath:#*/Completion(|/Base|/Unix|/Zsh)})
(( \$#comp )) || comp=(\$fpath)
fpath=($fdir \$comp)
autoload -U compinit
compinit -u -D
bindkey '^I' complete-word
null-line () { echo -E - \$'\0' }
compprefuncs=( null-line )
comppostfuncs=( null-line exit )
zstyle ':completion:*' list-grouped false
zstyle ':completion:*' insert-tab false
compadd () {
	if [[ \${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
		builtin compadd "\$@"
		return \$?
	fi
	typeset -a __hits
	builtin compadd -A __hits "\$@"
	[[ -n \$__hits ]] || return
	for i in {1..\$#__hits}; do
		echo -E - "\$__hits[\$i]"
	done
}
echo ok
SETUP
zpty -w z "source $setup"
repeat 10; do
	zpty -r z line
	[[ $line == ok* ]] && break
done
zpty -w z "$2"$'\t'
integer tog=0
while zpty -r z; do :; done | while IFS= read -r line; do
	if [[ $line == *$'\0\r' ]]; then
		(( tog++ )) && break || continue
	fi
	(( tog )) && echo -E - ${line%$'\r'}
done
rm -f $setup
`

// TestZshCompletion: the generated script parses, and completes command
// lines in zsh's completion system.
func TestZshCompletion(t *testing.T) {
	testenv.Tool(t, "zsh", "apt-get install zsh")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "_rdmactl"), []byte(completion(t, "zsh")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("zsh", "-n", filepath.Join(dir, "_rdmactl")).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n _rdmactl: %v\n%s", err, out)
	}
	// A stand-in for rdmactl __complete, first on the PATH.
	bin := filepath.Join(dir, "bin")
	fake := "#!/bin/sh\ns=\nif [ \"$1\" = --socket ]; then s=$2; shift 2; fi\n[ \"$1\" = __complete ] || exit 1\n" +
		"case $2 in peers) if [ -n \"$s\" ]; then echo \"via$s\"; else printf '%s\\n' 192.0.2.7 node2; fi ;; groups) echo tor-a ;; esac\n"
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "rdmactl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	capture := filepath.Join(dir, "capture.zsh")
	if err := os.WriteFile(capture, []byte(zshCapture), 0o644); err != nil {
		t.Fatal(err)
	}
	// Each case starts a zsh that mostly waits: run them side by side.
	t.Run("cases", func(t *testing.T) {
		for _, c := range []struct{ line, want string }{
			{"rdmactl st", "status"},
			{"rdmactl ", "status check reload policy peers qos probe bw doctor bugreport watch resources version help"},
			{"rdmactl policy ", "diff apply"},
			{"rdmactl policy diff ", ""},
			{"rdmactl doctor --i", "--interval"},
			{"rdmactl status --v", ""},
			{"rdmactl --socket " + dir + "/_rdm", "_rdmactl"},
			{"rdmactl help d", "doctor"},
			{"rdmactl comp", ""},
			{"rdmactl peers --state d", "degraded down"},
			{"rdmactl probe ", "192.0.2.7 node2"},
			{"rdmactl peers --group ", "tor-a"},
			{"rdmactl --socket " + dir + "/_rdmactl probe ", "via" + dir + "/_rdmactl"},
		} {
			t.Run(c.line, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, "zsh", "-f", capture, dir, c.line)
				cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
				out, err := cmd.Output()
				if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
					t.Skip("zsh has no zsh/zpty module")
				}
				if err != nil {
					t.Fatalf("zsh completing %q: %v", c.line, err)
				}
				if got := strings.Join(strings.Fields(string(out)), " "); got != c.want {
					t.Errorf("zsh completes %q to %q, want %q", c.line, got, c.want)
				}
			})
		}
	})
}

// TestCompleteLive: rdmactl __complete prints rdmad's live values one a
// line, sorted, without repeats and without words a shell would act on;
// with rdmad down it prints nothing and exits 0.
func TestCompleteLive(t *testing.T) {
	s := apitype.Snapshot{Version: "t",
		Peers:   apitype.Peers{Peers: []apitype.Peer{{Name: "node2", Group: "tor-b"}, {Name: "192.0.2.7", Group: "tor-a"}, {Name: "x;rm -rf /", Group: "tor-a"}, {Name: "node3"}}},
		QoS:     []apitype.NetdevQoS{{Netdev: "ens1f0"}},
		Devices: []apitype.Device{{Name: "mlx5_0", Ports: []apitype.Port{{Port: 1, Netdev: "ens1f0"}, {Port: 2, Netdev: "ens1f1"}}}},
	}
	sock := fakeRdmad(t, map[string]http.HandlerFunc{"GET /v1/status": answer(t, s)})
	for kind, want := range map[string]string{
		"peers":   "192.0.2.7\nnode2\nnode3\n",
		"groups":  "tor-a\ntor-b\n",
		"netdevs": "ens1f0\nens1f1\n",
	} {
		code, out, errs := rdmactl(t, "--socket", sock, "__complete", kind)
		if code != exitOK || out != want || errs != "" {
			t.Errorf("__complete %s: exit %d, %q, stderr %q; want %q", kind, code, out, errs, want)
		}
	}
	down := filepath.Join(t.TempDir(), "none.sock")
	if code, out, errs := rdmactl(t, "--socket", down, "__complete", "peers"); code != exitOK || out != "" || errs != "" {
		t.Errorf("__complete with rdmad down: exit %d, %q, %q; want 0 and nothing", code, out, errs)
	}
}

// TestFishCompletion: fish parses the generated script and completes
// command lines with it (when fish is here).
func TestFishCompletion(t *testing.T) {
	testenv.Tool(t, "fish", "apt-get install fish")
	dir := t.TempDir()
	script := filepath.Join(dir, "rdmactl.fish")
	if err := os.WriteFile(script, []byte(completion(t, "fish")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("fish", "--no-execute", script).CombinedOutput(); err != nil {
		t.Fatalf("fish --no-execute: %v\n%s", err, out)
	}
	// A stand-in for rdmactl __complete, first on the PATH.
	bin := filepath.Join(dir, "bin")
	fake := "#!/bin/sh\ns=\nif [ \"$1\" = --socket ]; then s=$2; shift 2; fi\n[ \"$1\" = __complete ] || exit 1\n" +
		"case $2 in peers) if [ -n \"$s\" ]; then echo \"via$s\"; else printf '%s\\n' 192.0.2.7 node2; fi ;; netdevs) echo ens1f0 ;; esac\n"
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "rdmactl"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ line, want string }{
		{"rdmactl pol", "policy"},
		{"rdmactl policy ", "apply diff"},
		{"rdmactl peers --state d", "degraded down"},
		{"rdmactl bw x --op ", "read send write"},
		{"rdmactl check --format n", "nhc npd"},
		{"rdmactl probe ", "192.0.2.7 node2"},
		{"rdmactl --socket /run/x.sock probe ", "via/run/x.sock"},
		{"rdmactl qos ", "ens1f0"},
	} {
		cmd := exec.Command("fish", "--no-config", "-c", "source "+script+"; complete -C "+strings.ReplaceAll(fmt.Sprintf("%q", c.line), "$", "\\$"))
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("fish completing %q: %v", c.line, err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("fish completes %q to %q, want %q", c.line, g, c.want)
		}
	}
}
