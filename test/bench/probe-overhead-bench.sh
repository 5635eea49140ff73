#!/bin/bash
# Probe overhead, start and idle (#18 items 3 and 4; docs/BENCHMARKS.md), in
# one test-bed VM; run through test/bench/probe-overhead, which injects
# probe-c (test/bench/probe-c/probe.c built on the host) and Debian's
# prometheus-node-exporter package.
#
#   1. rdmad's loopback probe RTT vs probe-c, the same verbs sequence in C on
#      the same port, both in poll modes "event" and "busy", and ib_write_lat
#      on the same port; REPS repetitions, interleaved, nothing else probing
#      rxe0 at the time; rdmad's CPU while probing in each mode.
#   2. READY after start under systemd (ExecMainStart -> ActiveEnter, which
#      is when systemd got READY=1), with rxe0 and without any device.
#   3. Idle RSS of rdmad (rxe0: MR pool, loopback probe) and of
#      node_exporter, started together, read at the same moment, then again
#      after three scrapes of each.
set -u
cd /mnt/inject
REPS=${1:-3} # repetitions of part 1 (the host script passes REPS)
ROUNDS=400 # probe rounds per measurement; the window (300) holds the last 300
dev=rxe0
dropin=/etc/rdmad/rdmad.d/70-bench.toml
say() { echo "== $*"; }

