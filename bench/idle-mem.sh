#!/bin/bash
# idle-mem.sh BIN_DIR LABEL [PORT] [SENDS]
#
# Memory of a fresh external syncd built into BIN_DIR (syncd and syncbench) holding 10,000 idle
# devices, each with a live sync stream (`syncbench -scenario idle -idle 10000`). With SENDS (a
# duration such as 20s) a sends run comes first on the same server, so Pebble's block cache and
# memtables are full when the idle devices connect ("the full run" of issue #11). While the
# connections are held it reads the server's VmRSS (/proc/<pid>/status), goroutine count and
# runtime.MemStats (the admin port's /debug/pprof), and saves a heap profile and the goroutine
# dump to /tmp/idle-mem/LABEL.*. SYNCD_ARGS are more flags of syncd (-memory-limit 800MiB); other
# environment (GOGC, GOMEMLIMIT, …) passes to syncd. IDLE is the number of devices. The
# measuring holds /tmp/bench.lock, so concurrent benchmarks on a shared machine take turns. Used
# for docs/BENCHMARKS.md, "Idle memory (issue #11)".
set -euo pipefail
B=$1 L=$2 P=${3:-18600} SENDS=${4:-}
N=${IDLE:-10000}
D=$(mktemp -d /tmp/idle-mem.XXXX)
O=/tmp/idle-mem
mkdir -p $O
"$B/syncd" -data-dir "$D" -listen 127.0.0.1:$P -admin 127.0.0.1:$((P+1)) -raft-addr 127.0.0.1:$((P+2)) -web-listen 127.0.0.1:$((P+3)) \
	-log-level warn -send-rate 100000 -send-burst 100000 ${SYNCD_ARGS:-} >"$D.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$D" "$D.log" "$D.out"' EXIT
for _ in $(seq 100); do
	[ -f "$D/admin.token" ] && curl -sf http://127.0.0.1:$((P+1))/readyz >/dev/null && break
	sleep 0.1
done
A="http://127.0.0.1:$((P+1))/debug/pprof"
H="Authorization: Bearer $(cat "$D/admin.token")"
rss() { awk '/^VmRSS/{printf "%d", $2/1024}' /proc/$PID/status; }
measure() {
	"$B/syncbench" -scenario idle -idle "$N" -addr 127.0.0.1:$P -data-dir "$D" >"$D.out" 2>&1 &
	local SB=$!
	until grep -q "measure the server's RSS now" "$D.out" 2>/dev/null; do
		kill -0 $SB 2>/dev/null || { cat "$D.out"; exit 1; }
		sleep 0.2
	done
	sleep 1 # let the last streams' first heartbeats settle
	R=$(rss)
	curl -sf -H "$H" "$A/goroutine?debug=1" >$O/$L.goroutines
	G=$(sed -En '1s/.*total ([0-9]+).*/\1/p' $O/$L.goroutines)
	curl -sf -H "$H" "$A/heap?debug=1" >$O/$L.heap.txt
	# Then a collection, for what is live: the heap profile and MemStats after it.
	curl -sf -H "$H" "$A/heap?gc=1" >$O/$L.heap.pb.gz
	curl -sf -H "$H" "$A/heap?debug=1" >$O/$L.live.txt
	wait $SB
}
if [ -n "$SENDS" ]; then
	flock /tmp/bench.lock "$B/syncbench" -scenario sends -addr 127.0.0.1:$P -data-dir "$D" -duration "$SENDS" 2>&1 |
		grep "acked/s, p50" | sed -E 's/^ *//' | cut -c1-80 >&2 || true
fi
R0=$(rss)
exec 9>>/tmp/bench.lock
flock 9
measure
flock -u 9
ms() { awk -v k="$2" '$2 == k {printf "%d", $4/1048576}' $O/$L.$1.txt; }
printf "%-14s rss %5d MiB (before idle %4d)  goroutines %6d (%.2f/conn)  HeapInuse %4d MiB  NextGC %4d  Stack %3d  Sys %4d  | after GC: live heap %4d MiB  Stack %3d\n" \
	"$L" "$R" "$R0" "$G" "$(echo "$G / $N" | bc -l)" "$(ms heap HeapInuse)" "$(ms heap NextGC)" "$(ms heap Stack)" "$(ms heap Sys)" \
	"$(ms live HeapAlloc)" "$(ms live Stack)"
