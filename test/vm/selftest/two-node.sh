#!/bin/bash
# two-node.sh (run with test/vm/run --nodes 2) checks the two-node test bed:
# the private link, the vmnode command channel (output, stderr, exit code,
# concurrency) and RDMA traffic across the two VMs (RC, UD, RDMA WRITE, rping).
set -u
fails=0
check() {
	local name=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "ok   $name"
	else
		echo "FAIL $name: $* -> $out"
		fails=$((fails + 1))
	fi
}
want_eq() { [ "$1" = "$2" ] || { echo "want '$2', got '$1'"; return 1; }; }

peer=${RDMAD_PEERS%% *}
echo "node $RDMAD_NODE addr $RDMAD_NODE_ADDR peers '$RDMAD_PEERS'"
check "one peer, 192.168.77.2" want_eq "$RDMAD_PEERS" 192.168.77.2
check "ping peer" ping -c 2 -W 5 "$peer"
check "vmnode runs on node2" want_eq "$(vmnode 2 cat /proc/sys/kernel/hostname)" node2
check "vmnode keeps arguments" want_eq "$(vmnode 2 printf '%s|' 'a b' "c'd")" "a b|c'd|"
check "vmnode passes exit code" sh -c 'vmnode 2 sh -c "exit 7"; test $? -eq 7'
check "vmnode separates stderr" want_eq "$(vmnode 2 sh -c 'echo out; echo err >&2' 2>/dev/null)" out
check "vmnode sees node2 env" want_eq "$(vmnode 2 sh -c 'echo $RDMAD_NODE_ADDR $RDMAD_PEERS')" "192.168.77.2 192.168.77.1"
check "vmnode to a missing node fails" sh -c '! vmnode 3 true'
check "node2 rxe0 ACTIVE" vmnode 2 grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state

# serve CMD...: start a server on node 2 through vmnode (in the background:
# vmnode returns when the server exits). client CMD...: run the client until
# the server listens (under a loaded TCG host that can take seconds), bounded.
serve() { vmnode 2 "$@" >/tmp/srv.out 2>&1 & srv=$!; sleep 1; }
client() { for _ in $(seq 20); do "$@" && return 0; sleep 2; done; return 1; }
check "ibv_rc_pingpong across" bash -c "$(declare -f serve client); serve ibv_rc_pingpong -d rxe0 -g 1 -n 200; client ibv_rc_pingpong -d rxe0 -g 1 -n 200 $peer && wait \$srv"
check "ibv_ud_pingpong across" bash -c "$(declare -f serve client); serve ibv_ud_pingpong -d rxe0 -g 1 -n 200; client ibv_ud_pingpong -d rxe0 -g 1 -n 200 $peer && wait \$srv"
check "ib_write_lat across" bash -c "$(declare -f serve client); serve ib_write_lat -d rxe0 -x 1 -n 500; client ib_write_lat -d rxe0 -x 1 -n 500 $peer >/tmp/lat.cli && wait \$srv"
grep -A1 't_avg' /tmp/lat.cli 2>/dev/null
check "rping across" bash -c "$(declare -f serve client); serve rping -s -a $peer -C 10; client rping -c -a $peer -C 10 && wait \$srv"
check "tc netem on node2 slows ping" sh -c "
	vmnode 2 tc qdisc add dev eth0 root netem delay 200ms &&
	ping -c 1 -W 5 $peer | grep -Eq 'time=(2|3)[0-9][0-9]' ; r=\$?
	vmnode 2 tc qdisc del dev eth0 root; exit \$r"
echo "failures: $fails"
[ $fails -eq 0 ]
