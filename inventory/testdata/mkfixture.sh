#!/bin/sh
# Lays out testdata/roce-ib/sys: a fake sysfs with one RoCE device (mlx5_0, PCI,
# two ports), one InfiniBand device (mlx4_0 with IPoIB ib0) and one software
# RoCE device (rxe0); and testdata/pcie/sys: RDMA devices on PCIe paths of the
# shapes real servers have (below). Run from this directory; the output is
# committed.
set -eu
R=${1:-roce-ib}/sys
rm -rf "$R"
f() { mkdir -p "$(dirname "$R/$1")"; printf '%s\n' "$2" > "$R/$1"; }
# link DIR SPEED WIDTH MAXSPEED MAXWIDTH: a PCIe function's link attributes,
# as the kernel prints them (Documentation/ABI/testing/sysfs-bus-pci).
link() {
	f "$1/current_link_speed" "$2"
	f "$1/current_link_width" "$3"
	f "$1/max_link_speed" "$4"
	f "$1/max_link_width" "$5"
}

# mlx5_0: RoCE on a PCI function, port 1 active with 3 GIDs, port 2 down.
D=class/infiniband/mlx5_0
mkdir -p "$R/devices/pci0000:00/0000:00:02.0/0000:03:00.0"
f devices/pci0000:00/0000:00:02.0/0000:03:00.0/vendor "0x15b3"
# A Gen4 x16 card in a Gen4 x16 slot, trained at both: the path's maxima are
# its own.
link devices/pci0000:00/0000:00:02.0 "16.0 GT/s PCIe" 16 "16.0 GT/s PCIe" 16
link devices/pci0000:00/0000:00:02.0/0000:03:00.0 "16.0 GT/s PCIe" 16 "16.0 GT/s PCIe" 16
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
# ConnectX-3: a Gen3 x8 card in a x16 slot, as old kernels print speeds. The
# wider slot does not lower the path's maxima, so no bridge limits them.
link devices/pci0000:00/0000:00:03.0 "8 GT/s" 8 "8 GT/s" 16
link devices/pci0000:00/0000:00:03.0/0000:04:00.0 "8 GT/s" 8 "8 GT/s" 8
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

# rxe0: software RoCE, no parent device; the parent file names its netdev.
D=class/infiniband/rxe0
f $D/parent "eth0"
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

# testdata/pcie: one device per shape. A root port is pci0000:00/0000:00:0N.0;
# each RDMA device's class entry links to its function, as in /sys.
R=${2:-pcie}/sys
rm -rf "$R"
# rdma NAME FUNCTION-DIR RATE NETDEV SPEED: an RDMA device on FUNCTION-DIR
# (below devices/) with one active RoCE port over NETDEV (SPEED in Mb/s).
rdma() {
	D=class/infiniband/$1
	mkdir -p "$R/$D" "$R/class/net"
	ln -s "../../../devices/$2" "$R/$D/device"
	f $D/node_type "1: CA"
	f $D/node_guid "b859:9f03:00d4:e2a0"
	P=$D/ports/1
	f $P/state "4: ACTIVE"
	f $P/phys_state "5: LinkUp"
	f $P/link_layer "Ethernet"
	f $P/rate "$3"
	f $P/gids/0 "fe80:0000:0000:0000:ba59:9fff:fed4:e2a0"
	f $P/gid_attrs/types/0 "RoCE v2"
	f $P/gid_attrs/ndevs/0 "$4"
	f "devices/$2/net/$4/speed" "$5"
	ln -s "../../devices/$2/net/$4" "$R/class/net/$4"
}
RC=devices/pci0000:00

# mlx5_0: a Gen5 x16 NIC (ConnectX-7) in a Gen4 x16 slot, trained at Gen4 x16:
# healthy, the root port sets the path's speed.
link $RC/0000:00:01.0 "16.0 GT/s PCIe" 16 "16.0 GT/s PCIe" 16
link $RC/0000:00:01.0/0000:01:00.0 "16.0 GT/s PCIe" 16 "32.0 GT/s PCIe" 16
rdma mlx5_0 pci0000:00/0000:00:01.0/0000:01:00.0 "400 Gb/sec (4X NDR)" ens1f0np0 400000

