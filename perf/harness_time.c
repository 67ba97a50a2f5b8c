/*
 * harness_time.c - how the MPI harness times and checks a call
 * (perf_common.h): series of calls after a barrier, one checked call, and
 * the reps that interleave every moeccl series with MPI.
 */
#include "perf_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

moecclResult_t perf_moe_result(struct perf_ctx* c, moecclResult_t r, const char* call,
                               size_t bytes)
{
  if (r != moecclSuccess && c->err == moecclSuccess) {
    c->err = r;
    fprintf(stderr, "# rank %d: moeccl%s (%zu bytes) failed: %s: %s\n", c->me, call, bytes,
            moecclGetErrorString(r), moecclGetLastError(c->comm));
  }
  return r;
}

/* Runs calls back to back after a barrier and returns the slowest rank's
 * mean time per call in us.  Also tells every rank whether any moeccl call
 * failed anywhere, so all ranks leave together instead of hanging. */
static double run_series(struct perf_ctx* c, const struct perf_ops* ops, enum perf_lib lib,
                         int calls, int* failed)
{
  double t[2];
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < calls; i++) {
    if (lib == PERF_MPI)
      ops->mpi(c);
    else if (ops->moe(c) != moecclSuccess)
      break;
  }
  t[0] = calls ? (MPI_Wtime() - t0) / calls * 1e6 : 0.0;
  t[1] = c->err != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, t, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *failed = t[1] > 0.0;
  return t[0];
}

void perf_clear_recv(struct perf_ctx* c, const struct perf_ops* ops)
{
  if (ops->clear)
    ops->clear(c);
  else
    memset(c->B.recv, PERF_SENTINEL, c->recv_bytes + PERF_GUARD_BYTES);
}

long long perf_check_once(struct perf_ctx* c, const struct perf_ops* ops, enum perf_lib lib)
{
  long long v[2];
  ops->fill(c);
  perf_clear_recv(c, ops);
  MPI_Barrier(MPI_COMM_WORLD);
  if (lib == PERF_MPI)
    ops->mpi(c);
  else
    ops->moe(c);
  c->lib = lib;
  v[0] = ops->verify(c);
  v[1] = c->err != moecclSuccess;
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return v[1] ? -1 : v[0];
}

int perf_time(struct perf_ctx* c, const struct perf_ops* ops, int nseries, int mpi_on,
              double* moe_us, double* mpi_us, long long* wrong)
{
  const struct perf_opts* o = c->o;
  int reps = o->reps, failed = 0, f2 = 0;
  double* tm = perf_xcalloc((size_t)reps * (size_t)nseries, sizeof *tm);
  double* tp = perf_xcalloc((size_t)reps, sizeof *tp);
  for (int a = 0; a < nseries && !failed; a++) {
    if (ops->select)
      ops->select(c, a);
    wrong[a] = -1;
    if (o->check && (wrong[a] = perf_check_once(c, ops, PERF_MOECCL)) < 0)
      failed = 1;
    if (!failed)
      run_series(c, ops, PERF_MOECCL, o->warmup, &failed);
  }
  if (!failed && mpi_on)
    run_series(c, ops, PERF_MPI, o->warmup, &f2);
  for (int rep = 0; rep < reps && !failed; rep++) {
    if (mpi_on && rep % 2)
      tp[rep] = run_series(c, ops, PERF_MPI, o->iters, &f2);
    for (int k = 0; k < nseries && !failed; k++) {
      int a = (k + rep) % nseries;
      if (ops->select)
        ops->select(c, a);
      tm[(size_t)a * (size_t)reps + (size_t)rep] = run_series(c, ops, PERF_MOECCL, o->iters, &failed);
    }
    if (mpi_on && rep % 2 == 0)
      tp[rep] = run_series(c, ops, PERF_MPI, o->iters, &f2);
  }
  *mpi_us = mpi_on ? perf_median(tp, reps) : -1.0;
  for (int a = 0; a < nseries; a++)
    moe_us[a] = perf_median(tm + (size_t)a * (size_t)reps, reps);
  free(tm);
  free(tp);
  return failed ? -1 : 0;
}
