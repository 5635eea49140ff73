package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rdmad/rdmad/client"
	"github.com/rdmad/rdmad/client/apitype"
)

// cmdWatch prints rdmad's state changes as they happen. Exit codes
// (rdmactl(8)): 0 when interrupted, the normal end of a watch; 1 when the
// stream ends any other way (rdmad stops and says bye, drops this watcher,
// or the connection breaks), so that a script or unit running it sees
// that the watch did not last.
func cmdWatch(ctx context.Context, g *globals, c *client.Client, x call) int {
	st, err := c.Watch(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return exitOK // interrupted before the stream opened
		}
		return fail(g, err)
	}
	defer st.Close()
	print := func(ev apitype.Event, raw []byte) {
		if g.json {
			fmt.Fprintf(g.stdout, "%s\n", raw)
		} else {
			fmt.Fprintln(g.stdout, ev)
		}
	}
	hello, _ := json.Marshal(st.Hello)
	print(st.Hello, hello)
	for {
		// NextRaw skips heartbeat lines: rdmad sends them on a quiet
		// stream, and they are not changes to print.
		raw, err := st.NextRaw()
		if err != nil {
			if ctx.Err() != nil {
				return exitOK // interrupted: the normal end of a watch
			}
			if errors.Is(err, io.EOF) {
				fmt.Fprintln(g.stderr, "rdmactl watch: rdmad closed the stream without saying why; is it still running? (systemctl status rdmad)")
				return exitError
			}
			return fail(g, err)
		}
		var ev apitype.Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fail(g, fmt.Errorf("watch: decode %q: %w", raw, err))
		}
		print(ev, raw)
		switch ev.Type {
		case apitype.EventDropped:
			fmt.Fprintln(g.stderr, "rdmactl watch: rdmad dropped this watcher for reading too slowly; run it again")
			return exitError
		case apitype.EventBye:
			fmt.Fprintln(g.stderr, "rdmactl watch: rdmad is stopping and ended the stream; run it again once rdmad is back (systemctl status rdmad)")
			return exitError
		}
	}
}
