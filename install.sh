#!/usr/bin/env bash
# install.sh - install tt-device-queue for this user on a lab host (README.md "Install"; the
# man page's INSTALLATION section).
#
#   ./install.sh [--force] [--copy] [--full-test | --no-test] [--no-build]
#   ./install.sh --uninstall [--force]
#
# 1. Refuses while the daemon has work: a running job or reset, a queued job, a pending reset
#    (--force goes on anyway). It asks the daemon the CLI would ask: TT_DEVICE_URL, else
#    TT_DEVICE_HOST/TT_DEVICE_PORT, else those in the env file below, else 127.0.0.1:5741.
#    No answer means nothing to wait for.
# 2. make, then the unit tests (make unit-test, seconds); --full-test runs the whole suite
#    instead (make test, minutes). --no-test skips the tests; --no-build skips both and installs
#    the executable already in this folder (say a `make static` build copied here with this
#    script).
# 3. ~/.local/bin/tt-device-queue: a symlink to this folder's executable (--copy: a copy), and
#    the same for the man page and the bash completion under ${XDG_DATA_HOME:-~/.local/share}.
#    The agent skill the executable prints (`tt-device-queue skill`) is written to
#    ~/.agents/skills/tt-device-queue/SKILL.md and ~/.claude/skills/tt-device-queue/SKILL.md,
#    replacing the symlink the earlier Python service's install.sh left there.
# 4. The systemd user unit tt-device-queue.service (written from the template below) is
#    enabled and restarted; the daemon keeps its database and job output in this folder's
#    logs-v2/. Where no user systemd answers (`systemctl --user show-environment` fails), it
#    says so and prints how to start the daemon by hand.
# Running it twice leaves the same result. --uninstall stops and removes the unit and the files
# of step 3; it never touches logs-v2/ (the job database and every job's output).
# The service reads optional settings (TT_DEVICE_IDS, TT_DEVICE_RESET_CMD, ...) from
# ${XDG_CONFIG_HOME:-~/.config}/tt-device-queue/env, NAME=VALUE lines; this script only reads it.
set -euo pipefail

prog=install.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
: "${HOME:?HOME is not set}"
bin_dir=$HOME/.local/bin
data_home=${XDG_DATA_HOME:-$HOME/.local/share}
config_home=${XDG_CONFIG_HOME:-$HOME/.config}
man_dest=$data_home/man/man1/tt-device-queue.1
comp_dest=$data_home/bash-completion/completions/tt-device-queue
unit_name=tt-device-queue.service
unit_dest=$config_home/systemd/user/$unit_name
env_file=$config_home/tt-device-queue/env
log_dir=$here/logs-v2
unit_marker="# Written by tt-device-queue's install.sh"
watchdog_sec=60 # the daemon pings at half this; a loop stuck this long is restarted

force=0 copy=0 build=1 tests=unit uninstall=0

