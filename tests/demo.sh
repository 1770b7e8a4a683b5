#!/usr/bin/env bash
# `make demo`: start the daemon on two simulated cards (harmless reset and health commands, a
# temporary log dir, a free port), push a real multi-step command through `run --device 1`,
# show its output, exit status and the status view, then stop the daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export TT_DEVICE_URL="http://127.0.0.1:$port"

# no nodes in TT_DEVICE_DEV_DIR: the cards are simulated, not claimed from a service here
TT_DEVICE_IDS=0,1 TT_DEVICE_DEV_DIR="$tmp/no-dev" TT_DEVICE_PORT="$port" TT_DEVICE_LOG_DIR="$tmp/logs" \
	TT_DEVICE_RESET_CMD='echo simulated reset of card' \
	TT_DEVICE_HEALTH_CHECK_CMD='echo simulated card {device} healthy' \
	./tt-device-queue serve 2>"$tmp/serve.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do
	./tt-device-queue --json status >/dev/null 2>&1 && break
	sleep 0.05
done

echo "== tt-device-queue run --device 1 (the project's JSON unit tests, then a Python step)"
set +e
./tt-device-queue run --device 1 --cwd "$PWD" -- \
	'tests/bin/test_json | tail -n 2 && python3 -c "import sys; print(\"python says\", 6 * 7, sys.version.split()[0])"'
rc=$?
set -e
echo "== exit status: $rc"
echo "== tt-device-queue status"
./tt-device-queue status
echo "== daemon log"
cat "$tmp/serve.log"
exit "$rc"
