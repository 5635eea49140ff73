package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rdmad/rdmad/client"
)

// The shell completions are generated from the command table, so that they
// offer exactly the commands, actions and flags rdmactl has.
// packaging/completions/ holds the generated files (the packages install
// them); TestCompletionFiles fails when they differ from what this
// generates, and `go test ./cmd/rdmactl -run TestCompletionFiles -update`
// writes them again.

const completionHeader = "Generated from rdmactl's command table (cmd/rdmactl/commands.go) by\n" +
	"`rdmactl completion %s`; do not edit. After changing the table, run\n" +
	"go test ./cmd/rdmactl -run TestCompletionFiles -update\n"

func cmdCompletion(ctx context.Context, g *globals, c *client.Client, x call) int {
	switch x.args[0] {
	case "bash":
		bashCompletion(g.stdout)
	case "zsh":
		zshCompletion(g.stdout)
	default:
		fishCompletion(g.stdout)
	}
	return exitOK
}

// completeTimeout bounds how long a completion waits for rdmad: a shell
// that hangs on Tab is worse than one that offers nothing.
const completeTimeout = time.Second

// cmdComplete prints the live values the completions offer (peers, their
// groups, the RoCE netdevs), one a line, sorted and without repeats. It
// never fails: with rdmad down, slow or refusing, it prints nothing.
func cmdComplete(ctx context.Context, g *globals, c *client.Client, x call) int {
	if g.socketErr != nil {
		return exitOK
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	s, err := c.Status(ctx)
	if err != nil {
		return exitOK
	}
	var vals []string
	switch x.args[0] {
	case "peers":
		for _, p := range s.Peers.Peers {
			vals = append(vals, p.Name)
		}
	case "groups":
		for _, p := range s.Peers.Peers {
			if p.Group != "" {
				vals = append(vals, p.Group)
			}
		}
	case "netdevs":
		for _, q := range s.QoS {
			vals = append(vals, q.Netdev)
		}
		for _, d := range s.Devices {
			for _, p := range d.Ports {
				if p.Netdev != "" {
					vals = append(vals, p.Netdev)
				}
			}
		}
	}
	slices.Sort(vals)
	for _, v := range slices.Compact(vals) {
		// One value a line, and only values a shell can take as one
		// word: rdmad checks names, and a completion must not run
		// whatever a hostile socket answers.
		if v != "" && !strings.ContainsAny(v, " \t\n'\"\\$`;|&<>()*?[]{}~!#") {
			fmt.Fprintln(g.stdout, v)
		}
	}
	return exitOK
}

// liveCmd is the bash command that prints the live values of kind, from
// the rdmad of the --socket on the command line ($sock), if any.
func liveCmd(kind string) string {
	return `rdmactl ${sock:+--socket "$sock"} __complete ` + kind + " 2>/dev/null"
}

// longAndShort lists the ways to write the flags: --long and -short.
func longAndShort(fs []flagDef, topLevel bool) []string {
	var out []string
	for _, f := range fs {
		if f.topOnly && !topLevel {
			continue
		}
		if f.long != "" {
			out = append(out, "--"+f.long)
		}
	}
	return out
}

// valueFlags returns the flags that take a value, of every command and
// the global ones, each as the bash case pattern "--socket | -s": those
// whose value is a file, those with fixed or live values (by pattern), the
// others.
func valueFlags() (files []string, valued map[string]flagDef, other []string) {
	seen := map[string]bool{}
	valued = map[string]flagDef{}
	add := func(f flagDef) {
		var names []string
		if f.long != "" {
			names = append(names, "--"+f.long)
		}
		if f.short != "" {
			names = append(names, "-"+f.short)
		}
		pat := strings.Join(names, " | ")
		if f.arg == "" || seen[pat] {
			return
		}
		seen[pat] = true
		switch {
		case f.files:
			files = append(files, pat)
		case len(f.values) > 0 || f.live != "":
			valued[pat] = f
		default:
			other = append(other, pat)
		}
	}
	for _, f := range globalFlags {
		add(f)
	}
	for _, c := range commands {
		for _, f := range c.flags {
			add(f)
		}
	}
	return files, valued, other
}

// sortedKeys returns m's keys in order, for output that does not change.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func commentLines(prefix, s string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix) + "\n"
}