usage() {
	cat <<EOF
usage: ./install.sh [--force] [--copy] [--full-test | --no-test] [--no-build]
       ./install.sh --uninstall [--force]

Install tt-device-queue for this user: build, run the unit tests, put the CLI in
~/.local/bin and the agent skill in ~/.agents/skills and ~/.claude/skills, and (re)start
the systemd user service. Refuses while the queue has running or queued work.

  --force      go on even when jobs are running or queued (running ones fail with
               exit -1 when the service restarts; queued ones are kept)
  --copy       copy the executable (and man page, completion) instead of symlinking
               them to this checkout
  --full-test  run the whole suite (\`make test\`, minutes) instead of the unit tests
               (\`make unit-test\`, seconds)
  --no-test    build but run no tests
  --no-build   skip make and the tests; install ./tt-device-queue as it is
  --uninstall  stop and remove the service, the CLI, man page, completion and agent
               skill; logs-v2/ is never touched
  -h, --help   show this help

The daemon checked for idleness is TT_DEVICE_URL (or TT_DEVICE_HOST/TT_DEVICE_PORT), as
for the CLI. Service settings go in $env_file (NAME=VALUE lines).
EOF
}

say() { printf '%s: %s\n' "$prog" "$*"; }
die() {
	printf '%s: %s\n' "$prog" "$*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case $1 in
	--force) force=1 ;;
	--copy) copy=1 ;;
	--full-test) tests=full ;;
	--no-test) tests=none ;;
	--no-build) build=0 tests=none ;;
	--uninstall) uninstall=1 ;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		printf '%s: unknown option %s\n' "$prog" "$1" >&2
		usage >&2
		exit 2
		;;
	esac
	shift
done

# NAME's value in the service's env file, quotes dropped; empty when absent.
env_file_value() {
	local line
	[ -r "$env_file" ] || return 0
	line=$(grep -E "^[[:space:]]*$1=" "$env_file" | tail -n 1 || true)
	line=${line#*=}
	line=${line//\"/}
	printf '%s' "${line//\'/}"
}

# Without TT_DEVICE_URL/HOST/PORT of its own, check the address the service listens on.
if [ -z "${TT_DEVICE_URL:-}${TT_DEVICE_HOST:-}${TT_DEVICE_PORT:-}" ]; then
	v=$(env_file_value TT_DEVICE_HOST)
	[ -z "$v" ] || export TT_DEVICE_HOST="$v"
	v=$(env_file_value TT_DEVICE_PORT)
	[ -z "$v" ] || export TT_DEVICE_PORT="$v"
fi

daemon_url() {
	printf '%s' "${TT_DEVICE_URL:-http://${TT_DEVICE_HOST:-127.0.0.1}:${TT_DEVICE_PORT:-5741}}"
}

# The first client found: this folder's executable, the installed one, one on PATH.
find_client() {
	local c
	for c in "$here/tt-device-queue" "$bin_dir/tt-device-queue" "$(command -v tt-device-queue || true)"; do
		if [ -n "$c" ] && [ -x "$c" ]; then
			printf '%s\n' "$c"
			return 0
		fi
	done
	return 1
}

# How often a pattern occurs in the whitespace-free /status JSON. Each pattern starts with the
# character before the key ("," or "{"), so text inside a job's command (where quotes are
# escaped as \") never matches.
count() {
	{ grep -o "$1" <<<"$2" || true; } | wc -l | tr -d ' '
}

daemon_answered=0
checked_idle=0
# Refuse (exit 1) while the daemon has running, queued or pending-reset work, unless --force.
# The earlier Python service answers /status with one card's "current", "pending" and
# "device" at the top: its queued jobs are counted by their "waiting_sec".
check_idle() {
	local cli json running queued resets
	checked_idle=1
	if ! cli=$(find_client); then
		say "no tt-device-queue executable yet to ask the daemon with; assuming none runs"
		return 0
	fi
	if ! json=$("$cli" --json status 2>/dev/null); then
		say "no daemon answers at $(daemon_url); nothing to wait for"
		return 0
	fi
	daemon_answered=1
	json=$(tr -d ' \t\r\n' <<<"$json")
	running=$(count '[,{]"current":{' "$json")
	if grep -q '[,{]"queued_total":' <<<"$json"; then
		queued=$(grep -o '[,{]"queued_total":[0-9]*' <<<"$json" | grep -o '[0-9]*$')
	else
		queued=$(count '[,{]"waiting_sec":' "$json")
	fi
	resets=$(count '[,{]"reset_pending":true' "$json")
	if [ "$running" -eq 0 ] && [ "${queued:-0}" -eq 0 ] && [ "$resets" -eq 0 ]; then
		say "the daemon at $(daemon_url) is idle"
		return 0
	fi
	if [ "$force" -eq 1 ]; then
		say "--force: going on although the daemon at $(daemon_url) has $running running," \
			"$queued queued, $resets pending resets (running jobs fail with exit -1 on restart)"
		return 0
	fi
	die "the queue at $(daemon_url) is busy: $running running, $queued queued, $resets pending" \
		"resets. Wait until \`tt-device-queue status\` shows every card idle, or pass --force" \
		"(running jobs then fail with exit -1; queued jobs are kept and run after the restart)."
}

have_user_systemd() {
	command -v systemctl >/dev/null 2>&1 && systemctl --user show-environment >/dev/null 2>&1
}

# Put src at dest: a symlink, or with --copy a copy with the given mode. Atomic (rename), so a
# running executable is replaced rather than rewritten.
place() {
	local src=$1 dest=$2 mode=$3 tmp
	if [ "$src" -ef "$dest" ] && [ ! -L "$dest" ]; then
		say "$dest is this folder's file already"
		return 0
	fi
	mkdir -p "$(dirname "$dest")"
	tmp=$dest.tmp.$$
	rm -f "$tmp"
	if [ "$copy" -eq 1 ]; then
		cp "$src" "$tmp"
		chmod "$mode" "$tmp"
	else
		ln -s "$src" "$tmp"
	fi
	mv -fT "$tmp" "$dest"
	say "installed $dest$([ "$copy" -eq 1 ] && echo " (copy)" || echo " -> $src")"
}

# A value for a systemd unit: double-quoted, with %, \, " and $ escaped.
unit_quote() {
	local v=$1
	v=${v//\\/\\\\}
	v=${v//\"/\\\"}
	v=${v//%/%%}
	v=${v//\$/\$\$}
	printf '"%s"' "$v"
}

# TT_DEVICE_STOP_GRACE_SEC as the service will see it (the env file), else the default 8.
stop_grace() {
	local g
	g=$(env_file_value TT_DEVICE_STOP_GRACE_SEC)
	g=${g:-8}
	[[ $g =~ ^[0-9]+(\.[0-9]*)?$ ]] || die "$env_file: TT_DEVICE_STOP_GRACE_SEC='$g' is not a number of seconds"
	printf '%s\n' "$g"
}

# The unit. The daemon exits at most grace + 5 s after SIGTERM; systemd waits longer than that
# before it SIGKILLs the whole control group (which also takes every job process with it).
unit_text() {
	local grace stop_timeout exe=$bin_dir/tt-device-queue
	grace=$(stop_grace)
	stop_timeout=$((${grace%%.*} + 16))
	cat <<EOF
$unit_marker ($here/install.sh).
# Rerun it to update this file; \`install.sh --uninstall\` removes it.
[Unit]
Description=tt-device-queue: one FIFO job queue per Tenstorrent card
Documentation=man:tt-device-queue(1)

[Service]
Type=notify
NotifyAccess=main
ExecStart=$(unit_quote "$exe") serve
Environment=$(unit_quote "TT_DEVICE_LOG_DIR=$log_dir")
EnvironmentFile=-${env_file//%/%%}
KillMode=control-group
TimeoutStopSec=$stop_timeout
WatchdogSec=$watchdog_sec
Restart=on-failure
RestartSec=2
# exit 2 is a configuration error: restarting cannot fix it
RestartPreventExitStatus=2

[Install]
WantedBy=default.target
EOF
}

install_unit() {
	local tmp=$unit_dest.tmp.$$
	mkdir -p "$(dirname "$unit_dest")"
	unit_text >"$tmp"
	mv -f "$tmp" "$unit_dest"
	say "wrote $unit_dest"
	systemctl --user daemon-reload
	systemctl --user enable --quiet "$unit_name"
	say "restarting $unit_name (it reports ready once it listens and has recovered its queues)"
	if ! systemctl --user restart "$unit_name"; then
		die "the service did not start; see: journalctl --user -u $unit_name -n 50"
	fi
	systemctl --user --no-pager --lines=0 status "$unit_name" || true
	if command -v loginctl >/dev/null 2>&1 &&
		[ "$(loginctl show-user "$(id -un)" --property=Linger --value 2>/dev/null || true)" = no ]; then
		say "note: without lingering the service stops when you log out and does not start at" \
			"boot; enable it with: loginctl enable-linger $(id -un)"
	fi
}

print_manual_start() {
	local q_exe q_log q_env
	printf -v q_exe '%q' "$bin_dir/tt-device-queue"
	printf -v q_log '%q' "$log_dir"
	printf -v q_env '%q' "$env_file"
	cat <<EOF
$prog: no user systemd answers (\`systemctl --user show-environment\` failed), so no service
was installed; the CLI is. Start the daemon by hand, in its own session so it outlives this
shell, with the service's settings file if there is one (its NAME=VALUE lines read as
systemd reads them: a value is taken whole, spaces and all, never run as shell code):

  (if [ -r $q_env ]; then while IFS= read -r l || [ -n "\$l" ]; do
     case \$l in [A-Za-z_]*=*) v=\${l#*=}; case \$v in \"*\"|\'*\') v=\${v:1:\${#v}-2};; esac
       export "\${l%%=*}=\$v";; esac; done <$q_env; fi
   TT_DEVICE_LOG_DIR=$q_log setsid -f $q_exe serve >>$q_log/serve.log 2>&1 </dev/null)

Its log lines go to $log_dir/serve.log. Stop it with \`kill PID\` (SIGTERM: running jobs
stop and fail, queued jobs are kept); \`tt-device-queue status\` shows whether it is up.
Nothing restarts it after a crash or a reboot: that is what the user service is for.
EOF
	if [ "$daemon_answered" -eq 1 ]; then
		say "a daemon already answers at $(daemon_url): it still runs the old executable until" \
			"you stop it and start it again as above"
	fi
}

# Where agents look for skills: the Agent Skills folder and Claude Code's.
skill_dirs=("$HOME/.agents/skills/tt-device-queue" "$HOME/.claude/skills/tt-device-queue")

# Write the executable's built-in skill as SKILL.md into each skill folder. A symlink there
# (the earlier install linked its checkout's folder) is replaced, never written through.
install_skill() {
	local dir tmp
	for dir in "${skill_dirs[@]}"; do
		if [ -L "$dir" ]; then
			say "replacing $dir (a link to $(readlink "$dir"), left by an earlier install)"
			rm -f "$dir"
		fi
		mkdir -p "$dir"
		tmp=$dir/SKILL.md.tmp.$$
		if ! "$here/tt-device-queue" skill >"$tmp"; then
			rm -f "$tmp"
			die "$here/tt-device-queue skill failed; not installing the agent skill"
		fi
		chmod 644 "$tmp"
		mv -f "$tmp" "$dir/SKILL.md"
		say "installed $dir/SKILL.md (the agent skill)"
	done
}

removed=0
remove_path() {
	if [ -L "$1" ] || [ -e "$1" ]; then
		rm -f "$1"
		say "removed $1"
		removed=$((removed + 1))
	fi
}

do_uninstall() {
	local dir
	[ "$force" -eq 1 ] || check_idle
	if [ -e "$unit_dest" ]; then
		grep -qF "$unit_marker" "$unit_dest" ||
			die "$unit_dest was not written by install.sh; remove it yourself"
		if have_user_systemd; then
			systemctl --user disable --now "$unit_name" || true
		else
			say "no user systemd answers: removing the unit file only"
		fi
		remove_path "$unit_dest"
		if have_user_systemd; then
			systemctl --user daemon-reload
		fi
	fi
	if [ "$here/tt-device-queue" -ef "$bin_dir/tt-device-queue" ] && [ ! -L "$bin_dir/tt-device-queue" ]; then
		say "kept $bin_dir/tt-device-queue: it is this folder's own executable"
	else
		remove_path "$bin_dir/tt-device-queue"
	fi
	remove_path "$man_dest"
	remove_path "$comp_dest"
	for dir in "${skill_dirs[@]}"; do
		if [ -L "$dir" ]; then
			remove_path "$dir"
		else
			remove_path "$dir/SKILL.md"
			rmdir "$dir" 2>/dev/null || true
		fi
	done
	[ "$removed" -gt 0 ] || say "nothing was installed; nothing removed"
	if [ "$daemon_answered" -eq 1 ] && ! have_user_systemd; then
		say "a daemon started by hand still answers at $(daemon_url); stop it with kill PID"
	fi
	say "kept $log_dir (the job database and every job's output); delete it yourself if unwanted"
}

do_install() {
	# Asked after the build, so that a checkout just pulled over the earlier Python service
	# (no executable of ours yet) still has a client to ask that service with.
	if [ "$build" -eq 0 ] || find_client >/dev/null; then
		check_idle
	fi
	if [ "$build" -eq 1 ]; then
		say "building (make)"
		(cd "$here" && make)
		if [ "$tests" = unit ]; then
			say "running the unit tests (make unit-test; --full-test runs make test)"
			(cd "$here" && make unit-test)
		elif [ "$tests" = full ]; then
			say "running the whole test suite (make test)"
			(cd "$here" && make test)
		fi
	fi
	[ -x "$here/tt-device-queue" ] ||
		die "$here/tt-device-queue does not exist: build it with make (or drop --no-build)"
	[ "$checked_idle" -eq 1 ] || check_idle
	"$here/tt-device-queue" --version >/dev/null ||
		die "$here/tt-device-queue --version failed; not installing it"
	[ -d "$log_dir" ] || mkdir -m 700 "$log_dir"
	place "$here/tt-device-queue" "$bin_dir/tt-device-queue" 755
	if [ -f "$here/tt-device-queue.1" ]; then
		place "$here/tt-device-queue.1" "$man_dest" 644
	fi
	if [ -f "$here/completions/tt-device-queue.bash" ]; then
		place "$here/completions/tt-device-queue.bash" "$comp_dest" 644
	fi
	install_skill
	case ":$PATH:" in
	*":$bin_dir:"*) ;;
	*) say "note: $bin_dir is not on your PATH; add it (e.g. in ~/.profile)" ;;
	esac
	if have_user_systemd; then
		install_unit
	else
		print_manual_start
	fi
	say "done: $("$bin_dir/tt-device-queue" --version)"
}

if [ "$uninstall" -eq 1 ]; then
	do_uninstall
else
	do_install
fi
