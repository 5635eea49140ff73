package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// rdmactl parses its own command line: global flags go before or after the
// command, a command's own flags after it, and "--" ends the global flags
// (what follows is the command's). Every mistake gets rdmactl's own message
// naming the command and exit code 2, never the flag package's.

// errUnknownCommand marks a name that is no command.
var errUnknownCommand = errors.New("unknown command")

// A parsed command line.
type parsed struct {
	cmd   *command
	args  []string
	flags map[string]string // the command's own flags, by long name
	// socket is --socket's value; nil when not given.
	socket                    *string
	json, full, help, version bool
}

// parse parses args. On an error it returns what it parsed so far; help is
// set when -h or --help appears anywhere, so that help wins over a mistake.
func parse(args []string) (*parsed, error) {
	p := &parsed{flags: map[string]string{}}
	err := p.parse(args)
	if err != nil {
		for _, a := range args {
			if a == "-h" || a == "--help" {
				p.help = true
			}
		}
	}
	return p, err
}

func (p *parsed) parse(args []string) error {
	cmdOnly := false // after "--": only the command's flags and arguments
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" && !cmdOnly:
			cmdOnly = true
		case len(a) < 2 || a[0] != '-':
			if p.cmd != nil {
				p.args = append(p.args, a)
				continue
			}
			if p.cmd = lookupCommand(a); p.cmd == nil {
				return unknownCommand(a)
			}
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			f, err := p.flag("--"+name, name, false, cmdOnly)
			if err != nil {
				return err
			}
			if err := p.set(f, "--"+name, val, hasVal, args, &i); err != nil {
				return err
			}
		default:
			body := a[1:]
			// -interval, as Go's flag package (which doctor used) takes it.
			if name, val, hasVal := strings.Cut(body, "="); len(name) > 1 {
				if f := p.find(name, false, cmdOnly); f != nil {
					if err := p.set(f, "-"+name, val, hasVal, args, &i); err != nil {
						return err
					}
					continue
				}
			}
			// A group of short flags (-jl); a flag with a value takes the
			// rest of the group (-s/run/x, -s=/run/x) or the next word.
			for j := 0; j < len(body); j++ {
				name := body[j : j+1]
				if name == "=" && j > 0 {
					return fmt.Errorf("-%s takes no value", body[j-1:j])
				}
				f, err := p.flag("-"+name, name, true, cmdOnly)
				if err != nil {
					return err
				}
				if f.arg == "" {
					if err := p.set(f, "-"+name, "", false, args, &i); err != nil {
						return err
					}
					continue
				}
				rest := body[j+1:]
				if err := p.set(f, "-"+name, strings.TrimPrefix(rest, "="), rest != "", args, &i); err != nil {
					return err
				}
				break
			}
		}
	}
	return nil
}

// find returns the flag named name (a long name, or a short one when
// short): the command's own first, then the global ones unless cmdOnly.
func (p *parsed) find(name string, short, cmdOnly bool) *flagDef {
	match := func(fs []flagDef) *flagDef {
		for i := range fs {
			if (short && fs[i].short == name) || (!short && fs[i].long == name) {
				return &fs[i]
			}
		}
		return nil
	}
	if p.cmd != nil {
		if f := match(p.cmd.flags); f != nil {
			return f
		}
	}
	if cmdOnly {
		return nil
	}
	return match(globalFlags)
}

// flag is find, with the error that says what to do when there is no
// such flag.
func (p *parsed) flag(display, name string, short, cmdOnly bool) (*flagDef, error) {
	if f := p.find(name, short, cmdOnly); f != nil {
		return f, nil
	}
	if p.cmd == nil && !short {
		// A command's flag before the command.
		for _, c := range commands {
			for _, f := range c.flags {
				if f.long == name {
					return nil, fmt.Errorf("%s is a flag of %s: give it after the command, e.g. rdmactl %s --%s %s", display, c.name, c.name, f.long, f.example())
				}
			}
		}
	}
	if cmdOnly && p.find(name, short, false) != nil {
		return nil, fmt.Errorf("%s is rdmactl's own flag: give it before --", display)
	}
	msg := "unknown flag " + display
	if !short {
		var names []string
		if p.cmd != nil {
			for _, f := range p.cmd.flags {
				names = append(names, f.long)
			}
		}
		for _, f := range globalFlags {
			names = append(names, f.long)
		}
		if s := suggest(name, names); s != "" {
			msg += "; did you mean --" + s + "?"
		}
	}
	return nil, errors.New(msg)
}

