package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rdmad/rdmad/client"
)

// Exit codes; rdmactl(8) documents them.
const (
	exitOK       = 0
	exitError    = 1 // daemon unreachable, access denied, request failed
	exitUsage    = 2
	exitDegraded = 3 // the daemon answers but something needs an operator
)

type globals struct {
	socket string
	json   bool
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	name, args, help string
	run              func(ctx context.Context, g *globals, c *client.Client, args []string) int
}

var commands []command

func init() {
	commands = []command{
		{"status", "", "show the daemon, its configuration, devices, ports and components", cmdStatus},
		{"reload", "", "reload the configuration (root or admin_group)", cmdReload},
		{"policy", "diff|apply", "show what the policies would change / apply them now (apply: root or admin_group)", cmdPolicy},
		{"watch", "", "print state changes as they happen (links, policy, config, components) until interrupted", cmdWatch},
		{"doctor", "[-- --interval D]", "run the RDMA troubleshooting checks (exit 0 ok, 3 warn/fail, 1 could not run)", cmdDoctor},
		{"version", "", "print rdmactl's and rdmad's versions", cmdVersion},
		{"peers", "", "show peer probes: state, RTT and loss per peer and port", cmdPeers},
		{"probe", "PEER", "probe a configured peer now (root or admin_group)", cmdProbe},
		{"help", "", "show this help", nil},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: rdmactl [--socket PATH] [--json] COMMAND\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name+" "+c.args, c.help)
	}
	fmt.Fprintf(w, `
Flags:
  --socket PATH  rdmad's socket (default $RDMAD_SOCKET or /run/rdmad/rdmad.sock)
  --json         print the API's JSON instead of tables

Exit codes: 0 ok, 1 error or daemon unreachable, 2 usage, 3 degraded.
`)
}

// run is rdmactl without the process around it, for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{socket: client.DefaultSocket(), stdout: stdout, stderr: stderr}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--json" || a == "-j":
			g.json = true
		case a == "--socket" || a == "-s":
			if i+1 >= len(args) {
				fmt.Fprintln(stderr, "rdmactl: --socket needs a path, e.g. --socket /run/rdmad/rdmad.sock")
				return exitUsage
			}
			i++
			g.socket = args[i]
		case strings.HasPrefix(a, "--socket="):
			g.socket = strings.TrimPrefix(a, "--socket=")
		case a == "-h" || a == "--help":
			usage(stdout)
			return exitOK
		case a == "--":
			rest = append(rest, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-") && a != "-" && len(rest) > 0:
			// After the command name, other flags are the command's
			// (rdmactl doctor --interval 5s).
			rest = append(rest, a)
		case strings.HasPrefix(a, "-") && a != "-":
			fmt.Fprintf(stderr, "rdmactl: unknown flag %s\n\n", a)
			usage(stderr)
			return exitUsage
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		fmt.Fprintln(stderr, "rdmactl: no command given")
		usage(stderr)
		return exitUsage
	}
	name := rest[0]
	for _, c := range commands {
		if c.name != name {
			continue
		}
		if c.run == nil {
			usage(stdout)
			return exitOK
		}
		return c.run(ctx, g, client.New(g.socket), rest[1:])
	}
	fmt.Fprintf(stderr, "rdmactl: unknown command %q\n\n", name)
	usage(stderr)
	return exitUsage
}

func noArgs(g *globals, name string, args []string) bool {
	if len(args) > 0 {
		fmt.Fprintf(g.stderr, "rdmactl %s: unexpected argument %q; %s takes none\n", name, args[0], name)
		return false
	}
	return true
}

// fail prints err the way a person should read it and returns the exit code.
func fail(g *globals, err error) int {
	var nr *client.NotRunningError
	var ad *client.AccessDeniedError
	switch {
	case errors.As(err, &nr), errors.As(err, &ad):
		fmt.Fprintln(g.stderr, "rdmactl:", err)
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(g.stderr, "rdmactl: interrupted")
	default:
		fmt.Fprintln(g.stderr, "rdmactl:", err)
	}
	return exitError
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func cmdVersion(ctx context.Context, g *globals, c *client.Client, args []string) int {
	if !noArgs(g, "version", args) {
		return exitUsage
	}
	out := map[string]string{"rdmactl": version}
	s, err := c.Status(ctx)
	if err == nil {
		out["rdmad"] = s.Version
	}
	if g.json {
		printJSON(g.stdout, out)
	} else {
		fmt.Fprintf(g.stdout, "rdmactl %s\n", version)
		if err == nil {
			fmt.Fprintf(g.stdout, "rdmad   %s\n", s.Version)
		}
	}
	if err != nil {
		fmt.Fprintln(g.stderr, "rdmactl: cannot ask rdmad for its version:", err)
		return exitError
	}
	return exitOK
}

func cmdReload(ctx context.Context, g *globals, c *client.Client, args []string) int {
	if !noArgs(g, "reload", args) {
		return exitUsage
	}
	res, err := c.Reload(ctx)
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		printJSON(g.stdout, res)
	} else if res.OK {
		fmt.Fprintf(g.stdout, "configuration loaded (generation %d)\n", res.Generation)
	} else {
		fmt.Fprintf(g.stderr, "configuration rejected; generation %d stays in force:\n%s\n", res.Generation, indent(res.Error))
	}
	if !res.OK {
		return exitDegraded
	}
	return exitOK
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
