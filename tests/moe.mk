# Multi-process tests of the MoE dispatch and combine (include/moeccl_moe.h),
# on the fork-based harness of tests/local.mk; same knobs (MP_RANKS,
# MP_SUBTESTS, MP_VARIANTS=0, MP_DEADLINE_SCALE, MP_RANKS_PER_NODE).

MOE_TESTS = tests/mp_moe

check_PROGRAMS += $(MOE_TESTS)
TESTS += $(MOE_TESTS)

tests_mp_moe_SOURCES = tests/mp_moe.c $(MP_HARNESS_SOURCES)
tests_mp_moe_LDADD = libmoeccl.la

# The generators and row kernels without processes.
check_PROGRAMS += tests/test_moe_sched
TESTS += tests/test_moe_sched
tests_test_moe_sched_SOURCES = tests/test_moe_sched.c tests/unit_check.h
tests_test_moe_sched_LDADD = libmoeccl_core.la -lm

# moe_perf --device cuda on the device emulation: both sides checked, the
# NCCL baseline's refusal, bad command lines (skips where moe_perf was not
# built: it needs MPI).
TESTS += tests/test_moe_dev_perf.sh
EXTRA_DIST += tests/test_moe_dev_perf.sh
