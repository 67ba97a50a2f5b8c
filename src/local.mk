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
  src/tune/pricing.c src/tune/pricing.h src/tune/probe.c src/tune/probe.h \
  src/plan/plan.c src/plan/plan.h \
  src/exec/executor.c src/exec/executor.h src/exec/executor_int.h src/exec/local.c \
  src/exec/consume.c src/exec/wait.c src/exec/lower.c src/exec/terms.c \
  src/exec/enqueue.c src/exec/enqueue.h \
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
# Device kernels: the C twins and the launches are always built; nvcc,
# where configure found it, compiles kernels.cu into one fatbin (sm_80,
# sm_90 and compute_90 PTX for newer GPUs) that becomes a byte array in a
# generated C file, so libmoeccl carries its kernels and still links no
# CUDA library.  Without nvcc the array is empty (nofatbin.c).
libmoeccl_core_la_SOURCES += src/kernels/devkern.c src/kernels/devkern.h src/kernels/devmath.h \
  src/kernels/twins.c
EXTRA_DIST += src/kernels/kernels.cu src/kernels/nofatbin.c
if HAVE_NVCC
NVCC_GENCODE = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
nodist_libmoeccl_core_la_SOURCES = src/kernels/fatbin.c
BUILT_SOURCES = src/kernels/fatbin.c
CLEANFILES += src/kernels/fatbin.c src/kernels/kernels.fatbin
src/kernels/kernels.fatbin: $(srcdir)/src/kernels/kernels.cu $(srcdir)/src/kernels/devmath.h \
    $(srcdir)/src/kernels/floatfmt.h
	@$(MKDIR_P) src/kernels
	$(AM_V_GEN)$(NVCC) -fatbin $(NVCC_GENCODE) -I$(srcdir)/src -o $@ $(srcdir)/src/kernels/kernels.cu
src/kernels/fatbin.c: src/kernels/kernels.fatbin
	$(AM_V_GEN){ echo '/* Generated by src/local.mk from src/kernels/kernels.cu (nvcc). */'; \
	  echo '#include "kernels/devkern.h"'; \
	  echo '__attribute__((aligned(64))) const unsigned char moeccl_kernels_fatbin[] = {'; \
	  od -An -v -tx1 src/kernels/kernels.fatbin | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; \
	  echo 'const size_t moeccl_kernels_fatbin_bytes = sizeof moeccl_kernels_fatbin;'; \
	} >$@.tmp && mv $@.tmp $@
else
libmoeccl_core_la_SOURCES += src/kernels/nofatbin.c
endif
# Network transports, each behind its own conditional (see its .mk).
include src/transport/ofi/ofi.mk
include src/transport/ucx/ucx.mk
# Reduction kernels and the collectives' generators.
include src/kernels/reduce.mk
include src/algos/coll.mk
