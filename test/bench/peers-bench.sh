#!/bin/bash
# Peer-probe measurements on two test-bed VMs (docs/BENCHMARKS.md); run
# through test/bench/peers, inside node 1.
set -u
other=${RDMAD_PEERS%% *}
me=$RDMAD_NODE_ADDR
echo "== nodes: me=$me other=$other; $(nproc) vCPUs"
waitstate() { # peer state timeout_s
	local end=$((SECONDS + $3))
	while [ $SECONDS -lt $end ]; do
		s=$(rdmactl peers 2>/dev/null | awk -v p="$1" '$1==p {print $3; exit}')
		[ "$s" = "$2" ] && return 0
		sleep 0.2
	done
	return 1
}
echo "== guest: $(/mnt/inject/peers.test -test.run '^$' -test.bench WindowStats -test.benchtime 20000x -test.count 3 | grep ns/op | awk '{print $3}' | sort -n | sed -n 2p) ns/op BenchmarkWindowStats (median of 3; the host's figure is above)"
waitstate "$other" up 120 || { echo "peer never up"; rdmactl peers; exit 1; }
echo "== 1. RTT: rdmad probes vs perftest on the same rxe0 pair"
sleep 30
rdmactl --json peers > /tmp/peers.json
rdmactl peers
echo "-- ib_send_lat -c UD (perftest), 1000 iterations, 64 bytes"
vmnode 2 ib_send_lat -d rxe0 -x 1 -c UD -s 64 -n 1000 >/tmp/srv.out 2>&1 &
sleep 3
ib_send_lat -d rxe0 -x 1 -c UD -s 64 -n 1000 "$other" 2>&1 | tail -4
wait
echo "-- ib_write_lat (RC), 1000 iterations, 64 bytes"
vmnode 2 ib_write_lat -d rxe0 -x 1 -s 64 -n 1000 >/tmp/srv.out 2>&1 &
sleep 3
ib_write_lat -d rxe0 -x 1 -s 64 -n 1000 "$other" 2>&1 | tail -4
wait

echo "== 2. time to report a stopped peer down (journal timestamps)"
for i in 1 2 3; do
	waitstate "$other" up 120 || { echo "not up"; }
	sleep 5
	t0=$(date +%s.%N)
	vmnode 2 systemctl kill -s KILL rdmad >/dev/null
	t0b=$(date +%s.%N)
	waitstate "$other" down 20
	t1=$(journalctl -u rdmad -o short-unix --since "@${t0%.*}" --no-pager | grep "peer down" | grep "$other" | head -1 | cut -d' ' -f1)
	echo "run $i: kill issued at $t0..$t0b, journal 'peer down' at $t1: $(awk "BEGIN{printf \"%.2f s (from the end of the kill command: %.2f s)\", $t1-$t0, $t1-$t0b}")"
	vmnode 2 systemctl reset-failed rdmad >/dev/null 2>&1
	vmnode 2 systemctl start rdmad >/dev/null
done
waitstate "$other" up 120

echo "== 3. time to report 5% loss (tc netem on node 2's eth0, both directions of node 2's egress)"
sleep 5
t0=$(date +%s.%N)
vmnode 2 tc qdisc add dev eth0 root netem loss 5%
if waitstate "$other" degraded 400; then
	t1=$(journalctl -u rdmad -o short-unix --since "@${t0%.*}" --no-pager | grep "peer degraded" | grep "$other" | head -1 | cut -d' ' -f1)
	echo "5% loss -> degraded after $(awk "BEGIN{printf \"%.1f s\", $t1-$t0}")"
	journalctl -u rdmad --since "@${t0%.*}" --no-pager | grep -i "peer" | head -5
else
	echo "not degraded within 400 s"; rdmactl peers
fi
vmnode 2 tc qdisc del dev eth0 root

echo "== 4. CPU by peer count at 1 Hz (N host names, all the other VM)"
for i in $(seq -w 1 1000); do echo "$other peer$i"; done >> /etc/hosts
pid2() { vmnode 2 systemctl show -p MainPID --value rdmad | tr -d '\r\n '; }
# cpu_run LABEL N: probe N peers (all node 2) for 60 s of settling and 60 s
# measured; CPU of the prober (node 1) and the responder (node 2) from
# /proc/PID/stat, the guest's own accounting.
cpu_run() {
	local label=$1 n=$2
	if [ "$n" -gt 1 ]; then
		seq -w 1 1000 | head -n "$n" | sed 's/^/peer/' > /etc/rdmad/peers
		printf '[probe]\nmax_peers = 1000\npeers_file = "/etc/rdmad/peers"\n' > /etc/rdmad/rdmad.d/60-bench.toml
	else
		rm -f /etc/rdmad/rdmad.d/60-bench.toml
	fi
	rdmactl reload >/dev/null
	sleep 60
	local pid hz u1 s1 u2 s2 r1 r2 t0 t1 p2 up
	pid=$(systemctl show -p MainPID --value rdmad)
	p2=$(pid2)
	hz=$(getconf CLK_TCK)
	read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
	r1=$(vmnode 2 awk '{print $14+$15}' /proc/$p2/stat | tr -d '\r\n ')
	t0=$(date +%s.%N)
	sleep 60
	read -r u2 s2 < <(awk '{print $14, $15}' /proc/$pid/stat)
	r2=$(vmnode 2 awk '{print $14+$15}' /proc/$p2/stat | tr -d '\r\n ')
	t1=$(date +%s.%N)
	up=$(rdmactl peers | awk '$3=="up" {print $1}' | sort -u | wc -l)
	awk -v l="$label" -v n="$n" -v up="$up" "BEGIN{el=$t1-$t0; printf \"%-9s %4d peers (%4d up): prober user %5.2f%% sys %6.2f%% = %6.2f%% of a core; responder %6.2f%%\\n\", l, n, up, 100*($u2-$u1)/$hz/el, 100*($s2-$s1)/$hz/el, 100*(($u2-$u1)+($s2-$s1))/$hz/el, 100*($r2-$r1)/$hz/el}"
	rdmactl --json peers | tr -d ' \n' | grep -o '"counters":{[^}]*}'; echo
}
echo "rdmad $(rdmad --version 2>/dev/null | head -1)"
for n in 1 64 1000; do cpu_run current "$n"; done
if [ -f /mnt/inject/baseline.deb ]; then
	echo "-- the same with the baseline package on both nodes: $(dpkg-deb -f /mnt/inject/baseline.deb Version)"
	for node in 1 2; do vmnode "$node" sh -c 'dpkg -i /mnt/inject/baseline.deb >/dev/null 2>&1 && systemctl restart rdmad'; done
	sleep 10
	for n in 1 64 1000; do cpu_run baseline "$n"; done
fi
rm -f /etc/rdmad/rdmad.d/60-bench.toml; rdmactl reload >/dev/null
