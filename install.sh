#!/usr/bin/env bash
# install.sh - install tt-device-queue on a lab host: for this user (a personal service), or
# with --system for every user of the host (README.md "Install"; the man page's INSTALLATION
# section).
#
#   ./install.sh [--force] [--copy] [--full-test | --no-test] [--no-build]
#   ./install.sh --uninstall [--force]
#   sudo ./install.sh --system [--force] [--full-test | --no-test] [--no-build]
#   sudo ./install.sh --uninstall --system [--force]
#
# 0. --system needs root: run by another user it says so and exits 1 before anything else.
# 1. Refuses while the daemon has work: a running job or reset, a queued job, a pending reset
#    (--force goes on anyway). It asks the daemon the CLI would ask: TT_DEVICE_URL, else
#    TT_DEVICE_HOST/TT_DEVICE_PORT, else those in the env file below, else 127.0.0.1:5741.
#    No answer means nothing to wait for.
# 2. make, then the unit tests (make unit-test, seconds); --full-test runs the whole suite
#    instead (make test, minutes). --no-test skips the tests; --no-build skips both and installs
#    the executable already in this folder (say a `make static` build copied here with this
#    script). Run by root in a checkout another user owns (sudo), make runs as that owner, so
#    no file of root's is left in the checkout.
# 3. ~/.local/bin/tt-device-queue: a symlink to this folder's executable (--copy: a copy), and
#    the same for the man page and the bash completion under ${XDG_DATA_HOME:-~/.local/share}.
#    The agent skill the executable prints (`tt-device-queue skill`) is written to
#    ~/.agents/skills/tt-device-queue/SKILL.md and ~/.claude/skills/tt-device-queue/SKILL.md,
#    replacing the symlink the earlier Python service's install.sh left there.
#    --system: copies (every user runs them, and the checkout may sit in a folder only its
#    owner enters) in /usr/local/bin, /usr/local/share/man/man1 and
#    /usr/local/share/bash-completion/completions (bash-completion 2, Debian's and Ubuntu's,
#    reads <each of XDG_DATA_DIRS, default /usr/local/share:/usr/share>/bash-completion/
#    completions), and the skill in /usr/local/share/tt-device-queue/SKILL.md, printing the
#    commands a user links it into ~/.agents/skills with. Nothing under any HOME. And the
#    Slurm Prolog and Epilog (slurm/prolog, slurm/epilog) in /usr/local/lib/tt-device-queue/
#    slurm, for a host that is a Slurm node (docs/MULTI-HOST.md).
# 4. The systemd user unit tt-device-queue.service (written from the template below) is
#    enabled and restarted; the daemon keeps its database and job output in this folder's
#    logs-v2/. Where no user systemd answers (`systemctl --user show-environment` fails), it
#    says so and prints how to start the daemon by hand.
#    --system: the system unit /etc/systemd/system/tt-device-queue.service (run as root; every
#    local user may submit; data in /var/lib/tt-device-queue through StateDirectory=, settings
#    from /etc/tt-device-queue/env), then daemon-reload, enable, restart. Where systemd is not
#    PID 1 (`systemctl show-environment` fails: a container, CI) no unit is written, and it
#    prints how to start the daemon by hand as root.
# One queue per card per host: first of all (after 0) an install refuses, exit 1, while a card
# its service would serve is claimed by another user's daemon (for --system: any user's but
# root's), naming that daemon and how to stop it; a personal install refuses too while the
# system unit is installed and enabled. --force goes on. The cards are those the service's
# settings name: TT_DEVICE_DEV_DIR and TT_DEVICE_IDS of this environment, else of the env file,
# else every numeric node in /dev/tenstorrent. A claim is the abstract unix socket
# "@tt-device-queue/claim/..." a serve listens on (proc.c, claim_address), listed with its
# processes by `ss -xlp`; where ss is missing, any running `tt-device-queue serve` of another
# user (from /proc) counts.
# Running it twice leaves the same result. --uninstall stops and removes the unit and the files
# of step 3; it never touches logs-v2/ (the job database and every job's output), nor with
# --system /var/lib/tt-device-queue or /etc/tt-device-queue/env.
# The service reads optional settings (TT_DEVICE_IDS, TT_DEVICE_RESET_CMD, ...) from
# ${XDG_CONFIG_HOME:-~/.config}/tt-device-queue/env (--system: /etc/tt-device-queue/env),
# NAME=VALUE lines; this script only reads it.
# For tests only: TTQ_INSTALL_ROOT=DIR puts every path under /usr/local, /etc and /var/lib that
# install.sh writes, reads or removes under DIR instead, as make's DESTDIR does; what the unit
# and the printed commands say stays the host's paths, and the processes looked at the host's.
set -euo pipefail