# mlx5_1: Gen4 x16 NIC on a Gen4 x16 path, trained at x8 (a badly seated
# card): degraded by width.
link $RC/0000:00:02.0 "16.0 GT/s PCIe" 8 "16.0 GT/s PCIe" 16
link $RC/0000:00:02.0/0000:02:00.0 "16.0 GT/s PCIe" 8 "16.0 GT/s PCIe" 16
rdma mlx5_1 pci0000:00/0000:00:02.0/0000:02:00.0 "200 Gb/sec (4X HDR)" ens2f0np0 200000

# mlx5_2: Gen4 x16 NIC on a Gen4 x16 path, trained at 8 GT/s: degraded by
# speed. Its netdev's link is down (speed -1).
link $RC/0000:00:03.0 "8.0 GT/s PCIe" 16 "16.0 GT/s PCIe" 16
link $RC/0000:00:03.0/0000:03:00.0 "8.0 GT/s PCIe" 16 "16.0 GT/s PCIe" 16
rdma mlx5_2 pci0000:00/0000:00:03.0/0000:03:00.0 "100 Gb/sec (2X HDR)" ens3f0np0 -1

# mlx5_3: a Gen4 x16 NIC behind a PCIe switch whose downstream port is Gen3
# x16, trained at 8 GT/s x16: healthy, that port sets the path's speed.
# The switch's upstream link trained at x8: a fault of the switch's link,
# not of the NIC's, which is what the inventory judges.
link $RC/0000:00:04.0 "16.0 GT/s PCIe" 8 "16.0 GT/s PCIe" 16
link $RC/0000:00:04.0/0000:04:00.0 "16.0 GT/s PCIe" 8 "16.0 GT/s PCIe" 16
link $RC/0000:00:04.0/0000:04:00.0/0000:05:08.0 "8.0 GT/s PCIe" 16 "8.0 GT/s PCIe" 16
link $RC/0000:00:04.0/0000:04:00.0/0000:05:08.0/0000:06:00.0 "8.0 GT/s PCIe" 16 "16.0 GT/s PCIe" 16
rdma mlx5_3 pci0000:00/0000:00:04.0/0000:04:00.0/0000:05:08.0/0000:06:00.0 "100 Gb/sec (4X EDR)" ens4f0np0 100000

# mlx5_4: a virtual function of mlx5_1's PF. Its own link registers are
# reserved, so sysfs shows Unknown and 0; its physfn link leads to the PF.
link $RC/0000:00:02.0/0000:02:00.2 "Unknown" 0 "Unknown" 0
ln -s ../0000:02:00.0 "$R/$RC/0000:00:02.0/0000:02:00.2/physfn"
rdma mlx5_4 pci0000:00/0000:00:02.0/0000:02:00.2 "200 Gb/sec (4X HDR)" ens2f0v0 200000

# rxe0: Soft-RoCE over mlx5_0's netdev; its device link leads to the PCI
# function under the netdev, which is not rxe0's link.
D=class/infiniband/rxe0
mkdir -p "$R/$D"
ln -s ../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0 "$R/$D/device"
f $D/parent "ens1f0np0"
f $D/node_type "1: CA"
f $D/node_guid "5054:00ff:fe12:3401"
f $D/ports/1/state "4: ACTIVE"
f $D/ports/1/link_layer "Ethernet"
f $D/ports/1/rate "100 Gb/sec (4X EDR)"
f $D/ports/1/gids/0 "fe80:0000:0000:0000:ba59:9fff:fed4:e2a0"
f $D/ports/1/gid_attrs/types/0 "RoCE v2"
f $D/ports/1/gid_attrs/ndevs/0 "ens1f0np0"