func bashCompletion(w io.Writer) {
	var names []string
	for _, c := range visible() {
		names = append(names, c.name)
	}
	files, valued, other := valueFlags()
	fmt.Fprint(w, "# bash completion for rdmactl(8).\n")
	fmt.Fprint(w, commentLines("# ", fmt.Sprintf(completionHeader, "bash")))
	fmt.Fprint(w, "_rdmactl() {\n")
	fmt.Fprint(w, "\tlocal cur prev words cword split\n")
	fmt.Fprintf(w, "\tlocal commands='%s'\n", strings.Join(names, " "))
	fmt.Fprint(w, "\t_init_completion -s || return\n\n")
	fmt.Fprint(w, "\t# The socket on the line, for the live values (rdmactl __complete).\n")
	fmt.Fprint(w, "\tlocal j sock=\n\tfor ((j = 1; j < cword; j++)); do\n\t\tcase ${words[j]} in\n")
	fmt.Fprint(w, "\t\t--socket | -s) sock=${words[j+1]} ;;\n\t\t--socket=*) sock=${words[j]#--socket=} ;;\n\t\tesac\n\tdone\n\n")

	fmt.Fprint(w, "\t# The value of a flag.\n\tcase $prev in\n")
	if len(files) > 0 {
		fmt.Fprintf(w, "\t%s)\n\t\t_filedir\n\t\treturn\n\t\t;;\n", strings.Join(files, " | "))
	}
	for _, pat := range sortedKeys(valued) {
		f := valued[pat]
		words := "'" + strings.Join(f.values, " ") + "'"
		if f.live != "" {
			words = `"$(` + liveCmd(f.live) + `)"`
		}
		fmt.Fprintf(w, "\t%s)\n\t\tCOMPREPLY=($(compgen -W %s -- \"$cur\"))\n\t\treturn\n\t\t;;\n", pat, words)
	}
	if len(other) > 0 {
		fmt.Fprintf(w, "\t%s)\n\t\treturn\n\t\t;;\n", strings.Join(other, " | "))
	}
	fmt.Fprint(w, "\tesac\n\t$split && return\n\n")

	fmt.Fprint(w, "\t# The command (the first word that is neither a flag nor a flag's value)\n")
	fmt.Fprint(w, "\t# and how many words follow it.\n")
	fmt.Fprint(w, "\tlocal i cmd= nargs=0\n\tfor ((i = 1; i < cword; i++)); do\n\t\tcase ${words[i]} in\n")
	fmt.Fprintf(w, "\t\t%s) ((i++)) ;;\n", strings.Join(append(append(files, sortedKeys(valued)...), other...), " | "))
	fmt.Fprint(w, "\t\t-*) ;;\n\t\t*)\n\t\t\tif [ -z \"$cmd\" ]; then\n\t\t\t\tcmd=${words[i]}\n\t\t\telse\n\t\t\t\t((nargs++))\n\t\t\tfi\n\t\t\t;;\n\t\tesac\n\tdone\n\n")

	fmt.Fprint(w, "\tif [[ $cur == -* ]]; then\n\t\tlocal flags\n\t\tcase $cmd in\n")
	fmt.Fprintf(w, "\t\t'') flags='%s' ;;\n", strings.Join(longAndShort(globalFlags, true), " "))
	for _, c := range visible() {
		if len(c.flags) > 0 {
			fmt.Fprintf(w, "\t\t%s) flags='%s' ;;\n", c.name, strings.Join(append(longAndShort(c.flags, false), longAndShort(globalFlags, false)...), " "))
		}
	}
	fmt.Fprintf(w, "\t\t*) flags='%s' ;;\n", strings.Join(longAndShort(globalFlags, false), " "))
	fmt.Fprint(w, "\t\tesac\n\t\tCOMPREPLY=($(compgen -W \"$flags\" -- \"$cur\"))\n\t\treturn\n\tfi\n\n")

	fmt.Fprint(w, "\tcase $cmd in\n\t'') COMPREPLY=($(compgen -W \"$commands\" -- \"$cur\")) ;;\n")
	for _, c := range visible() {
		switch {
		case len(c.subs) > 0:
			var subs []string
			for _, s := range c.subs {
				subs = append(subs, s.name)
			}
			fmt.Fprintf(w, "\t%s) ((nargs == 0)) && COMPREPLY=($(compgen -W '%s' -- \"$cur\")) ;;\n", c.name, strings.Join(subs, " "))
		case c.complete == "commands":
			fmt.Fprintf(w, "\t%s) ((nargs == 0)) && COMPREPLY=($(compgen -W \"$commands\" -- \"$cur\")) ;;\n", c.name)
		case c.complete != "":
			fmt.Fprintf(w, "\t%s) ((nargs == 0)) && COMPREPLY=($(compgen -W \"$(%s)\" -- \"$cur\")) ;;\n", c.name, liveCmd(c.complete))
		}
	}
	fmt.Fprint(w, "\tesac\n} &&\n\tcomplete -F _rdmactl rdmactl\n")
}

// zq quotes s for zsh in single quotes.
func zq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// zdesc makes s fit an _arguments [description]: no brackets.
func zdesc(s string) string {
	return strings.NewReplacer("[", "(", "]", ")").Replace(s)
}

