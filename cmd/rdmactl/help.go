package main

import (
	"fmt"
	"io"
	"strings"
)

// helpWidth is where help text wraps.
const helpWidth = 80

func usage(w io.Writer) {
	var cmds, flags [][2]string
	for _, c := range visible() {
		cmds = append(cmds, [2]string{strings.TrimSpace(c.name + " " + c.args), c.summary})
	}
	for _, f := range globalFlags {
		flags = append(flags, [2]string{flagLeft(f), f.help})
	}
	col := column(cmds, flags)
	fmt.Fprint(w, "Usage: rdmactl [FLAGS] COMMAND [ARGS]\n\n")
	fmt.Fprint(w, "Query and control rdmad, the RDMA node agent, over its Unix socket.\n\n")
	fmt.Fprintln(w, "Commands:")
	printRows(w, cmds, col)
	fmt.Fprintln(w, "\nFlags (before or after the command):")
	printRows(w, flags, col)
	fmt.Fprint(w, "\nExit codes: 0 ok, 1 error or rdmad unreachable, 2 usage, 3 degraded.\n")
	fmt.Fprint(w, "rdmactl COMMAND -h shows a command's flags and exit codes; see also rdmactl(8).\n")
}

// commandUsage is `rdmactl COMMAND -h`.
func commandUsage(w io.Writer, c *command) {
	var subs, own, global [][2]string
	for _, s := range c.subs {
		subs = append(subs, [2]string{s.name, s.summary})
	}
	for _, f := range c.flags {
		own = append(own, [2]string{flagLeft(f), f.help})
	}
	for _, f := range globalFlags {
		if f.long != "version" {
			global = append(global, [2]string{flagLeft(f), f.help})
		}
	}
	col := column(subs, own, global)
	fmt.Fprintf(w, "Usage: %s\n\n", synopsis(c))
	for _, l := range wrap(c.help, helpWidth) {
		fmt.Fprintln(w, l)
	}
	if len(subs) > 0 {
		fmt.Fprintln(w, "\nActions:")
		printRows(w, subs, col)
	}
	if len(own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		printRows(w, own, col)
	}
	fmt.Fprintln(w, "\nGlobal flags (before or after the command):")
	printRows(w, global, col)
	fmt.Fprintln(w)
	for _, l := range wrap("Exit codes: "+c.exits+".", helpWidth) {
		fmt.Fprintln(w, l)
	}
}

// synopsis is the usage line of c.
func synopsis(c *command) string {
	s := "rdmactl [FLAGS] " + c.name
	for _, f := range c.flags {
		s += " [" + flagName(f)
		if f.arg != "" {
			s += " " + f.arg
		}
		s += "]"
	}
	if c.args != "" {
		s += " " + c.args
	}
	return s
}

func flagName(f flagDef) string {
	if f.long != "" {
		return "--" + f.long
	}
	return "-" + f.short
}

// flagLeft is a flag's left column: "-s, --socket PATH", "    --version".
func flagLeft(f flagDef) string {
	s := "    "
	if f.short != "" {
		s = "-" + f.short + ", "
	}
	if f.long != "" {
		s += "--" + f.long
	}
	if f.arg != "" {
		s += " " + f.arg
	}
	return s
}

// column is where the right column of rows starts: two spaces after the
// widest left column of any of the tables, so that they all align.
func column(tables ...[][2]string) int {
	w := 0
	for _, t := range tables {
		for _, r := range t {
			w = max(w, len(r[0]))
		}
	}
	return 2 + w + 2
}

// printRows prints two columns, the right one starting at col and wrapped
// under itself.
func printRows(w io.Writer, rows [][2]string, col int) {
	for _, r := range rows {
		lines := wrap(r[1], max(helpWidth-col, 30))
		fmt.Fprintf(w, "  %-*s%s\n", col-2, r[0], lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%*s%s\n", col, "", l)
		}
	}
}

// wrap breaks s into lines of at most width bytes at spaces (a longer word
// gets a line of its own).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}