# virt0: a device whose device link leads to a virtual netdev, on no bus.
D=class/infiniband/virt0
mkdir -p "$R/$D" "$R/devices/virtual/net/veth0"
f devices/virtual/net/veth0/speed "10000"
ln -s ../../../devices/virtual/net/veth0 "$R/$D/device"
f $D/node_type "1: CA"
f $D/ports/1/state "1: DOWN"
f $D/ports/1/link_layer "Ethernet"
f $D/ports/1/rate "Unknown"

# testdata/lost: a node that lost one of its HCAs, as sysfs shows it, with
# the functions that are not RDMA devices and must not count as lost. Each
# function has vendor, device and class files and a driver link, and
# bus/pci/devices links to it, as in /sys.
R=${3:-lost}/sys
rm -rf "$R"
# fn ADDR VENDOR DEVICE CLASS DRIVER: a PCI function below the root port
# 0000:00:ADDR's bus; DRIVER "" leaves it unbound.
fn() {
	F=devices/pci0000:00/$1
	f $F/vendor "$2"
	f $F/device "$3"
	f $F/class "$4"
	if [ -n "$5" ]; then
		mkdir -p "$R/bus/pci/drivers/$5"
		ln -s "../../../../bus/pci/drivers/$5" "$R/$F/driver"
	fi
	mkdir -p "$R/bus/pci/devices"
	ln -s "../../../devices/pci0000:00/$1" "$R/bus/pci/devices/$(basename "$1")"
}
# The root ports themselves are PCI functions (bridges, class 0x0604).
for p in 01 02 03 04 05 06 07; do
	fn 0000:00:$p.0 0x8086 0x347a 0x060400 pcieport
done
# mlx5_0 and mlx5_1: two ConnectX-7 (InfiniBand class) with their devices.
fn 0000:00:01.0/0000:17:00.0 0x15b3 0x1021 0x020700 mlx5_core
rdma mlx5_0 pci0000:00/0000:00:01.0/0000:17:00.0 "400 Gb/sec (4X NDR)" ibp23s0 400000
fn 0000:00:02.0/0000:2a:00.0 0x15b3 0x1021 0x020700 mlx5_core
rdma mlx5_1 pci0000:00/0000:00:02.0/0000:2a:00.0 "400 Gb/sec (4X NDR)" ibp42s0 400000
# 0000:3d:00.0: the third ConnectX-7, probed by mlx5_core, without its RDMA
# device (mlx5_ib failed for it): lost.
fn 0000:00:03.0/0000:3d:00.0 0x15b3 0x1021 0x020700 mlx5_core
# 0000:4e:00.0: a ConnectX-6 Dx (Ethernet class) no driver took (mlx5_core
# failed to probe it): lost.
fn 0000:00:04.0/0000:4e:00.0 0x15b3 0x101d 0x020000 ""
# 0000:2a:00.2: a VF of mlx5_1 without a device (it is a VM's): not lost.
fn 0000:00:02.0/0000:2a:00.2 0x15b3 0x101e 0x020700 ""
ln -s ../0000:2a:00.0 "$R/devices/pci0000:00/0000:00:02.0/0000:2a:00.2/physfn"
# 0000:5f:00.0: a ConnectX passed to a VM (vfio-pci): not lost.
fn 0000:00:05.0/0000:5f:00.0 0x15b3 0x101d 0x020000 vfio-pci
# 0000:70:00.0: an Intel E810 without an RDMA device while another E810 has
# one: ice's RDMA (irdma) is switched per function (devlink enable_roce), so
# this is a NIC without RDMA, not lost.
fn 0000:00:06.0/0000:70:00.0 0x8086 0x159b 0x020000 ice
# 0000:81:00.0: an E810 with irdma: its RDMA device sits on the auxiliary
# device below the function, which is the function's.
fn 0000:00:07.0/0000:81:00.0 0x8086 0x159b 0x020000 ice
mkdir -p "$R/devices/pci0000:00/0000:00:07.0/0000:81:00.0/ice.roce.0"
rdma irdma0 pci0000:00/0000:00:07.0/0000:81:00.0/ice.roce.0 "100 Gb/sec (4X EDR)" ens81f0 100000