// zshSpec is the _arguments spec of flag f, e.g.
// '(-s --socket)'{-s+,--socket=}'[rdmad'\”s socket]:PATH:_files'.
func zshSpec(f flagDef) string {
	var forms, excl []string
	suffixShort, suffixLong := "", ""
	if f.arg != "" {
		suffixShort, suffixLong = "+", "="
	}
	if f.short != "" {
		forms = append(forms, "-"+f.short+suffixShort)
		excl = append(excl, "-"+f.short)
	}
	if f.long != "" {
		forms = append(forms, "--"+f.long+suffixLong)
		excl = append(excl, "--"+f.long)
	}
	ex := "(" + strings.Join(excl, " ") + ")"
	if f.long == "help" || f.long == "version" {
		ex = "(- *)" // nothing else matters
	}
	action := ""
	if f.arg != "" {
		action = ":" + strings.ToLower(f.arg) + ":"
		switch {
		case f.files:
			action += "_files"
		case f.live != "":
			action += "_rdmactl_live " + f.live
		case len(f.values) > 0:
			action += "(" + strings.Join(f.values, " ") + ")"
		}
	}
	desc := "[" + zdesc(f.help) + "]" + action
	if len(forms) == 1 {
		return zq(ex + forms[0] + desc)
	}
	return zq(ex) + "{" + strings.Join(forms, ",") + "}" + zq(desc)
}

func zshCompletion(w io.Writer) {
	fmt.Fprint(w, "#compdef rdmactl\n# zsh completion for rdmactl(8).\n")
	fmt.Fprint(w, commentLines("# ", fmt.Sprintf(completionHeader, "zsh")))
	fmt.Fprint(w, "\n# rdmad's live values of a kind (peers, groups, netdevs): rdmactl __complete,\n")
	fmt.Fprint(w, "# from the rdmad of the --socket on the line (after the command, else before it).\n")
	// _arguments passes its description options (-J, -X) before the
	// action's own word, the kind: the kind is the last argument.
	fmt.Fprint(w, "(( $+functions[_rdmactl_live] )) ||\n_rdmactl_live() {\n\tlocal -a vals sock\n")
	fmt.Fprint(w, "\tlocal s=${opt_args[--socket]:-${opt_args[-s]:-$_rdmactl_sock}}\n\t[[ -n $s ]] && sock=(--socket ${(Q)s})\n")
	fmt.Fprint(w, "\tvals=(${(f)\"$(_call_program ${@[-1]} rdmactl ${(q)sock} __complete ${@[-1]} 2>/dev/null)\"})\n\tcompadd \"${@[1,-2]}\" -a vals\n}\n")
	fmt.Fprint(w, "\nlocal curcontext=$curcontext state state_descr line ret=1\ntypeset -A opt_args\n")
	fmt.Fprint(w, "local -a commands globals\n\ncommands=(\n")
	for _, c := range visible() {
		fmt.Fprintf(w, "\t%s\n", zq(c.name+":"+c.summary))
	}
	fmt.Fprint(w, ")\n\n# rdmactl's own flags, also after the command.\nglobals=(\n")
	for _, f := range globalFlags {
		if !f.topOnly {
			fmt.Fprintf(w, "\t%s\n", zshSpec(f))
		}
	}
	fmt.Fprint(w, ")\n\n_arguments -s -C : $globals \\\n")
	for _, f := range globalFlags {
		if f.topOnly {
			fmt.Fprintf(w, "\t%s \\\n", zshSpec(f))
		}
	}
	fmt.Fprint(w, "\t'1:command:->command' \\\n\t'*::argument:->argument' && ret=0\n")
	fmt.Fprint(w, "local _rdmactl_sock=${opt_args[--socket]:-$opt_args[-s]}\n\n")
	fmt.Fprint(w, "case $state in\ncommand)\n\t_describe -t commands 'rdmactl command' commands && ret=0\n\t;;\nargument)\n")
	fmt.Fprint(w, "\tcurcontext=${curcontext%:*:*}:rdmactl-$words[1]:\n\tcase $words[1] in\n")
	for _, c := range visible() {
		var specs []string
		for _, f := range c.flags {
			specs = append(specs, zshSpec(f))
		}
		switch {
		case len(c.subs) > 0:
			var alts []string
			for _, s := range c.subs {
				alts = append(alts, s.name+`\:"`+strings.ReplaceAll(s.summary, `"`, `\"`)+`"`)
			}
			specs = append(specs, zq("1:"+c.name+" action:(("+strings.Join(alts, " ")+"))"))
		case c.complete == "commands":
			specs = append(specs, zq("1:command:->command"))
		case c.complete != "":
			specs = append(specs, zq("1:"+strings.ToLower(strings.Trim(c.args, "[]"))+":_rdmactl_live "+c.complete))
		case c.args != "":
			specs = append(specs, zq("1:"+strings.ToLower(c.args)+":"))
		}
		if len(specs) == 0 {
			continue
		}
		// No more arguments: offer nothing rather than let zsh fall
		// back to file names.
		specs = append(specs, zq("*: :"))
		fmt.Fprintf(w, "\t%s)\n\t\t_arguments -s -C : $globals \\\n", c.name)
		for i, s := range specs {
			end := " \\\n"
			if i == len(specs)-1 {
				end = " && ret=0\n"
			}
			fmt.Fprintf(w, "\t\t\t%s%s", s, end)
		}
		if c.complete == "commands" {
			fmt.Fprint(w, "\t\t[[ $state == command ]] && _describe -t commands 'rdmactl command' commands && ret=0\n")
		}
		fmt.Fprint(w, "\t\t;;\n")
	}
	fmt.Fprint(w, "\t*)\n\t\t_arguments -s : $globals '*: :' && ret=0\n\t\t;;\n\tesac\n\t;;\nesac\n\nreturn ret\n")
}

