package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
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
	// socketFrom says where socket came from: "--socket", "RDMAD_SOCKET"
	// or "" (the default), for the errors that name it.
	socketFrom string
	// socketErr is set when the socket's path exists and is not a socket.
	socketErr error
	json      bool
	// full: print long texts whole. Set by --full, and whenever stdout is
	// not a terminal (a pipe, a file, a test).
	full   bool
	stdout io.Writer
	stderr io.Writer
}

// run is rdmactl without the process around it, for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Everything printed passes through a safeWriter (escape.go): most of
	// it is rdmad's data, or whatever answers on the socket.
	stdout, flushOut := newSafeWriter(stdout)
	stderr, flushErr := newSafeWriter(stderr)
	defer flushErr()
	defer flushOut()
	p, err := parse(args)
	if p.help && !errors.Is(err, errUnknownCommand) {
		if p.cmd != nil {
			commandUsage(stdout, p.cmd)
		} else {
			usage(stdout)
		}
		return exitOK
	}
	if err != nil {
		usageError(stderr, p.cmd, err)
		return exitUsage
	}
	if p.version {
		fmt.Fprintf(stdout, "rdmactl %s\n", version)
		return exitOK
	}
	if p.cmd == nil {
		fmt.Fprintln(stderr, "rdmactl: no command given")
		fmt.Fprintln(stderr)
		usage(stderr)
		return exitUsage
	}
	if err := checkArgs(p.cmd, p.args); err != nil {
		usageError(stderr, p.cmd, err)
		return exitUsage
	}

	g := &globals{socket: client.DefaultSocket(), json: p.json, full: p.full || !isTerminal(stdout), stdout: stdout, stderr: stderr}
	if p.socket != nil {
		g.socket, g.socketFrom = *p.socket, "--socket"
	} else if os.Getenv("RDMAD_SOCKET") != "" {
		g.socketFrom = "RDMAD_SOCKET"
	}
	if p.cmd.daemon {
		// A path that is not a socket fails here with what it is, not
		// with the dial's "connection refused".
		g.socketErr = checkSocket(g.socket, g.socketFrom)
		if g.socketErr != nil && !p.cmd.withoutDaemon {
			return fail(g, g.socketErr)
		}
	}
	return p.cmd.run(ctx, g, client.New(g.socket), call{args: p.args, flags: p.flags})
}

// fail prints err the way a person should read it and returns the exit
// code. Every command gives the same code for the same cause: rdmad's 422
// (it understood the request and could not do it on that object: not a
// configured peer, a bandwidth test the peer refused) is 3, as a reload
// that is rejected; any other error is 1. rdmad's message is printed
// without the HTTP status, which is the API's business, not the reader's.
func fail(g *globals, err error) int {
	var ae *client.APIError
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(g.stderr, "rdmactl: interrupted")
	case errors.As(err, &ae):
		fmt.Fprintln(g.stderr, "rdmactl:", ae.Message)
		if ae.Status == http.StatusUnprocessableEntity {
			return exitDegraded
		}
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

func cmdVersion(ctx context.Context, g *globals, c *client.Client, x call) int {
	out := map[string]string{"rdmactl": version}
	err := g.socketErr
	if err == nil {
		var s *apitype.Snapshot
		if s, err = c.Status(ctx); err == nil {
			out["rdmad"] = s.Version
		}
	}
	if g.json {
		printJSON(g.stdout, out)
	} else {
		fmt.Fprintf(g.stdout, "rdmactl %s\n", version)
		if v, ok := out["rdmad"]; ok {
			fmt.Fprintf(g.stdout, "rdmad   %s\n", v)
		}
	}
	if err != nil {
		fmt.Fprintln(g.stderr, "rdmactl: cannot ask rdmad for its version:", err)
		return exitError
	}
	return exitOK
}

func cmdReload(ctx context.Context, g *globals, c *client.Client, x call) int {
	res, err := c.Reload(ctx)
	if err != nil {
		return fail(g, err)
	}
	if g.json {
		printJSON(g.stdout, res)
	} else if res.OK {
		fmt.Fprintf(g.stdout, "configuration loaded (generation %d)\n", res.Generation)
		printRestartNeeded(g.stdout, res.RestartNeeded, "")
	} else {
		fmt.Fprintf(g.stderr, "configuration rejected; generation %d stays in force:\n%s\n", res.Generation, indent(res.Error))
	}
	if !res.OK {
		return exitDegraded
	}
	return exitOK
}

func cmdHelp(ctx context.Context, g *globals, c *client.Client, x call) int {
	if len(x.args) == 0 {
		usage(g.stdout)
		return exitOK
	}
	cmd := lookupCommand(x.args[0])
	if cmd == nil {
		usageError(g.stderr, lookupCommand("help"), unknownCommand(x.args[0]))
		return exitUsage
	}
	commandUsage(g.stdout, cmd)
	return exitOK
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
