# The collectives' generators (src/algos/coll_*.c) and their symbolic checker.
libmoeccl_core_la_SOURCES += src/algos/coll_algos.c src/algos/coll_algos.h src/algos/coll_util.h \
  src/algos/coll_ring.c src/algos/coll_rhd.c src/algos/coll_rd.c src/algos/coll_tree.c \
  src/algos/coll_direct.c src/algos/coll_hier.c

check_PROGRAMS += tests/test_coll_sched
TESTS += tests/test_coll_sched
tests_test_coll_sched_SOURCES = tests/test_coll_sched.c
tests_test_coll_sched_LDADD = libmoeccl_core.la -lm
