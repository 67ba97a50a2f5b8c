# moe_perf: the MoE dispatch + combine against a host permute and
# MPI_Alltoall(v), on the harness of perf/local.mk; MPI is its baseline, so
# it is built only when configure found MPI.  moe_perf --device cuda
# (perf/moe_dev*.c) forks its ranks without MPI and reaches the device seam
# and the library's row kernels, as a2a_dev_perf does: it links the core.
if HAVE_MPI
bin_PROGRAMS += perf/moe_perf
perf_moe_perf_SOURCES = perf/moe_perf.c perf/moe_dev.c perf/moe_dev.h perf/moe_dev_base.c perf/dev_ranks.c \
  perf/dev_ranks.h \
  perf/moe_dev_int.h
perf_moe_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_moe_perf_LDADD = perf/libperf_common.la libmoeccl_core.la $(MPI_LIBS) -ldl -lm
endif
