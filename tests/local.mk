# Multi-process tests (fork-based harness, no MPI) and single-process API checks.
# Each program exits 0 (pass), 77 (skip) or 1 (fail); the harness in
# tests/mp_harness.c sets MOECCL_TIMEOUT=30 (times MP_DEADLINE_SCALE) unless the
# environment sets it, and
# puts a deadline on every run.  Knobs, all optional:
#   tests/mp_alltoall 2 4      rank counts (or MP_RANKS=2,4); no variants then
#   MP_SUBTESTS=stress,big     run only these parts of a test (names in its body())
#   MP_VARIANTS=0              skip the re-runs under other MOECCL_* settings
#   MP_DEADLINE_SCALE=3        stretch every deadline (slow machines, sanitizers)
#   MP_RANKS_PER_NODE=2        simulated nodes of 2 ranks each (MOECCL_HOSTID)

MP_HARNESS_SOURCES = tests/mp_harness.c tests/mp_harness.h

MP_TESTS = \
	tests/api_nompi \
	tests/mp_alltoall \
	tests/mp_alltoallv \
	tests/mp_sendrecv \
	tests/mp_split \
	tests/mp_hoststream \
	tests/mp_badargs \
	tests/mp_killpeer \
	tests/mp_shmleak \
	tests/mp_initfault \
	tests/mp_strays \
	tests/mp_device \
	tests/test_tune_device \
	tests/test_tune_probe

check_PROGRAMS += $(MP_TESTS)
TESTS += $(MP_TESTS)

tests_api_nompi_SOURCES = tests/api_nompi.c $(MP_HARNESS_SOURCES)
tests_api_nompi_LDADD = libmoeccl.la
tests_mp_alltoall_SOURCES = tests/mp_alltoall.c $(MP_HARNESS_SOURCES)
tests_mp_alltoall_LDADD = libmoeccl.la
tests_mp_alltoallv_SOURCES = tests/mp_alltoallv.c $(MP_HARNESS_SOURCES)
tests_mp_alltoallv_LDADD = libmoeccl.la
tests_mp_sendrecv_SOURCES = tests/mp_sendrecv.c $(MP_HARNESS_SOURCES)
tests_mp_sendrecv_LDADD = libmoeccl.la
tests_mp_split_SOURCES = tests/mp_split.c $(MP_HARNESS_SOURCES)
tests_mp_split_LDADD = libmoeccl.la
tests_mp_hoststream_SOURCES = tests/mp_hoststream.c $(MP_HARNESS_SOURCES)
tests_mp_hoststream_LDADD = libmoeccl.la
tests_mp_badargs_SOURCES = tests/mp_badargs.c $(MP_HARNESS_SOURCES)
tests_mp_badargs_LDADD = libmoeccl.la
tests_mp_strays_SOURCES = tests/mp_strays.c
tests_mp_strays_LDADD = libmoeccl.la -lpthread
tests_mp_killpeer_SOURCES = tests/mp_killpeer.c $(MP_HARNESS_SOURCES)
tests_mp_killpeer_LDADD = libmoeccl.la
tests_mp_shmleak_SOURCES = tests/mp_shmleak.c $(MP_HARNESS_SOURCES)
tests_mp_shmleak_LDADD = libmoeccl.la -lpthread
tests_mp_initfault_SOURCES = tests/mp_initfault.c $(MP_HARNESS_SOURCES)
tests_mp_initfault_LDADD = libmoeccl.la
# mp_device reaches device memory through the device seam (src/device/device.h).
tests_mp_device_SOURCES = tests/mp_device.c $(MP_HARNESS_SOURCES)
tests_mp_device_LDADD = libmoeccl_core.la
# test_tune_device: the tuner's device costs (file, view, prices, 2 ranks on the emulation).
tests_test_tune_device_SOURCES = tests/test_tune_device.c tests/unit_check.h $(MP_HARNESS_SOURCES)
tests_test_tune_device_LDADD = libmoeccl_core.la -lm
# test_tune_probe: the costs measured at creation (probe.h; 3 ranks on the emulation).
tests_test_tune_probe_SOURCES = tests/test_tune_probe.c tests/unit_check.h $(MP_HARNESS_SOURCES)
tests_test_tune_probe_LDADD = libmoeccl_core.la -lm
