# The NCCL drop-in, libnccl.so.2 (shim/nccl_shim.c): installed apart, in
# $(pkglibdir), so that only a process whose library path asks for it loads
# it; it links the public libmoeccl only.
pkglib_LTLIBRARIES = shim/libnccl.la
shim_libnccl_la_SOURCES = shim/nccl_shim.c shim/nccl_abi.h
shim_libnccl_la_CFLAGS = $(AM_CFLAGS) -fvisibility=hidden
shim_libnccl_la_LIBADD = libmoeccl.la
shim_libnccl_la_LDFLAGS = -version-info 2:0:0 -no-undefined -Wl,--no-undefined

# Its behaviour on host memory (2 forked ranks), and its ABI against NCCL's
# own nccl.h where that is installed.
check_PROGRAMS += tests/test_nccl_shim
TESTS += tests/test_nccl_shim tests/test_nccl_abi.sh
tests_test_nccl_shim_SOURCES = tests/test_nccl_shim.c tests/unit_check.h
tests_test_nccl_shim_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/shim -I$(top_srcdir)/tests
tests_test_nccl_shim_LDADD = shim/libnccl.la
EXTRA_DIST += tests/test_nccl_abi.sh
# the ABI test compiles with the build's compiler and flags (sanitizers too)
AM_TESTS_ENVIRONMENT = CC='$(CC)' CFLAGS='$(CFLAGS)' LDFLAGS='$(LDFLAGS)'; export CC CFLAGS LDFLAGS;
