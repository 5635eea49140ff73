# bash completion for rdmactl(8). Keep the command list in step with
# `rdmactl help`.
_rdmactl() {
	local cur prev words cword
	local commands='status reload policy watch doctor peers probe version help'
	_init_completion || return

	case $prev in
	--socket | -s)
		_filedir
		return
		;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W '--socket --json --help' -- "$cur"))
		return
	fi
	# The command (first non-flag word) and its subcommand.
	local i cmd= nargs=0
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		--socket | -s) ((i++)) ;;
		-*) ;;
		*)
			[ -z "$cmd" ] && cmd=${words[i]}
			((nargs++))
			;;
		esac
	done
	if [ -z "$cmd" ]; then
		COMPREPLY=($(compgen -W "$commands" -- "$cur"))
	elif [ "$cmd" = policy ] && [ $nargs -eq 1 ]; then
		COMPREPLY=($(compgen -W 'diff apply' -- "$cur"))
	fi
} &&
	complete -F _rdmactl rdmactl