// set records flag f, written as display, with its value: val when
// hasVal, else the next word of args.
func (p *parsed) set(f *flagDef, display, val string, hasVal bool, args []string, i *int) error {
	if f.arg == "" {
		if hasVal {
			return fmt.Errorf("%s takes no value", display)
		}
		switch {
		case f == &globalFlags[flagJSON]:
			p.json = true
		case f == &globalFlags[flagFull]:
			p.full = true
		case f == &globalFlags[flagHelp]:
			p.help = true
		case f == &globalFlags[flagVersion]:
			p.version = true
		default:
			p.flags[f.long] = "true"
		}
		return nil
	}
	if !hasVal {
		if *i+1 >= len(args) {
			return fmt.Errorf("%s needs a %s, e.g. %s %s", display, f.arg, display, f.example())
		}
		*i++
		val = args[*i]
	}
	if val == "" {
		return fmt.Errorf("%s needs a %s, not an empty one, e.g. %s %s", display, f.arg, display, f.example())
	}
	if f == &globalFlags[flagSocket] {
		p.socket = &val
	} else if prev, ok := p.flags[f.long]; ok && f.repeat {
		p.flags[f.long] = prev + "," + val
	} else {
		p.flags[f.long] = val
	}
	return nil
}

// checkArgs checks the positional arguments of cmd.
func checkArgs(cmd *command, args []string) error {
	if len(cmd.subs) > 0 {
		var names, say []string
		for _, s := range cmd.subs {
			names = append(names, s.name)
			say = append(say, fmt.Sprintf("`rdmactl %s %s` (%s)", cmd.name, s.name, s.summary))
		}
		if len(args) == 0 {
			return errors.New("say which: " + strings.Join(say, " or "))
		}
		found := false
		for _, s := range cmd.subs {
			found = found || s.name == args[0]
		}
		if !found {
			msg := fmt.Sprintf("unknown action %q", args[0])
			if s := suggest(args[0], names); s != "" {
				return fmt.Errorf("%s; did you mean %s?", msg, s)
			}
			return fmt.Errorf("%s; say %s", msg, strings.Join(names, " or "))
		}
		if len(args) > 1 {
			return fmt.Errorf("unexpected argument %q; %s %s takes none", args[1], cmd.name, args[0])
		}
		return nil
	}
	if len(args) < cmd.minArgs {
		return errors.New(cmd.missing)
	}
	if len(args) > cmd.maxArgs {
		if cmd.maxArgs == 0 {
			return fmt.Errorf("unexpected argument %q; %s takes none", args[0], cmd.name)
		}
		return fmt.Errorf("unexpected argument %q; %s takes only %s", args[cmd.maxArgs], cmd.name, cmd.args)
	}
	return nil
}

func unknownCommand(name string) error {
	var names []string
	for _, c := range visible() {
		names = append(names, c.name)
	}
	if s := suggest(name, names); s != "" {
		return fmt.Errorf("%w %q; did you mean %s?", errUnknownCommand, name, s)
	}
	return fmt.Errorf("%w %q; the commands are %s", errUnknownCommand, name, strings.Join(names, ", "))
}

// usageError prints a usage mistake: what is wrong, the usage line, and
// where the help is.
func usageError(w io.Writer, cmd *command, err error) {
	if cmd != nil && !errors.Is(err, errUnknownCommand) {
		fmt.Fprintf(w, "rdmactl %s: %v\n", cmd.name, err)
		fmt.Fprintf(w, "Usage: %s\n", synopsis(cmd))
		fmt.Fprintf(w, "Run `rdmactl %s -h` for its flags and exit codes.\n", cmd.name)
		return
	}
	fmt.Fprintf(w, "rdmactl: %v\n", err)
	fmt.Fprintln(w, "Usage: rdmactl [FLAGS] COMMAND [ARGS]")
	fmt.Fprintln(w, "Run `rdmactl -h` for the commands and flags.")
}

// suggest returns the one of names that word is most likely a typo of: a
// name it starts, or the nearest one within an edit per three letters (at
// least one, at most two); "" when none is.
func suggest(word string, names []string) string {
	best, bestD := "", min(max(1, len(word)/3), 2)+1
	for _, n := range names {
		if len(word) >= 2 && strings.HasPrefix(n, word) {
			return n
		}
		if d := editDistance(word, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, counting a swap of
// two neighbours as one edit (stauts -> status).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
