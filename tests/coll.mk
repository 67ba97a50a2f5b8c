# Conformance tests of the NCCL-style collectives (AllReduce, ReduceScatter,
# AllGather, Broadcast/Bcast, Reduce, Gather, Scatter, PreMulSum ops), on the
# fork-based harness of tests/local.mk; same knobs (MP_RANKS, MP_SUBTESTS,
# MP_VARIANTS=0, MP_DEADLINE_SCALE, MP_RANKS_PER_NODE).  mp_coll also reads
# MP_COLL_QUICK=1 (the reduced matrix its variants run).

COLL_TESTS = \
	tests/mp_coll \
	tests/mp_coll_badargs \
	tests/mp_coll_killpeer

check_PROGRAMS += $(COLL_TESTS)
TESTS += $(COLL_TESTS)

tests_mp_coll_SOURCES = tests/mp_coll.c $(MP_HARNESS_SOURCES)
tests_mp_coll_LDADD = libmoeccl.la
tests_mp_coll_badargs_SOURCES = tests/mp_coll_badargs.c $(MP_HARNESS_SOURCES)
tests_mp_coll_badargs_LDADD = libmoeccl.la
tests_mp_coll_killpeer_SOURCES = tests/mp_coll_killpeer.c $(MP_HARNESS_SOURCES)
tests_mp_coll_killpeer_LDADD = libmoeccl.la