// fq quotes s for fish in single quotes.
func fq(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func fishCompletion(w io.Writer) {
	fmt.Fprint(w, "# fish completion for rdmactl(8).\n")
	fmt.Fprint(w, commentLines("# ", fmt.Sprintf(completionHeader, "fish")))
	fmt.Fprint(w, "\n# rdmad's live values of a kind (peers, groups, netdevs), from the rdmad of\n# the --socket on the line.\n")
	fmt.Fprint(w, "function __rdmactl_live\n\tset -l sock\n\tset -l words (commandline -opc)\n")
	fmt.Fprint(w, "\tfor i in (seq (count $words))\n\t\tswitch $words[$i]\n")
	fmt.Fprint(w, "\t\t\tcase --socket -s\n\t\t\t\tset sock --socket $words[(math $i + 1)]\n")
	fmt.Fprint(w, "\t\t\tcase '--socket=*'\n\t\t\t\tset sock --socket (string replace -- --socket= '' $words[$i])\n")
	fmt.Fprint(w, "\t\tend\n\tend\n\trdmactl $sock __complete $argv 2>/dev/null\nend\n\n")
	fmt.Fprint(w, "complete -c rdmactl -f\n\n# The commands.\n")
	var names []string
	for _, c := range visible() {
		names = append(names, c.name)
		fmt.Fprintf(w, "complete -c rdmactl -n __fish_use_subcommand -a %s -d %s\n", c.name, fq(c.summary))
	}
	flag := func(cond string, f flagDef) {
		line := "complete -c rdmactl"
		if cond != "" {
			line += " -n " + fq(cond)
		}
		if f.short != "" {
			line += " -s " + f.short
		}
		if f.long != "" {
			line += " -l " + f.long
		}
		switch {
		case f.files:
			line += " -r -F"
		case f.live != "":
			line += " -x -a " + fq("(__rdmactl_live "+f.live+")")
		case len(f.values) > 0:
			line += " -x -a " + fq(strings.Join(f.values, " "))
		case f.arg != "":
			line += " -x"
		}
		fmt.Fprintln(w, line+" -d "+fq(f.help))
	}
	fmt.Fprint(w, "\n# rdmactl's own flags, also after the command.\n")
	for _, f := range globalFlags {
		cond := ""
		if f.topOnly {
			cond = "__fish_use_subcommand"
		}
		flag(cond, f)
	}
	for _, c := range visible() {
		seen := "__fish_seen_subcommand_from " + c.name
		if len(c.flags) == 0 && len(c.subs) == 0 && c.complete == "" {
			continue
		}
		fmt.Fprintf(w, "\n# %s\n", c.name)
		for _, f := range c.flags {
			flag(seen, f)
		}
		for _, s := range c.subs {
			var subs []string
			for _, s := range c.subs {
				subs = append(subs, s.name)
			}
			fmt.Fprintf(w, "complete -c rdmactl -n %s -a %s -d %s\n", fq(seen+"; and not __fish_seen_subcommand_from "+strings.Join(subs, " ")), s.name, fq(s.summary))
		}
		switch {
		case c.complete == "commands":
			fmt.Fprintf(w, "complete -c rdmactl -n %s -a %s\n", fq(seen+"; and not __fish_seen_subcommand_from "+strings.Join(names, " ")), fq(strings.Join(names, " ")))
		case c.complete != "":
			fmt.Fprintf(w, "complete -c rdmactl -n %s -a %s\n", fq(seen), fq("(__rdmactl_live "+c.complete+")"))
		}
	}
}
