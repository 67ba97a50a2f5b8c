# moe/: the MoE model (router, SwiGLU experts, loss, backward, Adam, .npy
# I/O) on a compute backend table, and the moe_train driver.  It uses only
# moeccl's public headers (its CPPFLAGS leave out src/), and builds only
# when configure found OpenBLAS.
EXTRA_DIST += moe/README.md scripts/moe_ref.py tests/test_moe_ref.sh tests/test_moe_train.sh \
	tests/test_moe_public.sh tests/test_moe_layout.sh scripts/pp_timeline.py \
	tests/test_moe_pipe.sh tests/test_moe_plan.sh scripts/plan_calibrate.py \
	tests/test_moe_device.sh tests/moe_env.sh
# That rule, checked on the sources (with or without OpenBLAS).
TESTS += tests/test_moe_public.sh
if HAVE_OPENBLAS
MOE_CPPFLAGS = -I$(top_srcdir)/include -I$(top_srcdir)/moe

noinst_LTLIBRARIES += moe/libmoe.la
moe_libmoe_la_SOURCES = moe/model.c moe/model.h moe/experts.c moe/adam.c moe/adam.h moe/npy.c moe/npy.h \
	moe/backend.h moe/backend_blas.c moe/pp_sched.c moe/pp_sched.h moe/pp_sched_sim.c \
	moe/pp_sched_int.h moe/placement.c moe/placement.h moe/plan.c moe/plan.h moe/plan_probe.c
moe_libmoe_la_CPPFLAGS = $(MOE_CPPFLAGS) $(OPENBLAS_CFLAGS)
moe_libmoe_la_LIBADD = $(OPENBLAS_LIBS) -lm -ldl
# The CUDA backend: its kernels (moe/kernels.cu) built by nvcc into one
# fatbin (sm_80, sm_90, and PTX for newer) embedded as a byte array, loaded
# at run time with libcuda (dlopen: no link-time CUDA dependency); without
# nvcc the array is empty and only the backend's host stand-in runs.
moe_libmoe_la_SOURCES += moe/kern_math.h moe/cuda_api.h moe/backend_cuda.c moe/cuda_standin.c \
	moe/cuda_real.c
EXTRA_DIST += moe/kernels.cu moe/kernels_nofatbin.c
if HAVE_NVCC
MOE_NVCC_ARCH = -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	-gencode arch=compute_90,code=compute_90
nodist_moe_libmoe_la_SOURCES = moe/kernels_fatbin.c
CLEANFILES += moe/kernels.fatbin moe/kernels_fatbin.c
moe/kernels.fatbin: moe/kernels.cu moe/kern_math.h moe/cuda_api.h
	@$(MKDIR_P) moe
	$(AM_V_GEN)$(NVCC) -fatbin -fmad=false -I$(top_srcdir)/moe $(MOE_NVCC_ARCH) -o $@ \
		$(top_srcdir)/moe/kernels.cu
moe/kernels_fatbin.c: moe/kernels.fatbin
	$(AM_V_GEN){ echo '/* Generated from moe/kernels.cu by nvcc (moe/local.mk). */'; \
	  echo '#include <stddef.h>'; \
	  echo 'const unsigned char moe_kernels_fatbin[] __attribute__((aligned(8))) = {'; \
	  od -An -v -tx1 moe/kernels.fatbin | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; \
	  echo 'const size_t moe_kernels_fatbin_len = sizeof(moe_kernels_fatbin);'; } >$@.tmp && \
	  mv $@.tmp $@
else
moe_libmoe_la_SOURCES += moe/kernels_nofatbin.c
endif

bin_PROGRAMS += moe/moe_train
moe_moe_train_SOURCES = moe/moe_train.c moe/train_options.c moe/train_options.h \
	moe/train_loop.c moe/train_loop.h moe/train_layer.c moe/train_layer.h \
	moe/train_experts.c moe/train_experts.h \
	moe/train_dist.c moe/train_dist.h moe/train_io.c moe/train_io.h \
	moe/train_pipe.c moe/train_pipe.h moe/train_place.c moe/train_place.h \
	moe/train_plan.c moe/train_plan.h
