package main

import (
	"context"

	"github.com/rdmad/rdmad/client"
)

// The command table: `rdmactl help`, each command's -h, the parser, and the
// bash, zsh and fish completions (`rdmactl completion bash|zsh|fish`, checked in as
// packaging/completions/) all come from it. A change here changes them all;
// TestCompletionFiles fails until the files are regenerated.

// A command is one rdmactl command.
type command struct {
	name string
	// args is the synopsis of the positional arguments ("PEER", "[COMMAND]").
	args string
	// summary is the command's line in `rdmactl help` and the completions.
	summary string
	// help is the text of `rdmactl COMMAND -h`, wrapped when printed.
	help string
	// exits says what the exit codes mean for this command.
	exits string
	// flags are the command's own flags (global flags go anywhere).
	flags []flagDef
	// subs are the actions of a command that needs one (policy diff|apply).
	subs []subcommand
	// minArgs and maxArgs bound the positional arguments (without subs);
	// missing says what to give when there are fewer than minArgs.
	minArgs, maxArgs int
	missing          string
	// complete names what completes the first argument: "commands", or
	// a kind of live data the hidden __complete command prints ("peers",
	// "netdevs"), or "".
	complete string
	// daemon: the command talks to rdmad (the socket is checked first).
	daemon bool
	// withoutDaemon: the command still does its part when rdmad cannot
	// be reached (doctor runs the table itself, version prints
	// rdmactl's); it reads globals.socketErr itself.
	withoutDaemon bool
	// hidden commands are not listed by help nor completed.
	hidden bool
	run    func(ctx context.Context, g *globals, c *client.Client, x call) int
}

// A subcommand is one action of a command.
type subcommand struct{ name, summary string }

// A flagDef is one flag: --long, -short, or both.
type flagDef struct {
	long, short string
	// arg names the value ("PATH"); empty for a switch. eg is a value
	// the errors show as an example.
	arg, eg string
	help    string
	// files: complete the value with file names.
	files bool
	// values are the fixed values the flag takes, offered by completion.
	values []string
	// live names the kind of live data that completes the value
	// (__complete's action: "groups").
	live string
	// topOnly: completion offers it only before the command (it is still
	// accepted anywhere).
	topOnly bool
	// repeat: the flag may be given more than once; the command gets the
	// values as one comma list.
	repeat bool
}

// A call is one command's arguments and the values of its own flags, by
// long name.
type call struct {
	args  []string
	flags map[string]string
}

func (f *flagDef) example() string {
	if f.eg != "" {
		return f.eg
	}
	return f.arg
}

// The global flags, in the order help lists them; the constants index them.
const (
	flagSocket = iota
	flagJSON
	flagFull
	flagHelp
	flagVersion
)

var globalFlags = []flagDef{
	{long: "socket", short: "s", arg: "PATH", eg: "/run/rdmad/rdmad.sock", files: true, help: "rdmad's socket ($RDMAD_SOCKET, else /run/rdmad/rdmad.sock)"},
	{long: "json", short: "j", help: "print the API's JSON instead of tables"},
	{long: "full", short: "l", help: "print long texts whole (shortened only on a terminal)"},
	{long: "help", short: "h", help: "show this help, or a command's (rdmactl COMMAND -h)"},
	{long: "version", short: "V", topOnly: true, help: "print rdmactl's version and exit"},
}

var commands []*command

