# Host reduction kernels (src/kernels/reduce.h) and their unit test.
libmoeccl_core_la_SOURCES += src/kernels/reduce.c src/kernels/reduce.h src/kernels/floatfmt.h

check_PROGRAMS += tests/test_reduce
TESTS += tests/test_reduce
tests_test_reduce_SOURCES = tests/test_reduce.c tests/unit_check.h
tests_test_reduce_LDADD = libmoeccl_core.la -lm
