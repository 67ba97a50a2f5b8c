#!/bin/sh
# hwloc discovery (src/topo/topo_hw.c) on a made-up GPU node that hwloc reads
# from tests/data/topo-gpu-node.xml instead of this machine: GPUs by PCI class
# (the BMC display is not one), one NIC per PCI device whatever its OS
# devices, only RDMA NICs as rails, NUMA/package locality, and the PCI path
# class of each GPU-NIC pair.  Skips (77) when built without hwloc.
#
# The XML was written for this test, not captured from a real machine (and
# holds no comment: hwloc's built-in XML reader rejects them): 2 packages of
# 2 cores, each its own NUMA node.  Package 0's host bridge: a BMC display
# (ASPEED), an Ethernet port (eno1), and a root port to a PCIe switch with
# GPU 03:00.0, InfiniBand NIC 04:00.0 (mlx5_0) and GPU 05:00.0.  Package 1:
# one host bridge with a root port to NIC 81:00.0 (mlx5_1) and one to GPU
# 82:00.0, and a second host bridge with GPU 90:00.0.
srcdir=${srcdir:-.}
out=$(HWLOC_XMLFILE="$srcdir/tests/data/topo-gpu-node.xml" ./tests/test_topo --hw) || exit 1
summary=$(printf '%s\n' "$out" | sed -n 's/^summary //p')
case $summary in
  hwloc*) echo "SKIP: $summary"; exit 77 ;;
esac
expected='rails 2
summary 2 packages, 2 NUMA nodes, 4 cores, 4 PUs, 4 GPUs, 3 NICs (2 RDMA): eno1 (pci 0000:00:02.0, NUMA 0), mlx5_0/ibp4s0 (pci 0000:04:00.0, NUMA 0), mlx5_1/ibp129s0 (pci 0000:81:00.0, NUMA 1)
# hw cpu: 2 packages, 2 NUMA nodes, 4 cores, 4 PUs (allowed to this process)
# hw gpu 0: card1 pci 0000:03:00.0 [10de:2330 class 0302] link 31.5 GB/s NUMA 0 package 0
# hw gpu 1: (no OS device) pci 0000:05:00.0 [10de:2330 class 0302] link 31.5 GB/s NUMA 0 package 0
# hw gpu 2: card2 pci 0000:82:00.0 [10de:2330 class 0302] link 31.5 GB/s NUMA 1 package 1
# hw gpu 3: (no OS device) pci 0000:90:00.0 [10de:2330 class 0302] link 31.5 GB/s NUMA 1 package 1
# hw nic 0: eno1 pci 0000:00:02.0 [8086:1521 class 0200] link 2.0 GB/s NUMA 0 package 0
# hw nic 1: mlx5_0/ibp4s0 pci 0000:04:00.0 [15b3:1021 class 0207] link 31.5 GB/s NUMA 0 package 0 rdma
# hw nic 2: mlx5_1/ibp129s0 pci 0000:81:00.0 [15b3:1021 class 0207] link 31.5 GB/s NUMA 1 package 1 rdma
# hw gpu 0 to nic 0..2: PHB(4) PIX(3) SYS(6)
# hw gpu 1 to nic 0..2: PHB(4) PIX(3) SYS(6)
# hw gpu 2 to nic 0..2: SYS(3) SYS(6) PHB(3)
# hw gpu 3 to nic 0..2: SYS(2) SYS(5) NODE(3)'
got=$(printf '%s\n' "$out" | grep -v '^# hw host ')
if [ "$got" != "$expected" ]; then
  printf 'expected:\n%s\ngot:\n%s\n' "$expected" "$got"
  exit 1
fi
printf '%s\n' "$out"
