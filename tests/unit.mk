# Unit tests: no processes, no network; they link the library's internals.
UNIT_TESTS = tests/test_sched
check_PROGRAMS += $(UNIT_TESTS)
TESTS += $(UNIT_TESTS)
tests_test_sched_SOURCES = tests/test_sched.c
tests_test_sched_LDADD = libmoeccl_core.la

check_PROGRAMS += tests/test_param
TESTS += tests/test_param
tests_test_param_SOURCES = tests/test_param.c tests/unit_check.h
tests_test_param_LDADD = libmoeccl_core.la

check_PROGRAMS += tests/test_topo
TESTS += tests/test_topo
tests_test_topo_SOURCES = tests/test_topo.c tests/unit_check.h
tests_test_topo_LDADD = libmoeccl_core.la

# The same binary's hwloc part on a made-up GPU node (hwloc XML).
TESTS += tests/test_topo_hw.sh
EXTRA_DIST += tests/test_topo_hw.sh tests/data/topo-gpu-node.xml

# The simulator API (include/moeccl_sim.h) against a2a_sim's numbers, and
# its refusals; one single-rank communicator in the process.
check_PROGRAMS += tests/test_sim
TESTS += tests/test_sim
tests_test_sim_SOURCES = tests/test_sim.c tests/unit_check.h
tests_test_sim_LDADD = libmoeccl_core.la -lm

check_PROGRAMS += tests/test_model
TESTS += tests/test_model
tests_test_model_SOURCES = tests/test_model.c tests/unit_check.h
tests_test_model_LDADD = libmoeccl_core.la -lm

# The layering of src/ (scripts/layers.py, over the objects just built).
TESTS += tests/test_layers.sh
EXTRA_DIST += tests/test_layers.sh scripts/layers.py

# perf/a2a_sim end to end (it is built always).
TESTS += tests/test_a2a_sim.sh tests/test_dev_perf.sh tests/test_gpu_check.sh
EXTRA_DIST += tests/test_a2a_sim.sh tests/test_dev_perf.sh tests/test_gpu_check.sh tests/perf_env.sh

# The tuner's link costs as the transports report them (tests/mp_alltoall).
TESTS += tests/test_link_costs.sh
EXTRA_DIST += tests/test_link_costs.sh

# PyTorch's torch.distributed, unchanged: gloo on CPU tensors everywhere torch
# is, the NCCL backend on the drop-in (shim/.libs/libnccl.so.2, preloaded)
# where torch sees a GPU; skips without torch.
TESTS += tests/test_torch_dropin.sh
EXTRA_DIST += tests/test_torch_dropin.sh tests/test_torch_dropin.py

# The device seam's host emulation (src/device/emu.c), across processes.
check_PROGRAMS += tests/test_device
TESTS += tests/test_device
tests_test_device_SOURCES = tests/test_device.c tests/unit_check.h
tests_test_device_LDADD = libmoeccl_core.la

# SHA-256 and the secrets public names derive from.
check_PROGRAMS += tests/test_secret
TESTS += tests/test_secret
tests_test_secret_SOURCES = tests/test_secret.c tests/unit_check.h
tests_test_secret_LDADD = libmoeccl_core.la

# A joining rank believes only a root that proves the id's secret: a fake
# root's table, 'rank missing' and replayed answers are refused.
check_PROGRAMS += tests/test_boot_reply
TESTS += tests/test_boot_reply
tests_test_boot_reply_SOURCES = tests/test_boot_reply.c tests/unit_check.h
tests_test_boot_reply_LDADD = libmoeccl_core.la

# UCX is loaded only for a network peer and leaves the program's signal
# handlers alone (src/transport/ucx_load.c); 2 forked ranks, skips without UCX.
# It shares its handlers, checks and main with test_net_lazy (lazy_harness.c).
LAZY_HARNESS_SOURCES = tests/lazy_harness.c tests/lazy_harness.h $(MP_HARNESS_SOURCES)
check_PROGRAMS += tests/test_ucx_lazy
TESTS += tests/test_ucx_lazy
tests_test_ucx_lazy_SOURCES = tests/test_ucx_lazy.c $(LAZY_HARNESS_SOURCES)
tests_test_ucx_lazy_LDADD = libmoeccl.la

# No network library is loaded (libfabric's libinfinipath installs a SIGSEGV
# handler) before a communicator needs the network (src/transport/
# ofi_load.c, net_load.c); 2 forked ranks, the ofi parts skip without
# libfabric.
check_PROGRAMS += tests/test_net_lazy
TESTS += tests/test_net_lazy
tests_test_net_lazy_SOURCES = tests/test_net_lazy.c $(LAZY_HARNESS_SOURCES)
tests_test_net_lazy_LDADD = libmoeccl.la

# The device kernels (src/kernels/kernels.cu) against the host tables: their
# C twins on the emulation, the CUDA kernels with MOECCL_DEVICE=cuda.
check_PROGRAMS += tests/test_dev_kernels
TESTS += tests/test_dev_kernels
tests_test_dev_kernels_SOURCES = tests/test_dev_kernels.c tests/unit_check.h
tests_test_dev_kernels_LDADD = libmoeccl_core.la
