#!/usr/bin/env bash
# The main job: installs what is missing, builds moeccl in build/, and runs
# a2a_perf (moeccl against MPI, in the same run) under mpirun:
#   2 ranks, uniform all-to-all, 1 KiB to 64 MiB per rank
#   4 ranks (oversubscribed on small machines), Zipf-skewed all-to-allv
# Extra arguments go to both a2a_perf runs, e.g. scripts/bench.sh -M -d half
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
echo "==== a2a_perf: 2 ranks, uniform"
mpirun -np 2 --oversubscribe build/perf/a2a_perf "${sizes[@]}" "$@"
echo "==== a2a_perf: 4 ranks, zipf:1.1"
mpirun -np 4 --oversubscribe build/perf/a2a_perf "${sizes[@]}" --dist zipf:1.1 "$@"
