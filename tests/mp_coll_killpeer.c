/*
 * mp_coll_killpeer.c - a peer dies during collectives; the survivors must get
 * an error, not hang.  MOECCL_TIMEOUT=10, 3 and 4 ranks; rank 1 is the victim.
 *
 *   parent    all ranks loop over 1 MiB AllReduce calls; once every rank has
 *             reported (shared memory) 3 finished iterations, the parent
 *             sends rank 1 SIGKILL mid-way;
 *   raise     rank 1 raises SIGKILL at the start of iteration 2 of the
 *             AllReduce loop;
 *   mixed     a loop that turns through AllReduce, ReduceScatter, AllGather,
 *             Broadcast and Reduce (rank 1 the root), 256 KiB per rank; rank
 *             1 raises SIGKILL at iteration 8 (a Broadcast from it);
 *   stream    the AllReduce loop on a host stream, the parent kills rank 1:
 *             the error comes from the issue call or from
 *             moecclHostStreamSynchronize.
 *
 * Every survivor must get moecclRemoteError or moecclTimeout (moecclSystemError
 * is accepted too, with a note: a broken socket), with a moecclGetLastError
 * text that names "rank 1"; moecclCommGetAsyncError must then report the
 * error, a later call must fail at once and moecclCommAbort must succeed.
 * Survivors wait for each other (out of band) before aborting, so a survivor
 * that leaves early cannot be mistaken for the dead peer.  The deadline only
 * turns a hang into a failure.  Re-run over the network transport
 * (MOECCL_SHM_DISABLE=1) and under forced AllReduce algorithms.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "mp_harness.h"

#define TIMEOUT_S "10"
#define DIE_AT_ITER 2
#define MIXED_DIE_AT 8
#define MAX_ITERS 1000000 /* the deadline ends a run that never sees an error */
#define COUNTER_SURVIVORS 0
#define COUNTER_REPORTED 1
#define REPORT_AFTER_ITER 3

typedef enum { MODE_PARENT, MODE_RAISE, MODE_MIXED, MODE_STREAM, NMODES } kill_mode;
static const char* mode_name[] = {"parent", "raise", "mixed", "stream"};

static int parent_kills(kill_mode m) { return m == MODE_PARENT || m == MODE_STREAM; }

static int survivor_checks(moecclComm_t comm, int n, moecclResult_t res, int iter, const char* during) {
  char text[1024]; /* the library's text lives only until the next call */
  snprintf(text, sizeof(text), "%s", mp_last_error_text(comm));
  int ok_res = res == moecclRemoteError || res == moecclTimeout || res == moecclSystemError;
  int names = strstr(text, "rank 1") != NULL;
  moecclResult_t async = moecclSuccess;
  moecclResult_t ar = moecclCommGetAsyncError(comm, &async);
  printf("rank %d: iteration %d (%s) got %d (%s): \"%s\"; async error %d (%s)\n", mp_rank, iter, during, (int)res,
         moecclGetErrorString(res), text, (int)async, ar == moecclSuccess ? moecclGetErrorString(async) : "call failed");
  if (res == moecclSystemError) printf("note: rank %d got moecclSystemError for the dead peer\n", mp_rank);
  fflush(stdout);
  mp_shared_add(COUNTER_SURVIVORS, 1);
  int met = mp_shared_wait(COUNTER_SURVIVORS, n - 1, 60);
  float dummy[64] = {0}, rdummy[64];
  moecclResult_t later = moecclAllReduce(dummy, rdummy, 64, moecclFloat32, moecclSum, comm, NULL);
  char later_text[512];
  snprintf(later_text, sizeof(later_text), "%s", mp_last_error_text(comm));
  moecclResult_t ab = moecclCommAbort(comm);
  mp_comm_released = 1;

  MP_CHECK(ok_res, "iteration %d (%s): expected moecclRemoteError or moecclTimeout, got %d (%s): %s", iter, during,
           (int)res, moecclGetErrorString(res), text);
  MP_CHECK(names, "iteration %d (%s): moecclGetLastError does not name \"rank 1\": \"%s\"", iter, during, text);
  MP_CHECK(met == 0, "the other survivors did not report an error within 60 s");
  MP_CHECK(ar == moecclSuccess && async != moecclSuccess && async != moecclInProgress,
           "moecclCommGetAsyncError on the broken comm returned %d, state %d (%s); expected the error", (int)ar,
           (int)async, moecclGetErrorString(async));
  MP_CHECK(later == moecclInvalidUsage || later == res,
           "an AllReduce on the broken comm returned %d (%s), expected moecclInvalidUsage (or %d): %s", (int)later,
           moecclGetErrorString(later), (int)res, later_text);
  MP_CHECK(ab == moecclSuccess, "moecclCommAbort returned %d (%s)", (int)ab, moecclGetErrorString(ab));
  return 0;
}

