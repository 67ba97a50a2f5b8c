#!/usr/bin/env bash
# The main job: installs what is missing, builds moeccl in build/, and runs
# a2a_perf (moeccl against MPI on the same processes and buffers, in the same
# run) under mpirun, 1 KiB to 64 MiB per rank:
#   2 and 4 ranks (4 oversubscribe a 2-core machine), uniform all-to-all and
#   Zipf-skewed all-to-allv, buffers from moecclMemAlloc (-M: local peers map
#   them, so moeccl copies once with memcpy; MPI uses the same buffers);
#   then 2 ranks on plain malloc buffers, where both libraries copy once
#   with process_vm_readv.
# Extra arguments go to every a2a_perf run, e.g. scripts/bench.sh -d half
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

./scripts/install-deps.sh
./scripts/build.sh build

if [ ! -x build/perf/a2a_perf ]; then
  echo "bench.sh: build/perf/a2a_perf was not built (did configure find MPI? see build/config.log)" >&2
  exit 1
fi

# Open MPI refuses to start as root unless told that it is meant.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

sizes=(-b 1K -e 64M -f 4)
for np in 2 4; do
  for dist in uniform zipf:1.1; do
    echo "==== a2a_perf: $np ranks, $dist, moecclMemAlloc buffers"
    mpirun -np "$np" --oversubscribe build/perf/a2a_perf "${sizes[@]}" --dist "$dist" -M "$@"
  done
done
echo "==== a2a_perf: 2 ranks, uniform, malloc buffers"
mpirun -np 2 --oversubscribe build/perf/a2a_perf "${sizes[@]}" "$@"
