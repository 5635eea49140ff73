# bash completion for rdmactl(8).
# Generated from rdmactl's command table (cmd/rdmactl/commands.go) by
# `rdmactl completion bash`; do not edit. After changing the table, run
# go test ./cmd/rdmactl -run TestCompletionFiles -update
_rdmactl() {
	local cur prev words cword split
	local commands='status check reload policy peers qos probe bw doctor bugreport watch resources version help'
	_init_completion -s || return

	# The socket on the line, for the live values (rdmactl __complete).
	local j sock=
	for ((j = 1; j < cword; j++)); do
		case ${words[j]} in
		--socket | -s) sock=${words[j+1]} ;;
		--socket=*) sock=${words[j]#--socket=} ;;
		esac
	done

	# The value of a flag.
	case $prev in
	--socket | -s | --output | -o)
		_filedir
		return
		;;
	--format)
		COMPREPLY=($(compgen -W 'npd nhc' -- "$cur"))
		return
		;;
	--group)
		COMPREPLY=($(compgen -W "$(rdmactl ${sock:+--socket "$sock"} __complete groups 2>/dev/null)" -- "$cur"))
		return
		;;
	--op)
		COMPREPLY=($(compgen -W 'write read send' -- "$cur"))
		return
		;;
	--state)
		COMPREPLY=($(compgen -W 'unknown up degraded down' -- "$cur"))
		return
		;;
	--type)
		COMPREPLY=($(compgen -W 'ConfigInvalid InputRefused NoDevice DeviceMissing VerbsUnavailable PortDown PortFlapping SubnetManagerMissing LinkDegraded PCIeDegraded LoopbackFailing LoopbackBandwidthLow MRRegistrationFailing MemlockTooLow PeersUnreachable KernelFault PolicyNotConverging DaemonDegraded' -- "$cur"))
		return
		;;
	--max-output | --timeout | --qps | --size | --duration | --interval | --since)
		return
		;;
	esac
	$split && return

	# The command (the first word that is neither a flag nor a flag's value)
	# and how many words follow it.
	local i cmd= nargs=0
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		--socket | -s | --output | -o | --format | --group | --op | --state | --type | --max-output | --timeout | --qps | --size | --duration | --interval | --since) ((i++)) ;;
		-*) ;;
		*)
			if [ -z "$cmd" ]; then
				cmd=${words[i]}
			else
				((nargs++))
			fi
			;;
		esac
	done

	if [[ $cur == -* ]]; then
		local flags
		case $cmd in
		'') flags='--socket --json --full --help --version' ;;
		check) flags='--format --type --max-output --timeout --socket --json --full --help' ;;
		peers) flags='--state --group --socket --json --full --help' ;;
		bw) flags='--loopback --qps --op --size --duration --socket --json --full --help' ;;
		doctor) flags='--interval --socket --json --full --help' ;;
		bugreport) flags='--output --dir --since --socket --json --full --help' ;;
		*) flags='--socket --json --full --help' ;;
		esac
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
		return
	fi

	case $cmd in
	'') COMPREPLY=($(compgen -W "$commands" -- "$cur")) ;;
	policy) ((nargs == 0)) && COMPREPLY=($(compgen -W 'diff apply' -- "$cur")) ;;
	qos) ((nargs == 0)) && COMPREPLY=($(compgen -W "$(rdmactl ${sock:+--socket "$sock"} __complete netdevs 2>/dev/null)" -- "$cur")) ;;
	probe) ((nargs == 0)) && COMPREPLY=($(compgen -W "$(rdmactl ${sock:+--socket "$sock"} __complete peers 2>/dev/null)" -- "$cur")) ;;
	bw) ((nargs == 0)) && COMPREPLY=($(compgen -W "$(rdmactl ${sock:+--socket "$sock"} __complete peers 2>/dev/null)" -- "$cur")) ;;
	help) ((nargs == 0)) && COMPREPLY=($(compgen -W "$commands" -- "$cur")) ;;
	esac
} &&
	complete -F _rdmactl rdmactl