func init() {
	commands = []*command{
		{
			name:    "status",
			summary: "rdmad, its configuration, devices, ports, policies, health",
			help: "Show rdmad (version, state, configuration generation, load error and the keys that wait for a " +
				"restart), the RDMA devices with their ports and GIDs, the loopback probes and their traffic class " +
				"(TCLASS), the memory registration pool, the DCB state of the RoCE netdevs " +
				"(rdmactl qos has the details), every policy target and the " +
				"health of rdmad's components. On a terminal, long texts in the tables are shortened (--full shows " +
				"them whole); when stdout is not a terminal, nothing is shortened.",
			exits:  "0 healthy; 1 error or rdmad unreachable; 2 usage; 3 degraded (a condition of the health verdict is a problem or unknown: rdmactl check names it)",
			daemon: true,
			run:    cmdStatus,
		},
		{
			name:    "check",
			summary: "may this node run RDMA jobs? the health verdict for schedulers (exit 0 ok, 1 problem, 2 unknown)",
			help: "Print rdmad's health verdict (GET /v1/health, docs/HEALTH.md) the way schedulers read it: " +
				"--format npd (the default) prints one line naming the worst condition and its message, at most 80 bytes " +
				"(--max-output sets the bound; a longer message is cut after a whole word with ...), for a " +
				"node-problem-detector custom plugin; --format nhc prints a line per condition that is not ok, for " +
				"Slurm NHC's check_rdmad; --json prints the verdict's JSON. --type TYPE judges one condition type alone " +
				"(exit 0 ok, 1 problem, 2 unknown by that condition; --format npd prints its message, which names the " +
				"objects and the fix): rdmad's node-problem-detector config sets one node condition per type " +
				"(RDMAPortFlapping, reason PortFlapping) with it. When rdmad does not answer, rdmactl reads " +
				"the inventory itself: a missing device, a down port, a missing verbs node or a degraded PCIe link is " +
				"still a problem (1); otherwise the verdict is unknown (2).",
			exits: "0 healthy; 1 a problem (a condition is a problem); 2 unknown (rdmad does not answer and the local " +
				"checks found no problem, a condition is unknown, or a usage error)",
			flags: []flagDef{
				{long: "format", arg: "FORMAT", eg: "npd", values: checkFormats, help: "npd (one line of at most 80 bytes or --max-output, the default) or nhc (a line per condition not ok)"},
				{long: "type", arg: "TYPE", eg: "PortFlapping", values: checkTypes, help: "judge only the condition of this type (docs/HEALTH.md lists them); --format npd prints its message"},
				{long: "max-output", arg: "BYTES", eg: "1024", help: "the most bytes of the --format npd line (default 80, 16 to 4096): node-problem-detector's max_output_length"},
				{long: "timeout", arg: "DURATION", eg: "5s", help: "how long to wait for rdmad (default 10s, 100ms to 1m)"},
			},
			daemon:        true,
			withoutDaemon: true,
			run:           cmdCheck,
		},
		{
			name:    "reload",
			summary: "reload the configuration (root or admin_group)",
			help: "Ask rdmad to load its configuration files again. Prints the new generation and names each key " +
				"whose new value takes effect only when rdmad restarts (daemon.socket, ...: rdmad runs on with the old " +
				"value until then), or why the files were rejected: the running configuration then stays in force.",
			exits:  "0 loaded; 1 error, rdmad unreachable or access denied; 2 usage; 3 rejected (the running configuration stays)",
			daemon: true,
			run:    cmdReload,
		},
		{
			name:    "policy",
			args:    "diff|apply",
			summary: "what the policies would change now, or apply them now",
			help: "policy diff shows what applying the policies would change now, and names a policy that matches " +
				"nothing on this node; it changes nothing. policy apply runs a full policy pass now (root or " +
				"admin_group) and shows what changed and the state of every policy target.",
			exits: "0 diff: in sync (a policy that matches nothing changes nothing), apply: every target in sync or applied; " +
				"1 error, rdmad unreachable or access denied; 2 usage; 3 diff: something differs, apply: a target in error or drifted",
			subs: []subcommand{
				{"diff", "what the policies would change now; changes nothing"},
				{"apply", "run a full policy pass now; root or admin_group"},
			},
			daemon: true,
			run:    cmdPolicy,
		},
		{
			name:    "peers",
			summary: "peer probes: state, RTT and loss per peer and port",
			help: "Show the peer probes: the probe ports with their traffic class (tclass), state, round-trip time " +
				"and loss per peer and local port, the fleet key, fingerprint mismatches (MISMATCH) and the peers whose " +
				"fingerprint is unknown (an older rdmad). A local port from which every peer is down is flagged LOCAL FAULT?, " +
				"a group whose every peer is down while others answer GROUP FAULT?. --state and --group show " +
				"only the peers in those states or that group (with --json too), e.g. the few that are down " +
				"among a thousand: rdmactl peers --state down,degraded.",
			exits: "0 every probed peer up (with --state or --group: every peer shown); 1 error or rdmad unreachable; 2 usage; 3 a peer not up",
			flags: []flagDef{
				{long: "state", arg: "STATE", eg: "down", repeat: true, values: peerStates, help: "show only peers in STATE: unknown, up, degraded or down; repeat it or give a comma list (down,degraded)"},
				{long: "group", arg: "GROUP", eg: "tor-a", live: "groups", help: "show only the peers of GROUP, their group label (- for peers without one)"},
			},
			daemon: true,
			run:    cmdPeers,
		},
		{
			name:    "qos",
			args:    "[NETDEV]",
			summary: "the DCB state of the RoCE netdevs: trust, PFC, DSCP map, ETS",
			help: "Show the DCB (QoS) state every RoCE netdev runs, or NETDEV's, as rdmad read it over dcbnl at its " +
				"last inventory refresh, whether or not a [policy.qos] manages it, like mlnx_qos -i NETDEV: DCBX mode, " +
				"trust (pcp or dscp), the DSCP to priority map, PFC per priority and ETS per traffic class. A netdev whose " +
				"driver has no DCB (veth, virtio, Soft-RoCE's) says so. --json prints the status's qos list (docs/API.md).",
			exits:    "0 shown (a netdev without DCB too); 1 error, rdmad unreachable or NETDEV not a RoCE netdev; 2 usage",
			maxArgs:  1,
			complete: "netdevs",
			daemon:   true,
			run:      cmdQoS,
		},
		{
			name:    "probe",
			args:    "PEER",
			summary: "probe a configured peer now (root or admin_group)",
			help:    "Probe a configured peer now (one round from every local probe port) and show the result.",
			exits:   "0 the peer is up; 1 error, rdmad unreachable or access denied; 2 usage; 3 the peer is not up, or rdmad could not probe it (not a configured peer)",
			minArgs: 1, maxArgs: 1,
			missing:  "say which peer, e.g. `rdmactl probe 192.0.2.17` (a configured peer; `rdmactl peers` lists them)",
			complete: "peers",
			daemon:   true,
			run:      cmdProbe,
		},
		{
			name:    "bw",
			args:    "PEER",
			summary: "an RC bandwidth test to another rdmad node, or of a port against itself: Gb/s and messages/s (root or admin_group)",
			help: "Run an RC bandwidth test from rdmad's node to PEER, another rdmad node that allows it ([probe] bandwidth = true " +
				"there, and this node among its [[peer]]s or [probe] allow networks), like ib_write_bw: a window of 128 messages " +
				"of --size bytes outstanding for --duration on each of --qps queue pairs, the completions busy-polled. With --loopback, " +
				"test one of this node's ports against itself instead (DEVICE or DEVICE:PORT in place of PEER, or none for the first " +
				"ACTIVE port): RC between queue pairs of that port, through the adapter, as ib_write_bw to the node's own address " +
				"measures it; [health] min_loopback_gbps or min_loopback_share judge the result (LoopbackBandwidthLow, rdmactl check). " +
				"Prints the peer, the operation, the size, the queue pairs, the time, Gb/s and messages per second; on a terminal a " +
				"progress line while the test runs. One test at a time per node, loopback tests included. --json prints POST /v1/bw's " +
				"JSON (gbps, msg_rate, bytes, messages, elapsed_ns, qps, and for --loopback min_gbps and low; docs/API.md).",
			exits: "0 the test ran; 1 error, rdmad unreachable or access denied; 2 usage; 3 the test did not run or failed " +
				"(the peer refused it: disabled, busy or bad parameters; no answer; a test runs here already; the port is not ACTIVE)",
			flags: []flagDef{
				{long: "loopback", help: "test a port of this node against itself: DEVICE[:PORT] in place of PEER, or none for the first ACTIVE port"},
				{long: "qps", arg: "N", eg: "4", help: "queue pairs in parallel, 1 to 16 (default 1; to a peer, more than 1 needs an rdmad there that knows them)"},
				{long: "op", arg: "OP", eg: "write", values: bwOps, help: "write (default), read or send"},
				{long: "size", arg: "BYTES", eg: "65536", help: "bytes per message, 1 to 1MiB (default 65536; 64KiB works too)"},
				{long: "duration", arg: "DURATION", eg: "5s", help: "how long to send, 100ms to 30s (default 5s)"},
			},
			minArgs: 0, maxArgs: 1,
			missing:       "say which peer, e.g. `rdmactl bw 192.0.2.17` (an rdmad node with [probe] bandwidth = true), or --loopback for this node's own port",
			complete:      "peers",
			daemon:        true,
			withoutDaemon: true,
			run:           cmdBW,
		},
		{
			name:    "doctor",
			summary: "the RDMA troubleshooting checks, each with its fix",
			help: "Print the RDMA troubleshooting table as rdmad ran it on this node, then the checks of your own " +
				"session (memlock-user, clock); each warning or failure comes with its fix. When rdmad does not " +
				"answer or refuses the caller (access denied), rdmactl runs the table itself and the checks that need rdmad's state are skipped.",
			exits: "0 every check ok or skipped; 1 the checks could not run; 2 usage; 3 a check warns or fails",
			flags: []flagDef{
				{long: "interval", arg: "DURATION", eg: "5s", help: "time between the two counter reads of the rising-counter checks (default 2s, 0 to 10s; 0 skips them)"},
			},
			daemon:        true,
			withoutDaemon: true,
			run:           cmdDoctor,
		},
		{
			name:    "bugreport",
			summary: "collect rdmad's state, the journal and the host's RDMA setup into one archive for a ticket",
			help: "Write one archive (a gzip'd tar, mode 0600) for a support ticket: rdmad's status (with the peers), health, " +
				"policy diff and resources as JSON, rdmactl doctor --json, the versions, the configuration files " +
				"(secrets redacted: key_file stays a path, the key is never read) and rdmad --check-config's verdict on them, " +
				"the unit's journal for --since, rdma dev/link/system show and ibv_devinfo -v where installed, the RDMA " +
				"devices' sysfs (the inventory), the kernel and OS release, and a MANIFEST listing each item, what failed and why. " +
				"When rdmad does not answer it collects the rest and says so. The output (default " +
				"./rdmad-bugreport-HOST-TIME.tar.gz, --dir: a directory) must not exist: an existing file or symlink is refused, never " +
				"written through. Every item is bounded in size; each tool runs without a shell and is killed after 20s. " +
				"Root sees the most (the journal, the configuration).",
			exits: "0 written (some items may have failed: MANIFEST says); 1 the output could not be written (it exists, " +
				"or the directory is not writable); 2 usage",
			flags: []flagDef{
				{long: "output", short: "o", arg: "PATH", eg: "/tmp/ticket-1234.tar.gz", files: true, help: "where to write it; must not exist (default ./rdmad-bugreport-HOST-TIME.tar.gz)"},
				{long: "dir", help: "write a directory of files instead of an archive"},
				{long: "since", arg: "DURATION", eg: "24h", help: "how much of rdmad's journal to include (default 24h, up to 744h)"},
			},
			daemon:        true,
			withoutDaemon: true,
			run:           cmdBugreport,
		},
		{
			name:    "watch",
			summary: "print state changes as they happen, until interrupted",
			help: "Print rdmad's state changes as they happen, one line each (--json: the stream's JSON lines), " +
				"until interrupted.",
			exits: "0 interrupted (Ctrl-C, SIGTERM); 1 the stream ended otherwise: rdmad stopped, dropped this " +
				"watcher for reading too slowly, or could not be reached; 2 usage (never 3)",
			daemon: true,
			run:    cmdWatch,
		},
		{
			name:    "resources",
			summary: "who pins memory: QPs, CQs, MRs, PDs and pinned bytes per process and device",
			help: "Show the RDMA objects the kernel tracks (what rdma resource show qp|cq|mr|pd reads over RDMA " +
				"netlink): per process its pid, command name, devices, QPs, CQs, MRs, PDs and the bytes its memory " +
				"regions pin, most pinned first, then the totals per device. Objects the kernel owns are listed under " +
				"their kernel owner ([ib_core]). rdmad reads the kernel on request; when rdmad does not answer, rdmactl " +
				"reads it itself. --json prints GET /v1/resources' JSON (processes with pid, comm, kernel, devices, " +
				"qps, cqs, mrs, pds, pinned_bytes; devices; docs/API.md).",
			exits:         "0 read; 1 the kernel or rdmad could not be read (no RDMA driver loaded, access denied); 2 usage",
			daemon:        true,
			withoutDaemon: true,
			run:           cmdResources,
		},
		{
			name:          "version",
			summary:       "rdmactl's and rdmad's versions",
			help:          "Print the versions of rdmactl and of the running rdmad (rdmactl --version: rdmactl's only, without asking rdmad).",
			exits:         "0 both printed; 1 rdmad did not answer (rdmactl's version is still printed); 2 usage",
			daemon:        true,
			withoutDaemon: true,
			run:           cmdVersion,
		},
		{
			name:     "help",
			args:     "[COMMAND]",
			summary:  "this help, or a command's",
			help:     "Show the commands and flags, or with COMMAND that command's usage, flags and exit codes (as rdmactl COMMAND -h).",
			exits:    "0 shown; 2 no such command",
			maxArgs:  1,
			complete: "commands",
			run:      cmdHelp,
		},
		{
			name:    "completion",
			args:    "bash|zsh|fish",
			summary: "print the shell completion script generated from this command table",
			help: "Print the bash, zsh or fish completion script of rdmactl. The packages install them " +
				"(packaging/completions/ holds the same text).",
			exits: "0 printed; 2 usage",
			subs: []subcommand{
				{"bash", "the bash completion script"},
				{"zsh", "the zsh completion script"},
				{"fish", "the fish completion script"},
			},
			hidden: true,
			run:    cmdCompletion,
		},
		{
			name:    "__complete",
			args:    "peers|groups|netdevs",
			summary: "print live values for the shell completions, one a line",
			help: "Print what the completion scripts offer from rdmad's live state, one value a line: the probed peers " +
				"(rdmactl probe and bw), their groups (peers --group) or the RoCE netdevs (qos). Prints nothing, and " +
				"exits 0, when rdmad does not answer within a second: a completion never shows an error.",
			exits: "0 printed (maybe nothing); 2 usage",
			subs: []subcommand{
				{"peers", "the probed peers"},
				{"groups", "the peers' groups"},
				{"netdevs", "the RoCE netdevs"},
			},
			daemon:        true,
			withoutDaemon: true,
			hidden:        true,
			run:           cmdComplete,
		},
	}
}

// visible returns the commands help lists and the completions offer.
func visible() []*command {
	var out []*command
	for _, c := range commands {
		if !c.hidden {
			out = append(out, c)
		}
	}
	return out
}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}
