# moe/: the MoE model (router, SwiGLU experts, loss, backward, Adam, .npy
# I/O) on a compute backend table, and the moe_train driver.  It uses only
# moeccl's public headers (its CPPFLAGS leave out src/), and builds only
# when configure found OpenBLAS.
EXTRA_DIST += moe/README.md scripts/moe_ref.py tests/test_moe_ref.sh tests/test_moe_train.sh \
	tests/test_moe_public.sh tests/test_moe_layout.sh scripts/pp_timeline.py \
	tests/test_moe_pipe.sh tests/test_moe_plan.sh scripts/plan_calibrate.py
# That rule, checked on the sources (with or without OpenBLAS).
TESTS += tests/test_moe_public.sh
if HAVE_OPENBLAS
MOE_CPPFLAGS = -I$(top_srcdir)/include -I$(top_srcdir)/moe

noinst_LTLIBRARIES += moe/libmoe.la
moe_libmoe_la_SOURCES = moe/model.c moe/model.h moe/adam.c moe/adam.h moe/npy.c moe/npy.h \
	moe/backend.h moe/backend_blas.c moe/pp_sched.c moe/pp_sched.h moe/pp_sched_sim.c \
	moe/pp_sched_int.h moe/placement.c moe/placement.h moe/plan.c moe/plan.h moe/plan_probe.c
moe_libmoe_la_CPPFLAGS = $(MOE_CPPFLAGS) $(OPENBLAS_CFLAGS)
moe_libmoe_la_LIBADD = $(OPENBLAS_LIBS) -lm

bin_PROGRAMS += moe/moe_train
moe_moe_train_SOURCES = moe/moe_train.c moe/train_options.c moe/train_options.h \
	moe/train_loop.c moe/train_loop.h moe/train_layer.c moe/train_layer.h \
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
# (skips without numpy); the synthetic training run with the defaults.
check_PROGRAMS += tests/test_moe_grad tests/test_moe_io tests/test_placement
TESTS += tests/test_moe_grad tests/test_moe_io tests/test_placement tests/test_moe_ref.sh \
	tests/test_moe_train.sh
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
tests_moe_npy_cmp_SOURCES = tests/moe_npy_cmp.c
tests_moe_npy_cmp_CPPFLAGS = $(MOE_CPPFLAGS)
tests_moe_npy_cmp_LDADD = moe/libmoe.la -lm
endif
