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

echo "== 4. CPU with 1000 peers at 1 Hz (1000 host names, all the other VM)"
for i in $(seq -w 1 1000); do echo "$other peer$i"; done >> /etc/hosts
for i in $(seq -w 1 1000); do echo "peer$i"; done > /etc/rdmad/peers
printf '[probe]\nmax_peers = 1000\npeers_file = "/etc/rdmad/peers"\n' > /etc/rdmad/rdmad.d/60-bench.toml
rdmactl reload
pid=$(systemctl show -p MainPID --value rdmad)
end=$((SECONDS + 240))
while [ $SECONDS -lt $end ]; do
	n=$(rdmactl peers | awk '$1 ~ /^peer/ && $3=="up"' | wc -l)
	[ "$n" -ge 1000 ] && break
	sleep 2
done
echo "peers up: $n; $(rdmactl peers | head -3)"
sleep 10
hz=$(getconf CLK_TCK)
read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
pid2=$(vmnode 2 systemctl show -p MainPID --value rdmad | tr -d '\r\n ')
r1=$(vmnode 2 awk '{print $14+$15}' /proc/$pid2/stat | tr -d '\r\n ')
t0=$(date +%s.%N)
sleep 60
read -r u2 s2 < <(awk '{print $14, $15}' /proc/$pid/stat)
r2=$(vmnode 2 awk '{print $14+$15}' /proc/$pid2/stat | tr -d '\r\n ')
t1=$(date +%s.%N)
awk "BEGIN{el=$t1-$t0; printf \"prober (node 1, 1000 peers): user %.2f s + sys %.2f s over %.1f s = %.2f%% of one core\\n\", ($u2-$u1)/$hz, ($s2-$s1)/$hz, el, 100*(($u2-$u1)+($s2-$s1))/$hz/el; printf \"responder (node 2, answering ~1000 probes/s): %.2f%% of one core\\n\", 100*($r2-$r1)/$hz/el}"
rdmactl peers | awk '$1 ~ /^peer/ {n++; st[$3]++; v=$6; sub("µs","",v); if (v+0>0) {s+=v; c++}} END {for (k in st) printf "%s: %d  ", k, st[k]; printf "\nmean RTT p50 over peers %.0f us\n", s/c}'
rdmactl --json peers | grep -A8 '"counters"'
rm /etc/rdmad/rdmad.d/60-bench.toml; rdmactl reload >/dev/null
