#!/usr/bin/env bash
# debian-nats.sh [PORT] - install Debian's nats-server (apt) if it is missing
# and start it with JetStream on 127.0.0.1:PORT (default 4222) in the
# background, for a comparison against an installed nats-server:
#
#   bash bench/peer/debian-nats.sh 4333
#   cd bench/peer && go run ./cmd/compare --nats-url nats://127.0.0.1:4333 --quick
#
# or let the comparison start (and pin with --server-cpus) the binary itself:
#
#   cd bench/peer && go run ./cmd/compare --nats-bin /usr/sbin/nats-server --quick
#
# Stop it with: kill "$(cat /tmp/sluice-bench-nats-PORT.pid)"
set -euo pipefail
port="${1:-4222}"
case "$port" in
''|*[!0-9]*) echo "usage: $0 [PORT]" >&2; exit 2 ;;
esac
if ! command -v nats-server >/dev/null 2>&1 && [ ! -x /usr/sbin/nats-server ]; then
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q nats-server
fi
bin="$(command -v nats-server || echo /usr/sbin/nats-server)"
store="$(mktemp -d /tmp/sluice-bench-nats-store.XXXXXX)"
pidfile="/tmp/sluice-bench-nats-$port.pid"
"$bin" -a 127.0.0.1 -p "$port" -js -sd "$store" >"/tmp/sluice-bench-nats-$port.log" 2>&1 &
echo $! >"$pidfile"
# Wait (at most 10 s) until it accepts connections.
i=0
while ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
	i=$((i + 1))
	if [ "$i" -ge 100 ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
		echo "nats-server did not start; see /tmp/sluice-bench-nats-$port.log" >&2
		exit 1
	fi
	sleep 0.1
done
echo "$("$bin" --version) listening on nats://127.0.0.1:$port (pid $(cat "$pidfile"), store $store)"
