# SPDX-License-Identifier: MIT
# bash completion for xferctl(1); installed as share/bash-completion/completions/xferctl.
# tests/test_man.sh checks that its commands and options are those of `xferctl --help`.

_xferctl()
{
	local cur prev words cword
	_init_completion || return

	local commands="status regions ops clients windows peers devices stats top watch readable read
		writable write help"
	local options="--socket --json --timeout --meta-file --count --once --readers --sync --direct --tcp --help"

	case $prev in
	-s | --socket)
		_filedir
		return
		;;
	-m | --meta-file)
		_filedir
		return
		;;
	-t | --timeout | -n | --count | -r | --readers)
		return
		;;
	esac

	# The command is the first word that is neither an option nor an option's argument.
	local i cmd=
	for ((i = 1; i < cword; i++)); do
		case ${words[i]} in
		-s | --socket | -m | --meta-file | -t | --timeout | -n | --count | -r | --readers) ((i++)) ;;
		-*) ;;
		*)
			cmd=${words[i]}
			break
			;;
		esac
	done

	if [[ -z $cmd ]]; then
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "$options" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		fi
		return
	fi
	case $cmd in
	top | watch)
		COMPREPLY=($(compgen -W "--count --once --json" -- "$cur"))
		;;
	peers)
		COMPREPLY=($(compgen -W "--tcp --json" -- "$cur"))
		;;
	readable | read | write | writable)
		_filedir
		;;
	esac
} && complete -F _xferctl xferctl
