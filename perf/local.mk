# perf/: benchmarks.  a2a_perf and the *_perf tools of perf/coll.mk compare
# moeccl with MPI in the same run, so they are built only when configure
# found MPI (which the library never links).  They share one harness,
# perf/libperf_common.la behind perf/perf_common.h (launch, flags, buffers,
# timing, checks, rooflines, the table and --json; the header names the file
# of each), as nccl-tests' tests share common.cu.
if HAVE_MPI
noinst_LTLIBRARIES += perf/libperf_common.la
perf_libperf_common_la_SOURCES = perf/perf_common.h perf/harness.c perf/harness_args.c \
  perf/harness_time.c perf/harness_check.c perf/roofline.c perf/report.c perf/coll_main.c \
  perf/perf_parse.c perf/perf_parse.h perf/perf_rand.c perf/perf_rand.h perf/perf_split.c \
  perf/perf_split.h
perf_libperf_common_la_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
PERF_LDADD = perf/libperf_common.la libmoeccl.la $(MPI_LIBS) -lm

bin_PROGRAMS += perf/a2a_perf
perf_a2a_perf_SOURCES = perf/alltoall_perf.c
perf_a2a_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_a2a_perf_LDADD = $(PERF_LDADD)
endif

# a2a_dev_perf: all-to-all(v) on device buffers next to NCCL (dlopen) and
# the device copy roofline; forked ranks, no MPI (GPU machines need not
# have it), so it is built always.  It reaches the device seam
# (src/device/device.h) for streams and copies, as tests/mp_device does.
bin_PROGRAMS += perf/a2a_dev_perf
perf_a2a_dev_perf_SOURCES = perf/dev_perf.c perf/dev_ranks.c perf/dev_ranks.h perf/perf_parse.c \
  perf/perf_parse.h
perf_a2a_dev_perf_LDADD = libmoeccl_core.la -ldl -lm

# a2a_sim prices the algorithms' schedules on modelled clusters: no MPI, no
# processes, so it is built always.  It shares the MPI-free parts of the
# harness: number parsing, seeded randomness and the uneven splits.
bin_PROGRAMS += perf/a2a_sim
perf_a2a_sim_SOURCES = perf/a2a_sim.c perf/a2a_sim_int.h perf/a2a_sim_opts.c \
  perf/a2a_sim_cluster.c perf/a2a_sim_split.c perf/perf_parse.c perf/perf_parse.h \
  perf/perf_rand.c perf/perf_rand.h perf/perf_split.c perf/perf_split.h
perf_a2a_sim_LDADD = libmoeccl_core.la -lm
