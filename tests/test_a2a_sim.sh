#!/bin/sh
# perf/a2a_sim end to end on small clusters: every algorithm priced at every
# size, the best of each size marked once, the options that change the
# cluster (presets, shape, cost overrides, --topo, --costs), uneven splits,
# JSON output, and the command-line errors it must refuse.
srcdir=${srcdir:-.}
sim=./perf/a2a_sim
fail=0
check() { # check WHAT COMMAND...: the command must exit 0
  what=$1
  shift
  if ! "$@" >out.$$ 2>err.$$; then
    echo "FAIL: $what: exit status $?: $(cat err.$$)"
    fail=1
  fi
}
refuse() { # refuse WHAT COMMAND...: the command must exit 2
  what=$1
  shift
  "$@" >/dev/null 2>&1
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: $what: exit status $rc, want 2"; fail=1; }
}
rows() { grep -c '^ ' out.$$; }

# 3 sizes x 9 algorithms, one best per size.
check "small dragonfly" $sim --nodes 8 --ppn 4 --group 2 --rails 4 -b 64 -e 4K -f 8
[ "$(rows)" -eq 27 ] || { echo "FAIL: small dragonfly: $(rows) rows, want 27"; fail=1; }
[ "$(grep -c '^ .*\*' out.$$)" -eq 3 ] || { echo "FAIL: one best per size"; fail=1; }
grep -q '^#  peer' out.$$ || { echo "FAIL: no best-per-size summary"; fail=1; }

# hier3 needs groups: with one group it runs direct's plan and says so.
check "one group" $sim --nodes 4 --ppn 2 --group 0 -b 8 -e 8 -a hier3
grep -q 'hier3(direct)' out.$$ || { echo "FAIL: hier3 on one group not marked (direct)"; fail=1; }

# Cost overrides reach the model: a 10x slower global link, 10x the time
# of direct at a large size.
check "fast global" $sim --nodes 8 --ppn 1 --group 2 --window 0 -b 1M -e 1M -a direct \
  --link global:bw_GBps=10,latency_us=0,overhead_us=0 --link group:bw_GBps=10 --link node:bw_GBps=10
fast=$(awk '/^ /{print $4}' out.$$)
check "slow global" $sim --nodes 8 --ppn 1 --group 2 --window 0 -b 1M -e 1M -a direct \
  --link global:bw_GBps=1,latency_us=0,overhead_us=0 --link group:bw_GBps=10 --link node:bw_GBps=10
slow=$(awk '/^ /{print $4}' out.$$)
awk -v f="$fast" -v s="$slow" 'BEGIN { exit !(s > 9.9 * f && s < 10.1 * f) }' ||
  { echo "FAIL: global bandwidth override: $fast us -> $slow us"; fail=1; }

# Topology and cost files.
check "--topo" $sim --topo "$srcdir/examples/topo/2nodes-x-2.topo" -b 8 -e 8
grep -q '4 ranks = 2 nodes x 2' out.$$ || { echo "FAIL: --topo shape: $(sed -n 2p out.$$)"; fail=1; }
check "--costs" $sim --nodes 2 --ppn 2 --costs "$srcdir/examples/topo/dragonfly-4096.topo" -b 8 -e 8
grep -q 'link global latency_us=3.5 overhead_us=1 bw_GBps=11.25' out.$$ ||
  { echo "FAIL: --costs not applied"; fail=1; }
# --device: the node link and copies from a device line (moeccl-tuning(7)).
printf 'device hbm_GBps=2000 link_GBps=100 copy_us=2 launch_us=1\n' >dev.$$
check "--device" $sim --nodes 2 --ppn 2 --costs dev.$$ --device -b 8 -e 8
grep -q 'link node   latency_us=1 overhead_us=1 bw_GBps=100 ' out.$$ &&
  grep -q 'copy        overhead_us=2 bw_GBps=1000' out.$$ &&
  grep -q 'device buffers (costs from the file)' out.$$ ||
  { echo "FAIL: --device: $(grep '^# \(link node\|copy\|device\)' out.$$)"; fail=1; }
rm -f dev.$$

# Uneven splits, every rank priced, JSON.
check "moe" $sim --nodes 4 --ppn 4 --group 2 --dist moe:16,2 --all-ranks -b 256 -e 1K -f 4 \
  --json sim.$$.json
[ "$(grep -c '"algo"' sim.$$.json)" -eq 18 ] || { echo "FAIL: JSON rows"; fail=1; }
grep -q '"dist": "moe:16,2"' sim.$$.json || { echo "FAIL: JSON dist"; fail=1; }
check "zipf per rank" $sim --nodes 3 --ppn 3 --dist zipf:1.1 --per-rank -b 1K -e 1M -f 32 -a direct,pairwise

refuse "unknown preset" $sim --preset torus
refuse "unknown algorithm" $sim -a fastest
refuse "bad link class" $sim --link spine:bw_GBps=1
refuse "zero bandwidth" $sim --link node:bw_GBps=0
refuse "--topo with a shape" $sim --topo "$srcdir/examples/topo/2nodes-x-2.topo" --nodes 4
refuse "ranks not a multiple" $sim --ppn 8 --ranks 12
refuse "min > max" $sim -b 2K -e 1K
refuse "uneven above the limit" $sim --ranks 8192 --ppn 8 --dist zipf:1

rm -f out.$$ err.$$ sim.$$.json
[ $fail -eq 0 ] && echo "test_a2a_sim: OK"
exit $fail
