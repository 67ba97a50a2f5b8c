# The nccl-tests-shaped tools of the collectives beyond all-to-all: each is
# a page on the harness of perf/local.mk (perf/perf_common.h), built only
# with MPI, which is their baseline.
if HAVE_MPI
bin_PROGRAMS += perf/all_reduce_perf perf/reduce_scatter_perf perf/all_gather_perf \
  perf/broadcast_perf perf/reduce_perf perf/gather_perf perf/scatter_perf

perf_all_reduce_perf_SOURCES = perf/all_reduce_perf.c
perf_all_reduce_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_all_reduce_perf_LDADD = $(PERF_LDADD)
perf_reduce_scatter_perf_SOURCES = perf/reduce_scatter_perf.c
perf_reduce_scatter_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_reduce_scatter_perf_LDADD = $(PERF_LDADD)
perf_all_gather_perf_SOURCES = perf/all_gather_perf.c
perf_all_gather_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_all_gather_perf_LDADD = $(PERF_LDADD)
perf_broadcast_perf_SOURCES = perf/broadcast_perf.c
perf_broadcast_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_broadcast_perf_LDADD = $(PERF_LDADD)
perf_reduce_perf_SOURCES = perf/reduce_perf.c
perf_reduce_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_reduce_perf_LDADD = $(PERF_LDADD)
perf_gather_perf_SOURCES = perf/gather_perf.c
perf_gather_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_gather_perf_LDADD = $(PERF_LDADD)
perf_scatter_perf_SOURCES = perf/scatter_perf.c
perf_scatter_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_scatter_perf_LDADD = $(PERF_LDADD)
endif
