# Multi-host tests: Linux network namespaces act as hosts (tests/mh_harness.h),
# shared memory inside a host, MOECCL_NET=ofi (MOECCL_OFI_PROVIDER=tcp) and
# MOECCL_NET=ucx (UCX_TLS=tcp) between hosts.  They need root and iproute2
# (`ip netns`); without them they skip (exit 77), and MH_REQUIRE=1 makes that
# a failure.  A variant whose transport is not in the build skips.  They take
# /run/moeccl-mh.lock, so parallel runs wait for each other, and use only
# 10.213.0.0/24 on a bridge of their own.  Knobs, all optional:
#   MH_SAME_HOSTID=1     every rank on one MOECCL_HOSTID: shared memory only
#                        (checks the harness without a network transport)
#   MH_VARIANTS=ofi      only these transports;  MH_HOSTS=2,4  host counts
#   MH_KEEP_GOING=1      go on after a failure;  MP_SUBTESTS=v,p2p / kill,cut
#   MP_DEADLINE_SCALE=3  stretch every deadline
# Clean-up by hand after a crash (the tests also do it at start):
#   tests/mh_cleanup.sh

MH_HARNESS_SOURCES = tests/mh_harness.c tests/mh_harness.h tests/mp_harness.c tests/mp_harness.h

MH_TESTS = tests/mh_correctness tests/mh_faults

check_PROGRAMS += $(MH_TESTS)
TESTS += $(MH_TESTS)
EXTRA_DIST += tests/mh_cleanup.sh

tests_mh_correctness_SOURCES = tests/mh_correctness.c $(MH_HARNESS_SOURCES)
tests_mh_correctness_LDADD = libmoeccl.la
tests_mh_faults_SOURCES = tests/mh_faults.c $(MH_HARNESS_SOURCES)
tests_mh_faults_LDADD = libmoeccl.la
