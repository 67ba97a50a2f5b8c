# All sources build a convenience library; libmoeccl.la exports only the API
# from it, and unit tests link the convenience library to reach internals.
noinst_LTLIBRARIES += libmoeccl_core.la
lib_LTLIBRARIES += libmoeccl.la
# By layer, from the bottom up (docs/ARCHITECTURE.md): base services, the
# device seam, local kernels, topology, the communicator, transports, the
# schedule data, algorithms, tuning, planning, execution, entry points.
libmoeccl_core_la_SOURCES = \
  src/base/debug.c src/base/debug.h src/base/param.c src/base/param.h \
  src/base/result.c src/base/result.h src/base/host.c src/base/host.h \
  src/base/socket.c src/base/socket.h src/base/sha256.c src/base/sha256.h \
  src/base/check.h src/base/futex.h src/base/grow.h src/base/queue.c src/base/queue.h \
  src/device/device.c src/device/device.h src/device/emu.c \
  src/kernels/copy.c src/kernels/copy.h src/kernels/mem.c src/kernels/mem.h \
  src/kernels/rows.c src/kernels/rows.h \
  src/topo/topo.c src/topo/topo.h \
  src/topo/topo_env.c src/topo/topo_file.c src/topo/topo_hw.c src/topo/topo_presets.c \
  src/comm/comm.h src/comm/error.c src/comm/peer_lost.c src/comm/peers.c src/comm/secret.c src/comm/span.c src/comm/span.h \
  src/comm/memreg.c src/comm/memreg.h \
  src/comm/bootstrap.c src/comm/bootstrap.h src/comm/bootstrap_int.h \
  src/comm/bootstrap_ring.c src/comm/bootstrap_live.c src/comm/bootstrap_auth.c \
  src/transport/transport.c src/transport/transport.h src/transport/shm/shm_int.h \
  src/transport/shm/setup.c src/transport/shm/shm.c src/transport/shm/large.c \
  src/transport/shm/device.c src/transport/ipc/ipc_int.h src/transport/ipc/ipc.c \
  src/transport/ipc/setup.c src/transport/ipc/maps.c src/transport/ipc/watch.c \
  src/transport/ipc/lower.c \
  src/sched/schedule.c src/sched/schedule.h \
  src/algos/algos.c src/algos/algos.h src/algos/alltoall_util.c src/algos/meta.c \
  src/algos/alltoall_direct.c src/algos/alltoall_pairwise.c src/algos/alltoall_bruck.c \
  src/algos/alltoall_hier2.c src/algos/alltoall_hier3.c src/algos/alltoall_rail.c \
  src/algos/relay.c src/algos/relay.h src/algos/pipeline.c src/algos/pipeline.h \
  src/algos/moe_algos.h src/algos/moe_dispatch.c \
  src/tune/cost_model.c src/tune/cost_model.h src/tune/tuner.c src/tune/tuner.h src/tune/forced.c \
  src/tune/pricing.c src/tune/pricing.h \
  src/plan/plan.c src/plan/plan.h \
  src/exec/executor.c src/exec/executor.h src/exec/executor_int.h src/exec/local.c \
  src/exec/consume.c src/exec/wait.c src/exec/lower.c src/exec/enqueue.c src/exec/enqueue.h \
  src/exec/stream.h src/exec/stream.c src/exec/hoststream.c src/exec/devstream.c \
  src/api/communicator.c src/api/alltoall.c src/api/collectives.c src/api/memalloc.c \
  src/api/moe.c src/api/moe_int.h src/api/moe_layout.c src/api/moe_hier.c src/api/moe_common.c \
  src/api/sim.c src/api/sim_int.h src/api/sim_price.c
libmoeccl_core_la_CPPFLAGS = $(AM_CPPFLAGS) -include $(top_builddir)/config.h
libmoeccl_core_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
libmoeccl_la_SOURCES = include/moeccl.h
libmoeccl_la_LIBADD = libmoeccl_core.la
libmoeccl_la_LDFLAGS = -version-info 0:0:0 -export-symbols-regex '^moeccl[A-Z]'

# Optional libraries append themselves here: hwloc below, the network
# transports in their .mk.
libmoeccl_core_la_LIBADD =
# hwloc describes the host in src/topo/topo_hw.c; without it the topology
# still builds from node ids and files.
if HAVE_HWLOC
libmoeccl_core_la_CPPFLAGS += $(hwloc_CPPFLAGS)
libmoeccl_core_la_LIBADD += $(hwloc_LDFLAGS) $(hwloc_LIBS)
endif
# The CUDA backend of the device seam: only cuda.h at build time; the
# driver is loaded with dlopen at run time (no CUDA library is linked).
if HAVE_CUDA
libmoeccl_core_la_SOURCES += src/device/cuda.c
libmoeccl_core_la_CPPFLAGS += $(cuda_CPPFLAGS)
endif
libmoeccl_core_la_LIBADD += -ldl
# Network transports, each behind its own conditional (see its .mk).
include src/transport/ofi/ofi.mk
include src/transport/ucx/ucx.mk
# Reduction kernels and the collectives' generators.
include src/kernels/reduce.mk
include src/algos/coll.mk