prog=install.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
args=("$@")
unit_name=tt-device-queue.service
unit_marker="# Written by tt-device-queue's install.sh"
watchdog_sec=60 # the daemon pings at half this; a loop stuck this long is restarted
# The host-wide install (--system), as the host sees it.
sys_exe=/usr/local/bin/tt-device-queue
sys_man=/usr/local/share/man/man1/tt-device-queue.1
sys_comp=/usr/local/share/bash-completion/completions/tt-device-queue
sys_skill_dir=/usr/local/share/tt-device-queue
sys_slurm_dir=/usr/local/lib/tt-device-queue/slurm
sys_unit=/etc/systemd/system/$unit_name
sys_env=/etc/tt-device-queue/env
sys_log=/var/lib/tt-device-queue
root=${TTQ_INSTALL_ROOT:-}
root=${root%/}

force=0 copy=0 build=1 tests=unit uninstall=0 system=0

usage() {
	cat <<EOF
usage: ./install.sh [--force] [--copy] [--full-test | --no-test] [--no-build]
       ./install.sh --uninstall [--force]
       sudo ./install.sh --system [--force] [--full-test | --no-test] [--no-build]
       sudo ./install.sh --uninstall --system [--force]

Install tt-device-queue for this user: build, run the unit tests, put the CLI in
~/.local/bin and the agent skill in ~/.agents/skills and ~/.claude/skills, and (re)start
the systemd user service. Refuses while the queue has running or queued work, and while
the host's service is enabled or another user's daemon serves the cards.

With --system (as root), install the host's service instead, to which every local user
submits: the CLI in /usr/local/bin, the man page, completion and agent skill under
/usr/local/share, the Slurm Prolog and Epilog in /usr/local/lib/tt-device-queue/slurm, the
system unit /etc/systemd/system/tt-device-queue.service, the data in
/var/lib/tt-device-queue. Refuses while another user's daemon serves the cards.

  --system     the host-wide service (needs root) instead of this user's
  --force      go on even when jobs are running or queued (running ones fail with
               exit -1 when the service restarts; queued ones are kept), or while
               another daemon serves the cards (the new one then exits 2 on them)
  --copy       copy the executable (and man page, completion) instead of symlinking
               them to this checkout (--system always copies)
  --full-test  run the whole suite (\`make test\`, minutes) instead of the unit tests
               (\`make unit-test\`, seconds)
  --no-test    build but run no tests
  --no-build   skip make and the tests; install ./tt-device-queue as it is
  --uninstall  stop and remove the service, the CLI, man page, completion and agent
               skill; logs-v2/ (--system: /var/lib/tt-device-queue and
               /etc/tt-device-queue/env) is never touched
  -h, --help   show this help

The daemon checked for idleness is TT_DEVICE_URL (or TT_DEVICE_HOST/TT_DEVICE_PORT), as
for the CLI. Service settings go in ~/.config/tt-device-queue/env (--system:
/etc/tt-device-queue/env), NAME=VALUE lines.
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
	--system) system=1 ;;
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

me=$(id -u)
if [ "$system" -eq 1 ]; then
	[ "$me" -eq 0 ] || die "--system installs the service of every user of this host and" \
		"needs root; nothing was changed. Run: sudo $0 ${args[*]}"
	umask 022 # every user reads what it installs
	copy=1
	bin_dir=$root${sys_exe%/*}
	man_dest=$root$sys_man
	comp_dest=$root$sys_comp
	unit_dest=$root$sys_unit
	env_file=$root$sys_env
	log_dir=$root$sys_log
	# Where agents look for skills is each user's: the skill waits here for their links.
	skill_dirs=("$root$sys_skill_dir")
	sctl=(systemctl)
	journal="journalctl -u" manager="systemd as PID 1"
	# what the unit and the printed commands name
	exe_shown=$sys_exe log_shown=$sys_log env_shown=$sys_env
else
	: "${HOME:?HOME is not set}"
	bin_dir=$HOME/.local/bin
	data_home=${XDG_DATA_HOME:-$HOME/.local/share}
	config_home=${XDG_CONFIG_HOME:-$HOME/.config}
	man_dest=$data_home/man/man1/tt-device-queue.1
	comp_dest=$data_home/bash-completion/completions/tt-device-queue
	unit_dest=$config_home/systemd/user/$unit_name
	env_file=$config_home/tt-device-queue/env
	log_dir=$here/logs-v2
	# Where agents look for skills: the Agent Skills folder and Claude Code's.
	skill_dirs=("$HOME/.agents/skills/tt-device-queue" "$HOME/.claude/skills/tt-device-queue")
	sctl=(systemctl --user)
	journal="journalctl --user -u" manager="user systemd"
	exe_shown=$bin_dir/tt-device-queue log_shown=$log_dir env_shown=$env_file
fi

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

# ------------------------------------------------------ one queue per card per host

# "ID NODE" for each card the service will serve that has a device node, as its settings
# name them (serve's own rules: TT_DEVICE_IDS, else the numeric entries of TT_DEVICE_DEV_DIR).
service_nodes() {
	local dir ids id n list=()
	dir=${TT_DEVICE_DEV_DIR:-$(env_file_value TT_DEVICE_DEV_DIR)}
	dir=${dir:-/dev/tenstorrent}
	ids=${TT_DEVICE_IDS:-$(env_file_value TT_DEVICE_IDS)}
	if [ -n "$ids" ]; then
		IFS=', ' read -r -a list <<<"$ids"
	else
		for n in "$dir"/*; do
			list+=("${n##*/}")
		done
	fi
	for id in "${list[@]}"; do
		[[ $id =~ ^[0-9]{1,7}$ ]] || continue
		n=$dir/$((10#$id))
		[ ! -e "$n" ] || printf '%s %s\n' "$((10#$id))" "$n"
	done
}

# The abstract name a serve claims NODE by (proc.c, claim_address): a character device's
# major:minor, else the file's st_dev (as glibc's major() and minor() split it) and inode.
claim_name() {
	local t dev ino
	if [ -c "$1" ]; then
		t=$(stat -L -c '%t %T' "$1") || return 1
		printf '@tt-device-queue/claim/dev/%d:%d\n' "0x${t% *}" "0x${t#* }"
	else
		t=$(stat -L -c '%d %i' "$1") || return 1
		dev=${t% *} ino=${t#* }
		printf '@tt-device-queue/claim/file/%d:%d/%s\n' \
			$((((dev >> 32) & 0xfffff000) | ((dev >> 8) & 0xfff))) \
			$((((dev >> 12) & 0xffffff00) | (dev & 0xff))) "$ino"
	fi
}

# "pid P, user U, command line 'C'" of process P, as serve names a claim's holder.
describe_pid() {
	local uid user cmd
	uid=$(awk '/^Uid:/ { print $2; exit }' "/proc/$1/status" 2>/dev/null) || uid='?'
	user=$(id -nu "$uid" 2>/dev/null) || user="uid $uid"
	cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || cmd=
	cmd=${cmd% }
	printf "pid %s, user %s, command line '%s'" "$1" "$user" "${cmd:0:200}"
}

# The pids of running `tt-device-queue serve` daemons (not their guardians) of other users.
others_serves() {
	local d pid uid argv=()
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		[ "$(cat "$d/comm" 2>/dev/null)" = tt-device-queue ] || continue
		mapfile -d '' -t argv <"$d/cmdline" 2>/dev/null || continue
		[ "${argv[1]:-}" = serve ] || continue
		uid=$(awk '/^Uid:/ { print $2; exit }' "$d/status" 2>/dev/null) || continue
		[ "$uid" = "$me" ] || printf '%s\n' "$pid"
	done
}

# Fill in_way with a line for each daemon of another user that claims one of the service's
# cards; without ss, each `tt-device-queue serve` of another user (its cards unknown).
in_way=()
find_claims_in_way() {
	local listing id node name line pid pids unseen=0
	if ! command -v ss >/dev/null 2>&1 || ! listing=$(ss -xlp 2>/dev/null); then
		for pid in $(others_serves); do
			in_way+=("$(describe_pid "$pid") (no \`ss\` here to tell which cards it claims)")
		done
		return 0
	fi
	while read -r id node; do
		name=$(claim_name "$node") || continue
		line=$(awk -v n="$name" '{ for (i = 1; i <= NF; i++) if ($i == n) { print; exit } }' \
			<<<"$listing")
		[ -n "$line" ] || continue
		pids=$(grep -o 'pid=[0-9]*' <<<"$line" | cut -d= -f2 | sort -un || true)
		if [ -z "$pids" ]; then # not ours: ss shows a user only their own processes
			in_way+=("card $id ($node): claimed by a process of another user (\`ss -xlp\` names it only to root)")
			unseen=1
		fi
		for pid in $pids; do
			[ "$(awk '/^Uid:/ { print $2; exit }' "/proc/$pid/status" 2>/dev/null)" = "$me" ] ||
				in_way+=("card $id ($node): $(describe_pid "$pid")")
		done
	done < <(service_nodes)
	if [ "$unseen" -eq 1 ]; then
		in_way+=("tt-device-queue daemons of other users running here:")
		for pid in $(others_serves); do
			in_way+=("  $(describe_pid "$pid")")
		done
	fi
}

# True when the host's system unit is installed and enabled (a link in a .wants folder).
system_unit_enabled() {
	local link
	[ -e "$root$sys_unit" ] || return 1
	for link in "$root${sys_unit%/*}"/*.wants/"$unit_name"; do
		if [ -L "$link" ] || [ -e "$link" ]; then
			return 0
		fi
	done
	return 1
}

# Refuse (exit 1) to install a service beside another that serves the same cards, unless
# --force: the second one's serve would exit 2 on them.
check_one_queue_per_card() {
	local unit='' lead
	if [ "$system" -eq 0 ] && system_unit_enabled; then
		unit="the host's service is installed and enabled ($sys_unit): systemd runs it as root"
		unit+=" for every user of this host"
	fi
	find_claims_in_way
	[ -n "$unit" ] || [ "${#in_way[@]}" -gt 0 ] || return 0
	if [ "$force" -eq 1 ]; then
		say "--force: installing although another service serves these cards${unit:+: $unit}"
		[ "${#in_way[@]}" -eq 0 ] || printf '  %s\n' "${in_way[@]}"
		return 0
	fi
	{
		[ -z "$unit" ] || say "$unit."
		if [ "${#in_way[@]}" -gt 0 ]; then
			say "cards this service would serve are claimed by another user's daemon" \
				"(one queue per card per host: a second one exits 2 on them):"
			printf '  %s\n' "${in_way[@]}"
		fi
		if [ "$system" -eq 1 ]; then
			cat <<EOF
Each such user stops their service first, once \`tt-device-queue status\` is idle:
  ./install.sh --uninstall      (in their checkout; or: systemctl --user disable --now tt-device-queue)
A daemon started by hand stops with \`kill PID\`, which root may send. Then run this again;
--force installs anyway (the host's service then exits 2 while those cards are claimed).
EOF
		else
			lead="Where that is the host's service (root's), use it"
			[ "${#in_way[@]}" -gt 0 ] || lead="Use it"
			cat <<EOF
$lead, as every user of this host may (each job runs as its
submitter): $sys_exe status
or have it removed first: sudo ./install.sh --uninstall --system
EOF
			[ "${#in_way[@]}" -eq 0 ] || cat <<EOF
Where it is another user's, ask them to stop it, or name other cards in TT_DEVICE_IDS in
$env_file.
EOF
			echo "--force installs anyway."
		fi
	} >&2
	exit 1
}

# ------------------------------------------------------ installing

have_systemd() {
	command -v systemctl >/dev/null 2>&1 && "${sctl[@]}" show-environment >/dev/null 2>&1
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
# The system unit runs as root (no User=): the daemon runs each job as its submitter.
unit_text() {
	local grace stop_timeout
	grace=$(stop_grace)
	stop_timeout=$((${grace%%.*} + 16))
	if [ "$system" -eq 1 ]; then
		cat <<EOF
$unit_marker ($here/install.sh --system).
# Rerun it to update this file; \`install.sh --uninstall --system\` removes it.
[Unit]
Description=tt-device-queue: one FIFO job queue per Tenstorrent card, for every user of this host
Documentation=man:tt-device-queue(1)

[Service]
Type=notify
NotifyAccess=main
ExecStart=$sys_exe serve
Environment=TT_DEVICE_LOG_DIR=$sys_log
StateDirectory=${sys_log#/var/lib/}
StateDirectoryMode=0700
EnvironmentFile=-$sys_env
EOF
	else
		cat <<EOF
$unit_marker ($here/install.sh).
# Rerun it to update this file; \`install.sh --uninstall\` removes it.
[Unit]
Description=tt-device-queue: one FIFO job queue per Tenstorrent card
Documentation=man:tt-device-queue(1)

[Service]
Type=notify
NotifyAccess=main
ExecStart=$(unit_quote "$exe_shown") serve
Environment=$(unit_quote "TT_DEVICE_LOG_DIR=$log_dir")
EnvironmentFile=-${env_file//%/%%}
EOF
	fi
	cat <<EOF
KillMode=control-group
TimeoutStopSec=$stop_timeout
WatchdogSec=$watchdog_sec
Restart=on-failure
RestartSec=2
# exit 2 is a configuration error: restarting cannot fix it
RestartPreventExitStatus=2

[Install]
WantedBy=$([ "$system" -eq 1 ] && echo multi-user.target || echo default.target)
EOF
}

install_unit() {
	local tmp=$unit_dest.tmp.$$
	mkdir -p "$(dirname "$unit_dest")"
	unit_text >"$tmp"
	chmod 644 "$tmp"
	mv -f "$tmp" "$unit_dest"
	say "wrote $unit_dest"
	"${sctl[@]}" daemon-reload
	"${sctl[@]}" enable --quiet "$unit_name"
	say "restarting $unit_name (it reports ready once it listens and has recovered its queues)"
	if ! "${sctl[@]}" restart "$unit_name"; then
		die "the service did not start; see: $journal $unit_name -n 50"
	fi
	"${sctl[@]}" --no-pager --lines=0 status "$unit_name" || true
	if [ "$system" -eq 0 ] && command -v loginctl >/dev/null 2>&1 &&
		[ "$(loginctl show-user "$(id -un)" --property=Linger --value 2>/dev/null || true)" = no ]; then
		say "note: without lingering the service stops when you log out and does not start at" \
			"boot; enable it with: loginctl enable-linger $(id -un)"
	fi
}

print_manual_start() {
	local q_exe q_log q_env
	printf -v q_exe '%q' "$exe_shown"
	printf -v q_log '%q' "$log_shown"
	printf -v q_env '%q' "$env_shown"
	if [ "$system" -eq 1 ]; then
		cat <<EOF
$prog: systemd is not running as PID 1 here (\`systemctl show-environment\` failed: a
container, CI), so no service was installed; the executable, man page, completion and skill
are. Start the daemon by hand as root, in its own session so it outlives this shell, with
the host's settings file if there is one (its NAME=VALUE lines read as systemd reads them: a
value is taken whole, spaces and all, never run as shell code):
EOF
	else
		cat <<EOF
$prog: no user systemd answers (\`systemctl --user show-environment\` failed), so no service
was installed; the CLI is. Start the daemon by hand, in its own session so it outlives this
shell, with the service's settings file if there is one (its NAME=VALUE lines read as
systemd reads them: a value is taken whole, spaces and all, never run as shell code):
EOF
	fi
	cat <<EOF

  (if [ -r $q_env ]; then while IFS= read -r l || [ -n "\$l" ]; do
     case \$l in [A-Za-z_]*=*) v=\${l#*=}; case \$v in \"*\"|\'*\') v=\${v:1:\${#v}-2};; esac
       export "\${l%%=*}=\$v";; esac; done <$q_env; fi
   TT_DEVICE_LOG_DIR=$q_log setsid -f $q_exe serve >>$q_log/serve.log 2>&1 </dev/null)

Its log lines go to $log_shown/serve.log. Stop it with \`kill PID\` (SIGTERM: running jobs
stop and fail, queued jobs are kept); \`tt-device-queue status\` shows whether it is up.
Nothing restarts it after a crash or a reboot: that is what the service is for.
EOF
	if [ "$daemon_answered" -eq 1 ]; then
		say "a daemon already answers at $(daemon_url): it still runs the old executable until" \
			"you stop it and start it again as above"
	fi
}

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
	if [ "$system" -eq 1 ]; then
		cat <<EOF
$prog: agents find the skill where each user links it:
  for d in ~/.agents/skills ~/.claude/skills; do mkdir -p \$d/tt-device-queue &&
    ln -sf $sys_skill_dir/SKILL.md \$d/tt-device-queue/SKILL.md; done
EOF
	fi
}

# The Slurm Prolog and Epilog (--system only: slurmd runs them as root), copies.
install_slurm() {
	local s
	for s in prolog epilog; do
		place "$here/slurm/$s" "$root$sys_slurm_dir/$s" 755
	done
	say "a Slurm node takes leases with: Prolog=$sys_slurm_dir/prolog" \
		"Epilog=$sys_slurm_dir/epilog PrologFlags=Alloc BatchStartTimeout=43200 in slurm.conf" \
		"(docs/MULTI-HOST.md)"
}

# Root runs the commands the host's env file names: say so when anyone else could change it.
check_env_file_owner() {
	local p
	for p in "$env_file" "$(dirname "$env_file")"; do
		[ -e "$p" ] || continue
		if [ "$(stat -c %u "$p")" != 0 ] || (((8#$(stat -c %a "$p") & 8#022) != 0)); then
			say "warning: root runs the commands $env_shown names, and $p can be changed by" \
				"others than root: chown root:root $p && chmod go-w $p"
		fi
	done
}

# make TARGET... in this folder; as its owner when root runs it in another user's checkout.
run_make() {
	local owner user
	owner=$(stat -c %u "$here")
	if [ "$me" -eq 0 ] && [ "$owner" != 0 ] && command -v runuser >/dev/null 2>&1 &&
		user=$(id -nu "$owner" 2>/dev/null); then
		(cd "$here" && runuser -u "$user" -- make "$@")
	else
		(cd "$here" && make "$@")
	fi
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
		if have_systemd; then
			"${sctl[@]}" disable --now "$unit_name" || true
		else
			say "no $manager answers: removing the unit file only"
		fi
		remove_path "$unit_dest"
		if have_systemd; then
			"${sctl[@]}" daemon-reload
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
	if [ "$system" -eq 1 ]; then
		remove_path "$root$sys_slurm_dir/prolog"
		remove_path "$root$sys_slurm_dir/epilog"
		rmdir "$root$sys_slurm_dir" "$root${sys_slurm_dir%/*}" 2>/dev/null || true
	fi
	[ "$removed" -gt 0 ] || say "nothing was installed; nothing removed"
	if [ "$daemon_answered" -eq 1 ] && ! have_systemd; then
		say "a daemon started by hand still answers at $(daemon_url); stop it with kill PID"
	fi
	if [ "$system" -eq 1 ]; then
		say "kept $log_dir (the job database and every job's output) and $env_file (the" \
			"settings); delete them yourself if unwanted"
	else
		say "kept $log_dir (the job database and every job's output); delete it yourself if unwanted"
	fi
}

do_install() {
	check_one_queue_per_card
	# Asked after the build, so that a checkout just pulled over the earlier Python service
	# (no executable of ours yet) still has a client to ask that service with.
	if [ "$build" -eq 0 ] || find_client >/dev/null; then
		check_idle
	fi
	if [ "$build" -eq 1 ]; then
		say "building (make)"
		run_make
		if [ "$tests" = unit ]; then
			say "running the unit tests (make unit-test; --full-test runs make test)"
			run_make unit-test
		elif [ "$tests" = full ]; then
			say "running the whole test suite (make test)"
			run_make test
		fi
	fi
	[ -x "$here/tt-device-queue" ] ||
		die "$here/tt-device-queue does not exist: build it with make (or drop --no-build)"
	[ "$checked_idle" -eq 1 ] || check_idle
	"$here/tt-device-queue" --version >/dev/null ||
		die "$here/tt-device-queue --version failed; not installing it"
	if [ ! -d "$log_dir" ]; then
		mkdir -p "$(dirname "$log_dir")"
		mkdir -m 700 "$log_dir"
	fi
	place "$here/tt-device-queue" "$bin_dir/tt-device-queue" 755
	if [ -f "$here/tt-device-queue.1" ]; then
		place "$here/tt-device-queue.1" "$man_dest" 644
	fi
	if [ -f "$here/completions/tt-device-queue.bash" ]; then
		place "$here/completions/tt-device-queue.bash" "$comp_dest" 644
	fi
	install_skill
	if [ "$system" -eq 1 ]; then
		install_slurm
		check_env_file_owner
	else
		case ":$PATH:" in
		*":$bin_dir:"*) ;;
		*) say "note: $bin_dir is not on your PATH; add it (e.g. in ~/.profile)" ;;
		esac
	fi
	if have_systemd; then
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
