#!/bin/bash
# sends-cost.sh BIN_DIR LABEL [PORT] [DURATION] [syncbench flags…]
#
# One `syncbench -scenario sends` run against a fresh external syncd built into BIN_DIR (syncd and
# syncbench), printing what the run cost the server: acked sends/s, p50/p99, server CPU per acked
# send (utime+stime of the syncd process over the run) and bytes written to disk per acked send
# (write_bytes of /proc/<pid>/io, i.e. what reached the block layer: WAL, flushes, compactions).
# Extra environment (GOGC, …) passes to syncd; extra arguments to syncbench (`-spread 10000` sends
# on the peers' spread, issue #27). The run holds /tmp/bench.lock, so concurrent
# benchmarks on a shared machine take turns. Used for docs/BENCHMARKS.md, "The write path".
set -euo pipefail
B=$1 L=$2 P=${3:-27500} DUR=${4:-10s}
shift $(($# < 4 ? $# : 4))
D=$(mktemp -d /tmp/sends-cost.XXXX)
"$B/syncd" -data-dir "$D" -listen 127.0.0.1:$P -admin 127.0.0.1:$((P+1)) -raft-addr 127.0.0.1:$((P+2)) -web-listen 127.0.0.1:$((P+3)) \
	-log-level warn -send-rate 100000 -send-burst 100000 >"$D.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$D" "$D.log"' EXIT
for _ in $(seq 100); do
	[ -f "$D/admin.token" ] && curl -sf http://127.0.0.1:$((P+1))/readyz >/dev/null && break
	sleep 0.1
done
cpu() { awk '{print $14+$15}' /proc/$PID/stat; }
wrote() { awk '/^write_bytes/{print $2}' /proc/$PID/io; }
c0=$(cpu) w0=$(wrote)
OUT=$(flock /tmp/bench.lock "$B/syncbench" -scenario sends -addr 127.0.0.1:$P -data-dir "$D" -duration "$DUR" "$@" 2>&1 | grep "acked/s, p50")
c1=$(cpu) w1=$(wrote)
acks=$(echo "$OUT" | sed -E 's/.* ([0-9]+) acked\/s.*/\1/')
lat=$(echo "$OUT" | sed -E 's/.*acked\/s, (p50 [^,]*, p99 [^,]*),.*/\1/')
awk -v l="$L" -v a="$acks" -v d="${DUR%s}" -v c=$((c1 - c0)) -v w=$((w1 - w0)) -v hz="$(getconf CLK_TCK)" -v lat="$lat" \
	'BEGIN { n = a * d; printf "%-14s %6d acked/s  cpu %4.0f µs/ack  disk %5.0f B/ack  %s\n", l, a, c / hz * 1e6 / n, w / n, lat }'
