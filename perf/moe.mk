# moe_perf: the MoE dispatch + combine against a host permute and
# MPI_Alltoall(v), on the harness of perf/local.mk; MPI is its baseline, so
# it is built only when configure found MPI.
if HAVE_MPI
bin_PROGRAMS += perf/moe_perf
perf_moe_perf_SOURCES = perf/moe_perf.c
perf_moe_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_moe_perf_LDADD = $(PERF_LDADD)
endif
