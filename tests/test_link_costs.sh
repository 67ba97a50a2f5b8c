#!/bin/sh
# The tuner's link costs are what the transports report once started, with
# their own settings applied (transport.h: query): read back from
# MOECCL_TOPO_DUMP_FILE after 2 forked ranks of tests/mp_alltoall.  Shared
# memory's rendezvous threshold is its slot size as shm.c rounds it, also
# where no two ranks share a node; ofi's is its eager size; a network
# between simulated nodes of one machine is priced as its loopback (shared
# memory's bandwidth over 5); with MOECCL_SHM_DISABLE=1 the node class is
# the network's.  A network transport not in this build is skipped.
prog=./tests/mp_alltoall
fail=0
dump=links.$$
trap 'rm -f $dump out.$$' EXIT

costs() { # costs WHAT VAR=VALUE...: 2 ranks with these settings, dump in $dump
  what=$1
  shift
  rm -f $dump
  if ! env MP_VARIANTS=0 MOECCL_TOPO_DUMP_FILE=$dump "$@" $prog 2 >out.$$ 2>&1; then
    echo "FAIL: $what: $(tail -n 3 out.$$)"
    fail=1
  fi
}
want() { # want WHAT LINE: the dump has this line
  grep -qx "$2" $dump 2>/dev/null ||
    { echo "FAIL: $1: no '$2' in: $(grep '^link' $dump 2>/dev/null)"; fail=1; }
}
built() { [ -f ".libs/moeccl_net_$1.so" ]; }

costs "shm slot" MOECCL_SHM_EAGER_SIZE=1000
want "shm slot" "link node latency_us=1.5 overhead_us=0.3 bw_GBps=10 rndv_bytes=1024"

if built ofi; then
  costs "ofi eager" MP_RANKS_PER_NODE=1 MOECCL_NET=ofi MOECCL_NET_EAGER_SIZE=4096
  want "ofi eager" "link group latency_us=10 overhead_us=15 bw_GBps=2 rndv_bytes=4096"
  want "shm not started" "link node latency_us=1.5 overhead_us=0.3 bw_GBps=10 rndv_bytes=16384"
else
  echo "SKIP: ofi: not in this build"
fi

if built ucx; then
  costs "ucx as node" MOECCL_SHM_DISABLE=1 MOECCL_NET=ucx
  want "ucx as node" "link node latency_us=5 overhead_us=4.5 bw_GBps=1"
else
  echo "SKIP: ucx: not in this build"
fi

exit $fail