# lb prints the loopback fields of rxe0 port 1 from rdmad's status, one
# "op_field value" per line (write_p50_ns 123456), plus gid_index and poll.
lb() {
	rdmactl --json status 2>/dev/null | awk '
		/^  "loopback": \[/ { in_lb = 1; next }
		in_lb && /^  \]/ { in_lb = 0 }
		!in_lb { next }
		/"(write|read|send|warmup)": \{/ { match($0, /"[a-z]+"/); op = substr($0, RSTART + 1, RLENGTH - 2); next }
		/^      \}/ { op = "" }
		{ gsub(/[",:]/, ""); if (NF == 2) print (op == "" ? "" : op "_") $1, $2 }'
}
field() { lb | awk -v k="$1" '$1 == k { print $2; exit }'; }
# waitcount N POLL: until rxe0/1's window has N WRITE samples in mode POLL.
waitcount() {
	local end=$((SECONDS + 300)) c p
	# Let most of the rounds run before asking: each rdmactl costs the
	# guest CPU the probe runs on.
	sleep $(($1 / 100 + 1))
	while [ $SECONDS -lt $end ]; do
		c=$(field write_count) p=$(field poll)
		[ "$p" = "$2" ] && [ "${c:-0}" -ge "$1" ] && return 0
		sleep 2
	done
	echo "rdmad never reached $1 WRITE samples in poll mode $2; status:"
	rdmactl status
	return 1
}
# ticks PID: the process's user+system clock ticks so far.
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
ns_us() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1000 }'; }

if [ -f rdmad-dropin.conf ]; then
	# RDMAD_DROPIN of the host script: in force for this run.
	mkdir -p /etc/systemd/system/rdmad.service.d
	cp rdmad-dropin.conf /etc/systemd/system/rdmad.service.d/80-bench.conf
	systemctl daemon-reload
	systemctl restart rdmad
	say "rdmad's unit drop-in for this run: $(sed 1d rdmad-dropin.conf | tr '\n' ' ')"
fi
say "guest: $(uname -r); clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource); $(nproc) vCPUs"
rdmactl version
say "rdmad: $(grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs):' "/proc/$(systemctl show -p MainPID --value rdmad)/status" | tr -s '\t\n' '  ')"
systemctl is-active rdmad >/dev/null || { echo "rdmad is not active"; systemctl status rdmad; exit 1; }
waitcount 1 event || exit 1
gid=$(field gid_index)
say "rxe0 port 1: probe GID index $gid (rdmad's choice; probe-c and ib_write_lat use the same)"

say "1. probe RTT: probe-c vs rdmad (event, busy) vs ib_write_lat, $REPS repetitions, $ROUNDS rounds 10 ms apart, 64 B"
for rep in $(seq 1 "$REPS"); do
	echo "-- repetition $rep"
	systemctl stop rdmad
	for mode in event busy; do
		flag=
		[ "$mode" = busy ] && flag=-b
		out=$(./probe-c -d "$dev" -i 1 -x "$gid" -n "$ROUNDS" -W 300 -I 10000 $flag) || { echo "probe-c failed: $out"; exit 1; }
		echo "RESULT rep=$rep who=probe-c $out"
	done
	# What else rdmad does around its rounds, added to probe-c one at a time
	# (event mode): the port query before each round (-Q), a sysmon-like
	# neighbour thread woken at each round (-S), both.
	for extra in Q S QS; do
		flags=$(echo "$extra" | sed 's/./ -&/g')
		out=$(./probe-c -d "$dev" -i 1 -x "$gid" -n "$ROUNDS" -W 300 -I 10000 $flags) || { echo "probe-c $flags failed: $out"; exit 1; }
		echo "RESULT rep=$rep who=probe-c-$extra $out"
	done
	for mode in event busy; do
		printf '[probe]\nloopback_interval = "10ms"\npoll = "%s"\n' "$mode" >"$dropin"
		if [ "$mode" = event ]; then systemctl start rdmad; else rdmactl reload >/dev/null; fi
		waitcount "$ROUNDS" "$mode" || exit 1
		pid=$(systemctl show -p MainPID --value rdmad)
		t0=$(ticks "$pid") s0=$SECONDS
		sleep 10
		t1=$(ticks "$pid") s1=$SECONDS
		cpu=$(awk -v t=$((t1 - t0)) -v s=$((s1 - s0)) -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", 100 * t / hz / s }')
		echo "RESULT rep=$rep who=rdmad poll=$mode cpu_pct=$cpu $(lb | awk '$1 ~ /_(p50|p99|max)_ns$|_count$|^rounds$|^failures$/ { printf "%s=%s ", $1, $2 }')"
	done
	systemctl stop rdmad
	args="-d $dev -x $gid -n 1000 -s 64 -F"
	ib_write_lat $args >/tmp/srv.out 2>&1 &
	sleep 2
	# #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% (one-way, us)
	line=$(ib_write_lat $args 127.0.0.1 2>&1 | awk '$1 == 64 && $2 == 1000')
	wait
	echo "RESULT rep=$rep who=ib_write_lat t_min_us=$(echo "$line" | awk '{print $3}') t_typical_us=$(echo "$line" | awk '{print $5}') t_99_us=$(echo "$line" | awk '{print $8}') rtt_typical_us=$(echo "$line" | awk '{printf "%.2f", 2 * $5}')"
done
rm -f "$dropin"

say "2. READY after start (systemd: ExecMainStartTimestamp -> ActiveEnterTimestamp, monotonic)"
# jmono PID PATTERN: the monotonic time (us) of PID's first journal line
# matching PATTERN, or nothing.
jmono() {
	journalctl -o short-monotonic "_PID=$1" --no-pager 2>/dev/null | grep -m1 -- "$2" |
		sed -n 's/^\[ *\([0-9]*\)\.\([0-9]*\)\].*/\1\2/p'
}
ready() { # label: five restarts
	local i a b pid first pool
	for i in 1 2 3 4 5; do
		systemctl restart rdmad
		a=$(systemctl show -p ExecMainStartTimestampMonotonic --value rdmad)
		b=$(systemctl show -p ActiveEnterTimestampMonotonic --value rdmad)
		pid=$(systemctl show -p MainPID --value rdmad)
		sleep 3
		# The split: exec -> rdmad's first journal line (Go runtime, the
		# configuration) and -> the MR pool's "registered buffers" line.
		first=$(jmono "$pid" "rdmad\[") pool=$(jmono "$pid" "mrpool: registered buffers")
		echo "RESULT who=ready devices=$1 run=$i ready_ms=$(awk -v d=$((b - a)) 'BEGIN { printf "%.1f", d / 1000 }')" \
			"first_log_ms=$(awk -v f="${first:-0}" -v a="$a" 'BEGIN { if (f > 0) printf "%.1f", (f - a) / 1000; else printf "-" }')" \
			"pool_registered_ms=$(awk -v f="${pool:-0}" -v a="$a" 'BEGIN { if (f > 0) printf "%.1f", (f - a) / 1000; else printf "-" }')"
	done
}
ready rxe0
rdma link del rxe0
sleep 2
ready none
rdma link add rxe0 type rxe netdev eth0
sleep 2

say "3. idle RSS: rdmad (rxe0, default configuration: MR pool, loopback probe at 1 Hz) and node_exporter, same boot"
systemctl restart rdmad
dpkg -i ./prometheus-node-exporter_*.deb >/tmp/dpkg.out 2>&1 || { cat /tmp/dpkg.out; exit 1; }
systemctl is-active prometheus-node-exporter || { systemctl status prometheus-node-exporter; exit 1; }
end=$((SECONDS + 120))
until rdmactl --json status | grep -q '"registered": true' || [ $SECONDS -ge $end ]; do sleep 2; done
rdmactl status | sed -n '/^MRPOOL/,/^$/p'
rss() { # label pid
	awk -v who="$1" '/^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM):/ { printf "%s_kib=%s ", $1, $2 } END { print "" }' "/proc/$2/status" |
		sed -e 's/:_kib/_kib/g' -e "s/^/RESULT who=$1 /"
}
sleep 60
rp=$(systemctl show -p MainPID --value rdmad)
np=$(systemctl show -p MainPID --value prometheus-node-exporter)
rss rdmad-idle "$rp"
rss node_exporter-idle "$np"
scrape() { # port: one GET /metrics over bash's /dev/tcp; prints the bytes
	exec 3<>"/dev/tcp/127.0.0.1/$1"
	printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
	wc -c <&3
	exec 3<&-
}
printf '[metrics]\nlisten = "127.0.0.1:10879"\n' >"$dropin"
rdmactl reload >/dev/null
sleep 2
for i in 1 2 3; do
	echo "scrape $i: rdmad $(scrape 10879) bytes, node_exporter $(scrape 9100) bytes"
	sleep 1
done
sleep 10
rss rdmad-scraped "$rp"
rss node_exporter-scraped "$np"
rm -f "$dropin"
say done
