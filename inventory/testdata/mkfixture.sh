#!/bin/sh
# Lays out testdata/roce-ib/sys: a fake sysfs with one RoCE device (mlx5_0, PCI,
# two ports), one InfiniBand device (mlx4_0 with IPoIB ib0) and one software
# RoCE device (rxe0). Run from this directory; the output is committed.
set -eu
R=${1:-roce-ib}/sys
rm -rf "$R"
f() { mkdir -p "$(dirname "$R/$1")"; printf '%s\n' "$2" > "$R/$1"; }

# mlx5_0: RoCE on a PCI function, port 1 active with 3 GIDs, port 2 down.
D=class/infiniband/mlx5_0
mkdir -p "$R/devices/pci0000:00/0000:00:02.0/0000:03:00.0"
f devices/pci0000:00/0000:00:02.0/0000:03:00.0/vendor "0x15b3"
mkdir -p "$R/$D"
ln -s ../../../devices/pci0000:00/0000:00:02.0/0000:03:00.0 "$R/$D/device"
f $D/node_type "1: CA"
f $D/node_guid "b859:9f03:00d4:e2a0"
f $D/sys_image_guid "b859:9f03:00d4:e2a0"
f $D/fw_ver "16.35.2000"
f $D/hca_type "MT4119"
f $D/board_id "MT_0000000010"
P=$D/ports/1
f $P/state "4: ACTIVE"
f $P/phys_state "5: LinkUp"
f $P/link_layer "Ethernet"
f $P/rate "100 Gb/sec (4X EDR)"
f $P/gids/0 "fe80:0000:0000:0000:ba59:9fff:fed4:e2a0"
f $P/gids/1 "fe80:0000:0000:0000:ba59:9fff:fed4:e2a0"
f $P/gids/2 "0000:0000:0000:0000:0000:ffff:c000:0211"
f $P/gids/3 "0000:0000:0000:0000:0000:0000:0000:0000"
f $P/gid_attrs/types/0 "IB/RoCE v1"
f $P/gid_attrs/types/1 "RoCE v2"
f $P/gid_attrs/types/2 "RoCE v2"
f $P/gid_attrs/ndevs/0 "ens1f0np0"
f $P/gid_attrs/ndevs/1 "ens1f0np0"
f $P/gid_attrs/ndevs/2 "ens1f0np0"
f $P/counters/port_rcv_data "123456"
f $P/counters/port_xmit_data "654321"
f $P/counters/symbol_error "0"
f $P/counters/link_downed "2"
f $P/counters/port_rcv_errors "not-a-number"
f $P/hw_counters/out_of_sequence "7"
f $P/hw_counters/packet_seq_err "1"
f $P/hw_counters/np_cnp_sent "42"
P=$D/ports/2
f $P/state "1: DOWN"
f $P/phys_state "3: Disabled"
f $P/link_layer "Ethernet"
f $P/rate "40 Gb/sec (4X QDR)"
f $P/gids/0 "0000:0000:0000:0000:0000:0000:0000:0000"

# mlx4_0: InfiniBand, IPoIB netdev ib0 on port 1.
D=class/infiniband/mlx4_0
mkdir -p "$R/devices/pci0000:00/0000:00:03.0/0000:04:00.0/infiniband/mlx4_0"
# git keeps no empty directories: give each one a file, as sysfs has.
f devices/pci0000:00/0000:00:03.0/0000:04:00.0/infiniband/mlx4_0/node_type "1: CA"
mkdir -p "$R/$D"
ln -s ../../../devices/pci0000:00/0000:00:03.0/0000:04:00.0 "$R/$D/device"
f $D/node_type "1: CA"
f $D/node_guid "0002:c903:0031:7b30"
f $D/fw_ver "2.42.5000"
P=$D/ports/1
f $P/state "4: ACTIVE"
f $P/phys_state "5: LinkUp"
f $P/link_layer "InfiniBand"
f $P/rate "56 Gb/sec (4X FDR)"
f $P/lid "0x1a"
f $P/sm_lid "0x1"
f $P/gids/0 "fe80:0000:0000:0000:0002:c903:0031:7b31"
f $P/gid_attrs/types/0 "IB/RoCE v1"
f $P/counters/port_rcv_data "10"
mkdir -p "$R/class/net"
mkdir -p "$R/devices/pci0000:00/0000:00:03.0/0000:04:00.0/net/ib0"
ln -s ../../devices/pci0000:00/0000:00:03.0/0000:04:00.0/net/ib0 "$R/class/net/ib0"
ln -s ../../../0000:04:00.0 "$R/devices/pci0000:00/0000:00:03.0/0000:04:00.0/net/ib0/device"
f devices/pci0000:00/0000:00:03.0/0000:04:00.0/net/ib0/type "32"
f devices/pci0000:00/0000:00:03.0/0000:04:00.0/net/ib0/dev_port "0"

# rxe0: software RoCE, no parent device.
D=class/infiniband/rxe0
f $D/node_type "1: CA"
f $D/node_guid "5054:00ff:fe12:3401"
f $D/fw_ver "0.0.0"
P=$D/ports/1
f $P/state "4: ACTIVE"
f $P/phys_state "5: LinkUp"
f $P/link_layer "Ethernet"
f $P/rate "10 Gb/sec (1X QDR)"
f $P/gids/0 "fe80:0000:0000:0000:5054:00ff:fe12:3401"
f $P/gids/1 "0000:0000:0000:0000:0000:ffff:c0a8:4d01"
f $P/gid_attrs/types/0 "RoCE v2"
f $P/gid_attrs/types/1 "RoCE v2"
f $P/gid_attrs/ndevs/0 "eth0"
f $P/gid_attrs/ndevs/1 "eth0"
f $P/hw_counters/sent_pkts "100"
f $P/hw_counters/rcvd_pkts "99"

f class/infiniband_verbs/uverbs0/ibdev "mlx5_0"
f class/infiniband_verbs/uverbs1/ibdev "rxe0"
f class/infiniband_verbs/abi_version "6"
