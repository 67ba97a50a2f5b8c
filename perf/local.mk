# perf/: benchmarks.  a2a_perf compares moeccl with MPI in the same run, so
# it is built only when configure found MPI (which the library never links).
if HAVE_MPI
bin_PROGRAMS += perf/a2a_perf
perf_a2a_perf_SOURCES = perf/a2a_perf.c
perf_a2a_perf_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
perf_a2a_perf_LDADD = libmoeccl.la $(MPI_LIBS) -lm
endif

# a2a_sim prices the algorithms' schedules on modelled clusters: no MPI, no
# processes, so it is built always.
bin_PROGRAMS += perf/a2a_sim
perf_a2a_sim_SOURCES = perf/a2a_sim.c
perf_a2a_sim_LDADD = libmoeccl_core.la -lm
