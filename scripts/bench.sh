#!/usr/bin/env bash
# The main job: installs what is missing, builds moeccl in build-bench/ (its
# own folder: scripts/test.sh configures build/ otherwise), and runs
# a2a_perf (moeccl against MPI on the same processes and buffers, in the same
# run) under mpirun, 1 KiB to 64 MiB per rank:
#   2 and 4 ranks (4 oversubscribe a 2-core machine), uniform all-to-all and
#   Zipf-skewed all-to-allv, buffers from moecclMemAlloc (-M: local peers map
#   them, so moeccl copies once with memcpy; MPI uses the same buffers);
#   then 2 ranks on plain malloc buffers, where both libraries copy once
#   with process_vm_readv;
# then all_reduce_perf (moecclAllReduce against MPI_Allreduce) at 2 and 4
# ranks, moecclMemAlloc buffers, float sum, 1 KiB to 64 MiB; then a short
# training demo: moe_train --plan on two ranks (the planner's pick of the
# layout, then the training), its loss every 20 steps.  moe_perf
# (MoE dispatch + combine against permute + MPI_Alltoall(v), 4 ranks) runs
# before the demo.
# Every run also writes its rows as JSON and, with scripts/plot_perf.py, a
# PNG of bus bandwidth against size (moeccl, MPI, the memory roofline) next
# to it, in $BENCH_OUT (default bench-results/, outside every build folder, so
# that no build script removes it), e.g. bench-results/a2a-np2-uniform.png.
# Extra arguments go to every a2a_perf run, e.g. scripts/bench.sh -d half
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh
bld=build-bench
./scripts/build.sh "$bld"

if [ ! -x "$bld/perf/a2a_perf" ]; then
  echo "bench.sh: $bld/perf/a2a_perf was not built (did configure find MPI? see $bld/config.log)" >&2
  exit 1
fi

# Open MPI refuses to start as root unless told that it is meant.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

out=${BENCH_OUT:-bench-results}
mkdir -p "$out"
# The Debian package installs matplotlib for the system interpreter, which
# need not be the python3 first on PATH.
plot_py=
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import matplotlib' 2>/dev/null; then
    plot_py=$py
    break
  fi
done
[ -n "$plot_py" ] || echo "bench.sh: no python3 with matplotlib; the JSON is written, the PNGs are not" >&2

failed=0
# run NAME NP TOOL ARGS...: one run, its JSON and PNG as $out/NAME.{json,png}.
run() {
  local name=$1 np=$2 tool=$3
  shift 3
  local json="$out/$name.json"
  if ! mpirun -np "$np" --oversubscribe "$bld/perf/$tool" "$@" --json "$json"; then
    echo "bench.sh: $tool ($name) FAILED" >&2
    failed=1
  fi
  if [ -n "$plot_py" ] && [ -s "$json" ]; then
    echo "==== plot: $("$plot_py" scripts/plot_perf.py "$json")"
  fi
}

sizes=(-b 1K -e 64M -f 4)
for np in 2 4; do
  for dist in uniform zipf:1.1; do
    echo "==== a2a_perf: $np ranks, $dist, moecclMemAlloc buffers"
    run "a2a-np$np-${dist%%:*}" "$np" a2a_perf "${sizes[@]}" --dist "$dist" -M "$@"
  done
done
echo "==== a2a_perf: 2 ranks, uniform, malloc buffers"
run a2a-np2-uniform-malloc 2 a2a_perf "${sizes[@]}" "$@"

if [ -x $bld/perf/all_reduce_perf ]; then
  for np in 2 4; do
    echo "==== all_reduce_perf: $np ranks, float sum, moecclMemAlloc buffers"
    run "allreduce-np$np" "$np" all_reduce_perf "${sizes[@]}" -d float -o sum -M
  done
else
  echo "bench.sh: $bld/perf/all_reduce_perf was not built; skipped" >&2
fi

# The MoE layer's communication: moeccl's dispatch and combine against a
# host permute + MPI_Alltoall(v), T = 4096 tokens per rank, H = 1024, E = 16.
if [ -x $bld/perf/moe_perf ]; then
  echo "==== moe_perf: 4 ranks, MoE dispatch + combine vs permute + MPI_Alltoall(v), moecclMemAlloc buffers"
  if ! mpirun -np 4 --oversubscribe $bld/perf/moe_perf -M -k 2,6 --json "$out/moe_perf.json"; then
    echo "bench.sh: moe_perf FAILED" >&2
    failed=1
  fi
else
  echo "bench.sh: $bld/perf/moe_perf was not built; skipped" >&2
fi

# The training demo: the planner picks the layout of the demo model on two
# ranks of this machine (moe_train --plan: the ranking, the winner and why),
# then moe_train trains with it (about a minute here); every 20th step's loss
# is shown, and the last step's pipeline ops are drawn per stage.
if [ -x $bld/moe/moe_train ]; then
  echo "==== moe_train --plan: 2 ranks, L=4 E=16 K=2 H=128 F=256, 1,024 tokens, 200 steps, lr 0.001 (the planner's pick, then the loss falling)"
  if ! $bld/moe/moe_train -n 2 --plan --layers 4 --experts 16 --topk 2 --hidden 128 --ffn 256 \
      --tokens 1024 --steps 200 --lr 0.001 --json "$out/moe_train.json" \
      --timeline "$out/moe_timeline.json" |
      awk '/^#/ || $1 == 1 || $1 % 20 == 0'; then
    echo "bench.sh: moe_train FAILED" >&2
    failed=1
  elif [ -n "$plot_py" ] && [ -s "$out/moe_timeline.json" ]; then
    "$plot_py" scripts/pp_timeline.py "$out/moe_timeline.json" -o "$out/moe_timeline.png" &&
      echo "==== plot: $out/moe_timeline.png"
  fi
else
  echo "bench.sh: $bld/moe/moe_train was not built (no OpenBLAS?); the training demo is skipped" >&2
fi
echo "==== JSON and PNG of every run: $out/"
exit "$failed"