moe_moe_train_CPPFLAGS = $(MOE_CPPFLAGS)
moe_moe_train_LDADD = moe/libmoe.la libmoeccl.la
# The planner on a modelled cluster (moeccl_sim.h): ranks the layouts.
bin_PROGRAMS += moe/moe_plan
moe_moe_plan_SOURCES = moe/moe_plan.c
moe_moe_plan_CPPFLAGS = $(MOE_CPPFLAGS)
moe_moe_plan_LDADD = moe/libmoe.la libmoeccl.la -lm
# With MPI, moe_train also runs under mpirun (MPI launches the ranks and
# carries the unique id, nothing else); without, only -n R (forked ranks).
if HAVE_MPI
moe_moe_train_CPPFLAGS += -DMOE_TRAIN_MPI
moe_moe_train_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
moe_moe_train_LDADD += $(MPI_LIBS)
endif

# Gradients against float64 finite differences; .npy and Adam; the expert
# placements; the first step against an independent NumPy implementation
# (skips without numpy); the synthetic training run with the defaults; the
# CUDA backend op by op against the host one (its stand-in; a GPU if found).
check_PROGRAMS += tests/test_moe_grad tests/test_moe_io tests/test_placement \
	tests/test_moe_backend
TESTS += tests/test_moe_grad tests/test_moe_io tests/test_placement tests/test_moe_ref.sh \
	tests/test_moe_train.sh tests/test_moe_backend
tests_test_moe_backend_SOURCES = tests/test_moe_backend.c tests/unit_check.h
tests_test_moe_backend_CPPFLAGS = $(MOE_CPPFLAGS)
tests_test_moe_backend_LDADD = moe/libmoe.la -lm
tests_test_moe_grad_SOURCES = tests/test_moe_grad.c tests/unit_check.h
tests_test_moe_grad_CPPFLAGS = $(MOE_CPPFLAGS)
tests_test_moe_grad_LDADD = moe/libmoe.la -lm
tests_test_moe_io_SOURCES = tests/test_moe_io.c tests/unit_check.h
tests_test_moe_io_CPPFLAGS = $(MOE_CPPFLAGS)
tests_test_moe_io_LDADD = moe/libmoe.la -lm
tests_test_placement_SOURCES = tests/test_placement.c tests/unit_check.h
tests_test_placement_CPPFLAGS = $(MOE_CPPFLAGS)
tests_test_placement_LDADD = moe/libmoe.la -lm

# The placement's messages (moe/train_place.c) on forked ranks in EP x DP
# layouts: gradient sums against grad_allreduce and over replicas, and the
# migration of weights and Adam moments.
check_PROGRAMS += tests/mp_place
TESTS += tests/mp_place
tests_mp_place_SOURCES = tests/mp_place.c $(MP_HARNESS_SOURCES) moe/train_place.c \
	moe/train_place.h moe/train_dist.c moe/train_dist.h
tests_mp_place_CPPFLAGS = $(MOE_CPPFLAGS)
tests_mp_place_LDADD = moe/libmoe.la libmoeccl.la -lm

# Pipeline schedules (GPipe, 1F1B, interleaved, ZB-H1) as data: every one
# for S <= 8, M <= 32 checked (rendezvous run, FIFO matching, peaks) and
# simulated against its bubble formula; broken ones caught.
check_PROGRAMS += tests/test_pp_sched
TESTS += tests/test_pp_sched
tests_test_pp_sched_SOURCES = tests/test_pp_sched.c tests/unit_check.h
tests_test_pp_sched_CPPFLAGS = $(MOE_CPPFLAGS)
tests_test_pp_sched_LDADD = moe/libmoe.la -lm

# The dumps of 1, 2, 4 and 8 ranks in P x D mixes equal (moe_npy_cmp
# compares two dump folders), and training on 2 and 4 ranks.
check_PROGRAMS += tests/moe_npy_cmp
TESTS += tests/test_moe_layout.sh tests/test_moe_pipe.sh tests/test_moe_plan.sh
# --device cuda on the backend's host stand-in against --device host.
TESTS += tests/test_moe_device.sh
tests_moe_npy_cmp_SOURCES = tests/moe_npy_cmp.c
tests_moe_npy_cmp_CPPFLAGS = $(MOE_CPPFLAGS)
tests_moe_npy_cmp_LDADD = moe/libmoe.la -lm
endif
