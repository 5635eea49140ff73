#!/bin/bash
# boot.sh (run with test/vm/run, RDMAD_VM_INSTALL=none works) checks the
# single-node test bed: Soft-RoCE rxe0 ACTIVE with the RoCE v2 GID of the
# node's address, verbs traffic on it, the 9p inject mount, configfs
# rdma_cm, tc netem and the system bus. It exits non-zero on the first failure.
set -u
fails=0
check() { # check NAME CMD...: run CMD, report ok/FAIL
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

echo "node $RDMAD_NODE addr $RDMAD_NODE_ADDR peers '${RDMAD_PEERS}' kernel $(uname -r)"
check "rxe0 registered" test -d /sys/class/infiniband/rxe0
check "rxe0 netdev eth0" want_eq "$(rdma link show rxe0/1 | grep -o 'netdev [a-z0-9]*')" "netdev eth0"
check "port 1 ACTIVE" grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state
IFS=. read -r a b c d <<<"$RDMAD_NODE_ADDR"
gid=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
check "GID 1 is IPv4-mapped $RDMAD_NODE_ADDR" want_eq "$(cat /sys/class/infiniband/rxe0/ports/1/gids/1)" "$gid"
check "GID 1 type RoCE v2" want_eq "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1)" "RoCE v2"
check "ibv_devinfo sees PORT_ACTIVE" sh -c 'ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE'
# test/vm/run raises the guest's systemd timeouts for loaded hosts.
check "systemd start timeout 600 s" want_eq "$(systemctl show -p DefaultTimeoutStartUSec --value)" "10min"
check "console shell running" systemctl is-active serial-getty@ttyS0.service
check "inject mount has this script" test -f /mnt/inject/boot.sh
check "inject mount is read-only" sh -c '! touch /mnt/inject/.rw-probe 2>/dev/null'
check "configfs rdma_cm" sh -c 'mkdir -p /sys/kernel/config/rdma_cm/rxe0 && cat /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_mode && rmdir /sys/kernel/config/rdma_cm/rxe0'
check "tc netem on eth0" sh -c 'tc qdisc add dev eth0 root netem delay 1ms && tc qdisc show dev eth0 | grep -q netem && tc qdisc del dev eth0 root'
check "system bus" busctl --system list --no-pager
# Real verbs traffic over rxe0: RC ping-pong and an RDMA WRITE latency run,
# both looped back on the one device.
check "ibv_rc_pingpong loopback" sh -c '
	ibv_rc_pingpong -d rxe0 -g 1 -n 100 >/tmp/pp.srv 2>&1 & s=$!
	sleep 1
	ibv_rc_pingpong -d rxe0 -g 1 -n 100 127.0.0.1 && wait $s'
check "ib_write_lat loopback" sh -c '
	ib_write_lat -d rxe0 -x 1 -n 200 >/tmp/lat.srv 2>&1 & s=$!
	sleep 1
	ib_write_lat -d rxe0 -x 1 -n 200 127.0.0.1 >/tmp/lat.cli 2>&1 && wait $s && tail -n 3 /tmp/lat.cli'
grep -A2 't_avg' /tmp/lat.cli 2>/dev/null | tail -n 2
echo "failures: $fails"
[ $fails -eq 0 ]
