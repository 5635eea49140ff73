# bash completion for rdmactl(8). Keep the command list in step with
# `rdmactl help`.
_rdmactl() {
	local cur prev words cword
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
	# Complete a command only if none was given yet.
	local i
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		--socket | -s) ((i++)) ;;
		-*) ;;
		*) return ;;
		esac
	done
	COMPREPLY=($(compgen -W 'status reload version help' -- "$cur"))
} &&
	complete -F _rdmactl rdmactl
