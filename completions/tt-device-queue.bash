# bash completion for tt-device-queue. install.sh puts it in
# ${XDG_DATA_HOME:-~/.local/share}/bash-completion/completions/, `make install` in
# $(PREFIX)/share/bash-completion/completions/; or source it from ~/.bashrc.
#
# Completes subcommands, global and per-subcommand options, card numbers after --device (the
# numeric /dev/tenstorrent/* nodes, else the cards the daemon reports; for run, queue and
# queue-python also `all` and lists such as 0,1, one card after each comma) and job ids for
# job/logs/result/kill/reset (asked from the running daemon, briefly). After `--` it falls
# back to bash's own completion, for the command to queue.

_tt_device_queue_status() {
	local exe=${COMP_WORDS[0]}
	[[ $exe == */* ]] || exe=$(command -v -- "$exe" 2>/dev/null) || return 0
	timeout 2 "$exe" --json status 2>/dev/null
}

_tt_device_queue_devices() {
	local f n found=
	for f in /dev/tenstorrent/*; do
		n=${f##*/}
		if [[ $n =~ ^[0-9]+$ ]]; then
			printf '%s\n' "$n"
			found=1
		fi
	done
	[ -n "$found" ] && return 0
	_tt_device_queue_status | grep -o '"device_id": *"[0-9]*"' | grep -o '[0-9]*' | sort -un
}

_tt_device_queue_jobs() {
	_tt_device_queue_status | grep -o '"job_id": *"[0-9a-f]\{32\}"' | grep -o '[0-9a-f]\{32\}' | sort -u
}

_tt_device_queue() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	local subcommands="run queue queue-python lease shell job logs result status kill reset hold release skill serve"
	local global="--host --port --client-id --json --help --version"
	local submit="--device --cwd --timeout --silence-timeout --repeat --env --key --json --help"
	local i sub="" opts="" dashdash=0 words
	COMPREPLY=()

	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--) [ -n "$sub" ] && dashdash=1 ;;
		--host | --port | --client-id) [ -z "$sub" ] && i=$((i + 1)) ;;
		-*) ;;
		*) [ -z "$sub" ] && sub=${COMP_WORDS[i]} ;;
		esac
	done
	# the command after `--`: bash's default completion (complete -o default)
	[ "$dashdash" -eq 1 ] && return 0

	case $prev in
	--device)
		words=$(_tt_device_queue_devices)
		case $sub in
		run | queue | queue-python | lease | shell) ;;
		*)
			mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
			return 0
			;;
		esac
		if [[ $cur == *,* ]]; then # a job of several cards: the cards not listed yet
			local head=${cur%,*} d rest=()
			for d in $words; do
				[[ ,$head, == *,$d,* ]] || rest+=("$head,$d")
			done
			mapfile -t COMPREPLY < <(compgen -W "${rest[*]}" -- "$cur")
		else
			mapfile -t COMPREPLY < <(compgen -W "$words all" -- "$cur")
		fi
		return 0
		;;
	--cwd)
		mapfile -t COMPREPLY < <(compgen -d -- "$cur")
		return 0
		;;
	--python)
		mapfile -t COMPREPLY < <(compgen -c -- "$cur")
		return 0
		;;
	--host | --port | --client-id | --timeout | --silence-timeout | --repeat | --env | \
		--wait-timeout | --output-limit | --offset | --limit | --python-arg | --reason | --key | \
		--description | --heartbeat | --owner)
		return 0 # a value we cannot guess
		;;
	esac

	case $sub in
	"") opts="$global" words=$subcommands ;;
	run) opts="$submit --wait-timeout --output-limit --" ;;
	queue) opts="$submit --" ;;
	queue-python) opts="$submit --python --python-arg --wait --wait-timeout --output-limit" ;;
	job) opts="--key --help" ;;
	logs) opts="--offset --limit --follow --wait-timeout --json --help" ;;
	result) opts="--wait-timeout --output-limit --json --help" ;;
	status) opts="--device --json --help" ;;
	lease) opts="--device --description --timeout --heartbeat --owner --key --wait --wait-timeout --json --help" ;;
	shell) opts="--device --description --timeout --heartbeat --help --" ;;
	kill) opts="--device --json --help" ;;
	release) opts="--device --key --json --help" ;;
	reset) opts="--device --force --json --help" ;;
	hold) opts="--device --reason --json --help" ;;
	serve | skill) opts="--help" ;;
	*) return 0 ;;
	esac

	if [[ $cur == -* ]]; then
		mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
		return 0
	fi
	case $sub in
	"") mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur") ;;
	job | logs | result | kill | reset | release)
		words=$(_tt_device_queue_jobs)
		mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
		;;
	queue-python) mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
	esac
	return 0
}

complete -o bashdefault -o default -F _tt_device_queue tt-device-queue
