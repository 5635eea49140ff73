# fish completion for rdmactl(8).
# Generated from rdmactl's command table (cmd/rdmactl/commands.go) by
# `rdmactl completion fish`; do not edit. After changing the table, run
# go test ./cmd/rdmactl -run TestCompletionFiles -update

# rdmad's live values of a kind (peers, groups, netdevs), from the rdmad of
# the --socket on the line.
function __rdmactl_live
	set -l sock
	set -l words (commandline -opc)
	for i in (seq (count $words))
		switch $words[$i]
			case --socket -s
				set sock --socket $words[(math $i + 1)]
			case '--socket=*'
				set sock --socket (string replace -- --socket= '' $words[$i])
		end
	end
	rdmactl $sock __complete $argv 2>/dev/null
end

complete -c rdmactl -f

# The commands.
complete -c rdmactl -n __fish_use_subcommand -a status -d 'rdmad, its configuration, devices, ports, policies, health'
complete -c rdmactl -n __fish_use_subcommand -a check -d 'may this node run RDMA jobs? the health verdict for schedulers (exit 0 ok, 1 problem, 2 unknown)'
complete -c rdmactl -n __fish_use_subcommand -a reload -d 'reload the configuration (root or admin_group)'
complete -c rdmactl -n __fish_use_subcommand -a policy -d 'what the policies would change now, or apply them now'
complete -c rdmactl -n __fish_use_subcommand -a peers -d 'peer probes: state, RTT and loss per peer and port'
complete -c rdmactl -n __fish_use_subcommand -a qos -d 'the DCB state of the RoCE netdevs: trust, PFC, DSCP map, ETS'
complete -c rdmactl -n __fish_use_subcommand -a probe -d 'probe a configured peer now (root or admin_group)'
complete -c rdmactl -n __fish_use_subcommand -a bw -d 'an RC bandwidth test to another rdmad node, or of a port against itself: Gb/s and messages/s (root or admin_group)'
complete -c rdmactl -n __fish_use_subcommand -a doctor -d 'the RDMA troubleshooting checks, each with its fix'
complete -c rdmactl -n __fish_use_subcommand -a bugreport -d 'collect rdmad\'s state, the journal and the host\'s RDMA setup into one archive for a ticket'
complete -c rdmactl -n __fish_use_subcommand -a watch -d 'print state changes as they happen, until interrupted'
complete -c rdmactl -n __fish_use_subcommand -a resources -d 'who pins memory: QPs, CQs, MRs, PDs and pinned bytes per process and device'
complete -c rdmactl -n __fish_use_subcommand -a version -d 'rdmactl\'s and rdmad\'s versions'
complete -c rdmactl -n __fish_use_subcommand -a help -d 'this help, or a command\'s'

# rdmactl's own flags, also after the command.
complete -c rdmactl -s s -l socket -r -F -d 'rdmad\'s socket ($RDMAD_SOCKET, else /run/rdmad/rdmad.sock)'
complete -c rdmactl -s j -l json -d 'print the API\'s JSON instead of tables'
complete -c rdmactl -s l -l full -d 'print long texts whole (shortened only on a terminal)'
complete -c rdmactl -s h -l help -d 'show this help, or a command\'s (rdmactl COMMAND -h)'
complete -c rdmactl -n '__fish_use_subcommand' -s V -l version -d 'print rdmactl\'s version and exit'

# check
complete -c rdmactl -n '__fish_seen_subcommand_from check' -l format -x -a 'npd nhc' -d 'npd (one line of at most 80 bytes or --max-output, the default) or nhc (a line per condition not ok)'
complete -c rdmactl -n '__fish_seen_subcommand_from check' -l type -x -a 'ConfigInvalid InputRefused NoDevice DeviceMissing VerbsUnavailable PortDown PortFlapping SubnetManagerMissing LinkDegraded PCIeDegraded LoopbackFailing LoopbackBandwidthLow MRRegistrationFailing MemlockTooLow PeersUnreachable KernelFault PolicyNotConverging DaemonDegraded' -d 'judge only the condition of this type (docs/HEALTH.md lists them); --format npd prints its message'
complete -c rdmactl -n '__fish_seen_subcommand_from check' -l max-output -x -d 'the most bytes of the --format npd line (default 80, 16 to 4096): node-problem-detector\'s max_output_length'
complete -c rdmactl -n '__fish_seen_subcommand_from check' -l timeout -x -d 'how long to wait for rdmad (default 10s, 100ms to 1m)'

# policy
complete -c rdmactl -n '__fish_seen_subcommand_from policy; and not __fish_seen_subcommand_from diff apply' -a diff -d 'what the policies would change now; changes nothing'
complete -c rdmactl -n '__fish_seen_subcommand_from policy; and not __fish_seen_subcommand_from diff apply' -a apply -d 'run a full policy pass now; root or admin_group'

# peers
complete -c rdmactl -n '__fish_seen_subcommand_from peers' -l state -x -a 'unknown up degraded down' -d 'show only peers in STATE: unknown, up, degraded or down; repeat it or give a comma list (down,degraded)'
complete -c rdmactl -n '__fish_seen_subcommand_from peers' -l group -x -a '(__rdmactl_live groups)' -d 'show only the peers of GROUP, their group label (- for peers without one)'

# qos
complete -c rdmactl -n '__fish_seen_subcommand_from qos' -a '(__rdmactl_live netdevs)'

# probe
complete -c rdmactl -n '__fish_seen_subcommand_from probe' -a '(__rdmactl_live peers)'

# bw
complete -c rdmactl -n '__fish_seen_subcommand_from bw' -l loopback -d 'test a port of this node against itself: DEVICE[:PORT] in place of PEER, or none for the first ACTIVE port'
complete -c rdmactl -n '__fish_seen_subcommand_from bw' -l qps -x -d 'queue pairs in parallel, 1 to 16 (default 1; to a peer, more than 1 needs an rdmad there that knows them)'
complete -c rdmactl -n '__fish_seen_subcommand_from bw' -l op -x -a 'write read send' -d 'write (default), read or send'
complete -c rdmactl -n '__fish_seen_subcommand_from bw' -l size -x -d 'bytes per message, 1 to 1MiB (default 65536; 64KiB works too)'
complete -c rdmactl -n '__fish_seen_subcommand_from bw' -l duration -x -d 'how long to send, 100ms to 30s (default 5s)'
complete -c rdmactl -n '__fish_seen_subcommand_from bw' -a '(__rdmactl_live peers)'

# doctor
complete -c rdmactl -n '__fish_seen_subcommand_from doctor' -l interval -x -d 'time between the two counter reads of the rising-counter checks (default 2s, 0 to 10s; 0 skips them)'

# bugreport
complete -c rdmactl -n '__fish_seen_subcommand_from bugreport' -s o -l output -r -F -d 'where to write it; must not exist (default ./rdmad-bugreport-HOST-TIME.tar.gz)'
complete -c rdmactl -n '__fish_seen_subcommand_from bugreport' -l dir -d 'write a directory of files instead of an archive'
complete -c rdmactl -n '__fish_seen_subcommand_from bugreport' -l since -x -d 'how much of rdmad\'s journal to include (default 24h, up to 744h)'

# help
complete -c rdmactl -n '__fish_seen_subcommand_from help; and not __fish_seen_subcommand_from status check reload policy peers qos probe bw doctor bugreport watch resources version help' -a 'status check reload policy peers qos probe bw doctor bugreport watch resources version help'