/* parent / raise / stream: 1 MiB float AllReduce calls until one fails. */
static int allreduce_loop(moecclComm_t comm, int rank, int n, kill_mode mode) {
  size_t count = (1u << 20) / 4;
  float* s = mp_xmalloc(count * 4);
  float* r = mp_xmalloc(count * 4);
  moecclStream_t stream = NULL;
  if (mode == MODE_STREAM) MP_OK(moecclHostStreamCreate(&stream));
  for (int it = 0; it < MAX_ITERS; it++) {
    if (mode == MODE_RAISE && rank == 1 && it == DIE_AT_ITER) {
      fflush(stdout);
      raise(SIGKILL);
    }
    int check = it <= REPORT_AFTER_ITER;
    if (check)
      for (size_t i = 0; i < count; i++) s[i] = (float)((rank + 1) * (int)(i % 1000) + it);
    moecclResult_t res = moecclAllReduce(s, r, count, moecclFloat32, moecclSum, comm, stream);
    if (res == moecclSuccess && stream) res = moecclHostStreamSynchronize(stream);
    if (res != moecclSuccess) {
      int before = parent_kills(mode) ? mp_shared_get(COUNTER_REPORTED) < n : it < DIE_AT_ITER;
      MP_CHECK(!before, "iteration %d failed before rank 1 died: %d (%s): %s", it, (int)res, moecclGetErrorString(res),
               mp_last_error_text(comm));
      int rc = survivor_checks(comm, n, res, it, "AllReduce");
      if (stream) moecclHostStreamDestroy(stream); /* its error was reported already */
      free(s);
      free(r);
      return rc;
    }
    MP_CHECK(mode != MODE_RAISE || it < DIE_AT_ITER, "iteration %d succeeded although rank 1 died before it", it);
    if (check)
      for (size_t i = 0; i < count; i++) {
        float e = (float)((n * (n + 1) / 2) * (int)(i % 1000) + n * it);
        MP_CHECK(r[i] == e, "AllReduce before the kill, iteration %d: element %zu is %g, expected %g", it, i, r[i], e);
      }
    if (it == REPORT_AFTER_ITER) mp_shared_add(COUNTER_REPORTED, 1);
  }
  MP_CHECK(0, "no error after %d iterations", MAX_ITERS);
  return 1;
}

/* mixed: the collectives in turn; rank 1 dies as the root of a Broadcast. */
static int mixed_loop(moecclComm_t comm, int rank, int n) {
  static const char* names[] = {"AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce"};
  size_t count = (256u << 10) / 4, per = count / (size_t)n;
  int32_t* s = mp_xmalloc(count * 4);
  int32_t* r = mp_xmalloc(count * 4);
  for (size_t i = 0; i < count; i++) s[i] = rank + (int32_t)i;
  for (int it = 0; it < MAX_ITERS; it++) {
    int k = it % 5;
    if (rank == 1 && it == MIXED_DIE_AT) {
      fflush(stdout);
      raise(SIGKILL);
    }
    moecclResult_t res = moecclSuccess;
    switch (k) {
      case 0: res = moecclAllReduce(s, r, count, moecclInt32, moecclSum, comm, NULL); break;
      case 1: res = moecclReduceScatter(s, r, per, moecclInt32, moecclMax, comm, NULL); break;
      case 2: res = moecclAllGather(s, r, per, moecclInt32, comm, NULL); break;
      case 3: res = moecclBroadcast(rank == 1 ? s : NULL, r, count, moecclInt32, 1, comm, NULL); break;
      case 4: res = moecclReduce(s, rank == 1 ? r : NULL, count, moecclInt32, moecclMin, 1, comm, NULL); break;
    }
    if (res != moecclSuccess) {
      MP_CHECK(it >= MIXED_DIE_AT, "iteration %d (%s) failed before rank 1 died: %d (%s): %s", it, names[k], (int)res,
               moecclGetErrorString(res), mp_last_error_text(comm));
      int rc = survivor_checks(comm, n, res, it, names[k]);
      free(s);
      free(r);
      return rc;
    }
    MP_CHECK(it < MIXED_DIE_AT, "iteration %d (%s) succeeded although rank 1 died before it", it, names[k]);
    if (k == 0)
      for (size_t i = 0; i < count; i++)
        MP_CHECK(r[i] == n * (n - 1) / 2 + n * (int32_t)i, "AllReduce before the kill: element %zu is %d", i, r[i]);
    if (k == 3)
      for (size_t i = 0; i < count; i++)
        MP_CHECK(r[i] == 1 + (int32_t)i, "Broadcast before the kill: element %zu is %d", i, r[i]);
  }
  MP_CHECK(0, "no error after %d iterations", MAX_ITERS);
  return 1;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  kill_mode mode = *(const kill_mode*)arg;
  if (mode == MODE_MIXED) return mixed_loop(comm, rank, n);
  return allreduce_loop(comm, rank, n, mode);
}

typedef struct {
  int killed;
} poll_state;

static void parent_poll(mp_job* job, void* arg) {
  poll_state* ps = arg;
  if (ps->killed || mp_shared_get(COUNTER_REPORTED) < job->nranks) return;
  mp_kill_rank(job, 1, SIGKILL);
  ps->killed = 1;
}

static int run_mode(int nranks, kill_mode mode) {
  mp_opts opts = MP_OPTS_DEFAULT;
  poll_state ps = {0};
  opts.deadline_s = 60;
  opts.expect_killed_rank = 1;
  opts.expect_killed_signal = SIGKILL;
  if (parent_kills(mode)) {
    opts.parent_poll = parent_poll;
    opts.parent_poll_arg = &ps;
  }
  printf("mode %s, %d ranks:\n", mode_name[mode], nranks);
  fflush(stdout);
  int rc = mp_run_opts(nranks, body, &mode, &opts);
  if (parent_kills(mode) && !ps.killed) {
    printf("FAIL nranks=%d mode %s: the parent never got the signal to kill rank 1\n", nranks, mode_name[mode]);
    rc = MP_EXIT_FAIL;
  }
  return rc;
}

static const mp_variant variants[] = {
    {"no-shm", {"MOECCL_SHM_DISABLE=1"}, "3"},
    {"ar-ring", {"MOECCL_ALLREDUCE_ALGO=ring", "MP_SUBTESTS=parent,raise"}, "4"},
    {"ar-tree", {"MOECCL_ALLREDUCE_ALGO=tree", "MP_SUBTESTS=parent,raise"}, "4"},
    {"ar-rhd", {"MOECCL_ALLREDUCE_ALGO=rhd", "MP_SUBTESTS=parent"}, "3"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  static const int defaults[] = {3, 4, 0};
  int ranks[64];
  int n = mp_parse_ranks(argc, argv, defaults, ranks, 64);
  if (getenv("MP_VARIANT"))
    mp_env_default("MOECCL_TIMEOUT", TIMEOUT_S);
  else
    setenv("MOECCL_TIMEOUT", TIMEOUT_S, 1);
  int overall = MP_EXIT_SKIP;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 2) {
      printf("SKIP nranks=%d (needs a survivor)\n", ranks[i]);
      continue;
    }
    for (int m = 0; m < NMODES; m++)
      if (mp_want(mode_name[m])) overall = mp_fold(overall, run_mode(ranks[i], (kill_mode)m));
  }
  return mp_fold(overall, mp_run_variants(argc, argv, variants, 4 * 60));
}
