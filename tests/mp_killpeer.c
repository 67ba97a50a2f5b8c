/*
 * mp_killpeer.c - a peer dies or hangs; the survivors must get an error, not
 * hang.  MOECCL_TIMEOUT=10, 3 and 4 ranks; rank 1 is the victim.
 *
 *   raise     rank 1 raises SIGKILL at the start of iteration 2 of a loop of
 *             1 MiB-per-rank alltoalls;
 *   parent    all ranks run a long series of large, uneven alltoallv calls;
 *             once every rank reported (shared memory) that it finished 3
 *             iterations, the parent sends rank 1 SIGKILL mid-way;
 *   exit      rank 1 calls _exit(3) in the alltoallv loop, without destroying;
 *   stream    the alltoalls run on a host stream: the error comes from the
 *             issue call or from moecclHostStreamSynchronize;
 *   p2p       the others wait in an ungrouped moecclRecv from rank 1 (1 MiB),
 *             which dies instead of sending;
 *   hang      rank 1 stays alive but stops calling: the survivors must get
 *             moecclTimeout (after MOECCL_TIMEOUT), then the parent kills it;
 *   nojoin    rank 1 exits before moecclCommInitRank: the others' init must
 *             fail with moecclTimeout (or moecclRemoteError), comm unchanged.
 * hang and nojoin wait MOECCL_TIMEOUT, so they run in a re-executed variant
 * with MOECCL_TIMEOUT=3, on 3 ranks.
 *
 * Every survivor must get moecclRemoteError or moecclTimeout, with a
 * moecclGetLastError text that names "rank 1"; moecclCommGetAsyncError must
 * then report the error, a later call must fail at once, and moecclCommAbort
 * must succeed.  Survivors wait for each other (out of band) before aborting,
 * so a survivor that leaves early cannot be mistaken for the dead peer.  The
 * parent checks that survivors exited 0 and that rank 1 died as planned; the
 * deadline turns a hang into a failure.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "mp_harness.h"

#define TIMEOUT_S "10"
#define DIE_AT_ITER 2
#define MAX_ITERS 1000000 /* the deadline ends a run that never sees an error */
#define COUNTER_SURVIVORS 0
#define COUNTER_REPORTED 1
#define REPORT_AFTER_ITER 3
#define EXIT_CODE 3

typedef enum { MODE_RAISE, MODE_PARENT, MODE_EXIT, MODE_STREAM, MODE_P2P, MODE_HANG, MODE_NOJOIN } kill_mode;
static const char* mode_name[] = {"raise", "parent", "exit", "stream", "p2p", "hang", "nojoin"};

/* What rank 1 does at iteration DIE_AT_ITER. */
static void victim_acts(kill_mode mode) {
  fflush(stdout);
  if (mode == MODE_EXIT) _exit(EXIT_CODE);
  if (mode == MODE_HANG)
    for (;;) pause(); /* alive, silent: the parent kills it in the end */
  raise(SIGKILL);
}

/* A survivor's checks after a call failed with res. */
static int survivor_checks(moecclComm_t comm, int n, moecclResult_t res, int iter, kill_mode mode) {
  char text[1024]; /* the library's text lives only until the next call */
  snprintf(text, sizeof(text), "%s", mp_last_error_text(comm));
  int ok_res = mode == MODE_HANG ? res == moecclTimeout : (res == moecclRemoteError || res == moecclTimeout);
  int names = strstr(text, "rank 1") != NULL;
  moecclResult_t async = moecclSuccess;
  moecclResult_t ar = moecclCommGetAsyncError(comm, &async);
  printf("rank %d: iteration %d got %d (%s): \"%s\"; async error %d (%s)\n", mp_rank, iter, (int)res,
         moecclGetErrorString(res), text, (int)async, ar == moecclSuccess ? moecclGetErrorString(async) : "call failed");
  fflush(stdout);
  /* Wait for the other survivors before going away (out of band). */
  mp_shared_add(COUNTER_SURVIVORS, 1);
  int met = mp_shared_wait(COUNTER_SURVIVORS, n - 1, 60);
  /* The communicator stays broken: a later call fails at once. */
  int dummy[64] = {0}, rdummy[64];
  moecclResult_t later = n <= 64 ? moecclAlltoAll(dummy, rdummy, 1, moecclInt32, comm, NULL) : moecclInvalidUsage;
  char later_text[512];
  snprintf(later_text, sizeof(later_text), "%s", mp_last_error_text(comm));
  moecclResult_t ab = moecclCommAbort(comm);
  mp_comm_released = 1;

  MP_CHECK(ok_res, "iteration %d: expected %s, got %d (%s): %s", iter,
           mode == MODE_HANG ? "moecclTimeout" : "moecclRemoteError or moecclTimeout", (int)res,
           moecclGetErrorString(res), text);
  MP_CHECK(names, "iteration %d: moecclGetLastError does not name \"rank 1\": \"%s\"", iter, text);
  MP_CHECK(met == 0, "the other survivors did not report an error within 60 s");
  MP_CHECK(ar == moecclSuccess && async != moecclSuccess && async != moecclInProgress,
           "moecclCommGetAsyncError on the broken comm returned %d, state %d (%s); expected the error", (int)ar,
           (int)async, moecclGetErrorString(async));
  /* The man pages say moecclInvalidUsage; repeating the error that broke the
   * comm is accepted too.  What matters is that the call fails at once. */
  MP_CHECK(later == moecclInvalidUsage || later == res,
           "a call on the broken comm returned %d (%s), expected moecclInvalidUsage (or %d): %s", (int)later,
           moecclGetErrorString(later), (int)res, later_text);
  if (later != moecclInvalidUsage && mp_rank == 0)
    printf("note: a call on the broken comm returned %d (%s), the man pages say moecclInvalidUsage\n", (int)later,
           moecclGetErrorString(later));
  MP_CHECK(ab == moecclSuccess, "moecclCommAbort returned %d (%s)", (int)ab, moecclGetErrorString(ab));
  return 0;
}

static int check_a2a(const unsigned char* r, size_t count, uint64_t seed, int rank, int n) {
  for (int p = 0; p < n; p++)
    MP_CHECK_BLOCK("alltoall before the kill", r + (size_t)p * count * 4, 4, count, seed, p, rank, 0);
  return 0;
}

/* raise / stream / hang: a loop of 1 MiB-per-rank alltoalls. */
static int alltoall_loop(moecclComm_t comm, int rank, int n, kill_mode mode) {
  size_t count = (1u << 20) / (4 * (size_t)n);
  unsigned char* s = mp_xmalloc(count * 4 * (size_t)n);
  unsigned char* r = mp_xmalloc(count * 4 * (size_t)n);
  moecclStream_t stream = NULL;
  if (mode == MODE_STREAM) MP_OK(moecclHostStreamCreate(&stream));
  for (int it = 0; it < MAX_ITERS; it++) {
    if (rank == 1 && it == DIE_AT_ITER) victim_acts(mode);
    uint64_t seed = mp_mix64((uint64_t)it + 77);
    if (it < DIE_AT_ITER)
      for (int p = 0; p < n; p++) mp_fill(s + (size_t)p * count * 4, 4, count, seed, rank, p, 0);
    moecclResult_t res = moecclAlltoAll(s, r, count, moecclInt32, comm, stream);
    if (res == moecclSuccess && stream) res = moecclHostStreamSynchronize(stream);
    if (res != moecclSuccess) {
      MP_CHECK(it >= DIE_AT_ITER, "iteration %d failed before rank 1 died: %d (%s): %s", it, (int)res,
               moecclGetErrorString(res), mp_last_error_text(comm));
      int rc = survivor_checks(comm, n, res, it, mode);
      if (stream) moecclHostStreamDestroy(stream); /* its error was reported already */
      free(s);
      free(r);
      return rc;
    }
    MP_CHECK(it < DIE_AT_ITER, "iteration %d succeeded although rank 1 stopped before it", it);
    if (check_a2a(r, count, seed, rank, n)) return 1;
  }
  MP_CHECK(0, "no error after %d iterations", MAX_ITERS);
  return 1;
}

static size_t vcount(uint64_t seed, int src, int dst, int n) {
  uint64_t h = mp_mix64(seed ^ ((uint64_t)src << 8) ^ (uint64_t)dst);
  return (h % 6 == 0) ? 0 : (size_t)(h % (2 * (1u << 18) / (size_t)n)); /* avg ~ 1 MiB / rank in 4-byte elements */
}

/* parent / exit: large alltoallv calls until one fails. */
static int alltoallv_loop(moecclComm_t comm, int rank, int n, kill_mode mode) {
  size_t cap = (2 * (1u << 18) / (size_t)n) * (size_t)n;
  unsigned char* s = mp_xmalloc(cap * 4);
  unsigned char* r = mp_xmalloc(cap * 4);
  size_t* v = mp_xmalloc(sizeof(size_t) * 4 * (size_t)n);
  size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n;
  for (int it = 0; it < MAX_ITERS; it++) {
    if (mode == MODE_EXIT && rank == 1 && it == DIE_AT_ITER) victim_acts(mode);
    uint64_t seed = mp_mix64((uint64_t)it * 31 + 5);
    size_t spos = 0, rpos = 0;
    for (int p = 0; p < n; p++) {
      sc[p] = vcount(seed, rank, p, n), sd[p] = spos, spos += sc[p];
      rc[p] = vcount(seed, p, rank, n), rd[p] = rpos, rpos += rc[p];
    }
    int check = it <= REPORT_AFTER_ITER; /* checking every iteration would slow the loop */
    if (check)
      for (int p = 0; p < n; p++) mp_fill(s + sd[p] * 4, 4, sc[p], seed, rank, p, 0);
    moecclResult_t res = moecclAlltoAllv(s, sc, sd, r, rc, rd, moecclFloat32, comm, NULL);
    if (res != moecclSuccess) {
      int before = mode == MODE_PARENT ? mp_shared_get(COUNTER_REPORTED) < n : it < DIE_AT_ITER;
      MP_CHECK(!before, "iteration %d failed before rank 1 went away: %d (%s): %s", it, (int)res,
               moecclGetErrorString(res), mp_last_error_text(comm));
      int rc2 = survivor_checks(comm, n, res, it, mode);
      free(s);
      free(r);
      free(v);
      return rc2;
    }
    if (check)
      for (int p = 0; p < n; p++)
        MP_CHECK_BLOCK("alltoallv before the kill", r + rd[p] * 4, 4, rc[p], seed, p, rank, 0);
    if (it == REPORT_AFTER_ITER) mp_shared_add(COUNTER_REPORTED, 1);
  }
  MP_CHECK(0, "no error after %d iterations", MAX_ITERS);
  return 1;
}

/* p2p: one exchange that works, then everyone waits for rank 1, which dies. */
static int p2p_wait(moecclComm_t comm, int rank, int n) {
  size_t count = 1u << 20;
  unsigned char* b = mp_xmalloc(count);
  if (rank == 1) {
    mp_fill(b, 1, count, 11, 1, 0, 0);
    MP_OK(moecclSend(b, count, moecclUint8, 0, comm, NULL));
    victim_acts(MODE_RAISE);
  }
  if (rank == 0) {
    MP_OK(moecclRecv(b, count, moecclUint8, 1, comm, NULL));
    MP_CHECK_BLOCK("recv from rank 1 before it died", b, 1, count, 11, 1, 0, 0);
  }
  moecclResult_t res = moecclRecv(b, count, moecclUint8, 1, comm, NULL);
  MP_CHECK(res != moecclSuccess, "moecclRecv from the dead rank 1 succeeded");
  free(b);
  return survivor_checks(comm, n, res, 1, MODE_P2P);
}

/* nojoin: run without the harness's init. */
static int init_without_rank1(int rank, int n) {
  if (rank == 1) {
    fflush(stdout);
    _exit(EXIT_CODE);
  }
  moecclComm_t c = (moecclComm_t)&c;
  moecclResult_t res = moecclCommInitRank(&c, n, mp_unique_id, rank);
  const char* text = mp_last_error_text(NULL);
  printf("rank %d: init without rank 1 got %d (%s): \"%s\"\n", rank, (int)res, moecclGetErrorString(res), text);
  MP_CHECK(res == moecclTimeout || res == moecclRemoteError,
           "moecclCommInitRank without rank 1 returned %d (%s), expected moecclTimeout: %s", (int)res,
           moecclGetErrorString(res), text);
  MP_CHECK(c == (moecclComm_t)&c, "moecclCommInitRank failed but changed *comm");
  if (!strstr(text, "rank 1") && rank == 0)
    printf("note: the init error does not name the missing rank 1: \"%s\"\n", text);
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  kill_mode mode = *(const kill_mode*)arg;
  if (mode == MODE_NOJOIN) return init_without_rank1(rank, n);
  switch (mode) {
    case MODE_RAISE:
    case MODE_STREAM:
    case MODE_HANG: return alltoall_loop(comm, rank, n, mode);
    case MODE_PARENT:
    case MODE_EXIT: return alltoallv_loop(comm, rank, n, mode);
    case MODE_P2P: return p2p_wait(comm, rank, n);
    case MODE_NOJOIN: break; /* handled above */
  }
  return 1;
}

typedef struct {
  kill_mode mode;
  int killed;
} poll_state;

/* parent: kill rank 1 once all ranks finished iteration REPORT_AFTER_ITER;
 * hang: once every survivor has reported its error. */
static void parent_poll(mp_job* job, void* arg) {
  poll_state* ps = arg;
  if (ps->killed) return;
  int go = ps->mode == MODE_PARENT ? mp_shared_get(COUNTER_REPORTED) >= job->nranks
                                   : mp_shared_get(COUNTER_SURVIVORS) >= job->nranks - 1;
  if (go) {
    mp_kill_rank(job, 1, SIGKILL);
    ps->killed = 1;
  }
}

static int run_mode(int nranks, kill_mode mode) {
  mp_opts opts = MP_OPTS_DEFAULT;
  poll_state ps = {mode, 0};
  opts.deadline_s = 60;
  opts.expect_killed_rank = 1;
  opts.expect_killed_signal = SIGKILL;
  if (mode == MODE_EXIT || mode == MODE_NOJOIN) opts.expect_exit_code = EXIT_CODE;
  opts.no_init = mode == MODE_NOJOIN;
  if (mode == MODE_PARENT || mode == MODE_HANG) {
    opts.parent_poll = parent_poll;
    opts.parent_poll_arg = &ps;
  }
  printf("mode %s:\n", mode_name[mode]);
  int rc = mp_run_opts(nranks, body, &mode, &opts);
  if ((mode == MODE_PARENT || mode == MODE_HANG) && !ps.killed) {
    printf("FAIL nranks=%d mode %s: the parent never got the signal to kill rank 1\n", nranks, mode_name[mode]);
    rc = MP_EXIT_FAIL;
  }
  return rc;
}

/* Peers dying on the other shared-memory paths (two copies through the slots;
 * tiny slots and chunks).  The hang mode is left out: it takes MOECCL_TIMEOUT. */
static const mp_variant variants[] = {
    {"no-cma", {"MOECCL_CMA_DISABLE=1", "MP_SUBTESTS=raise,parent,exit,stream,p2p"}, "3"},
    {"small-shm",
     {"MOECCL_SHM_EAGER_SIZE=256", "MOECCL_SHM_SLOTS=2", "MOECCL_SHM_CHUNK_SIZE=40000",
      "MP_SUBTESTS=raise,parent,exit,stream,p2p"},
     "4"},
    {"pairwise", {"MOECCL_ALGO=pairwise", "MP_SUBTESTS=raise,parent,exit"}, "4"},
    {"short-timeout", {"MOECCL_TIMEOUT=3", "MP_SUBTESTS=hang,nojoin"}, "3"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  static const int defaults[] = {3, 4, 0};
  int ranks[64];
  int n = mp_parse_ranks(argc, argv, defaults, ranks, 64);
  if (getenv("MP_VARIANT"))
    mp_env_default("MOECCL_TIMEOUT", TIMEOUT_S); /* a variant may shorten it */
  else
    setenv("MOECCL_TIMEOUT", TIMEOUT_S, 1);
  /* hang and nojoin only where asked for (the short-timeout variant). */
  int slow_modes = getenv("MP_SUBTESTS") != NULL;
  int overall = MP_EXIT_SKIP;
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 2) {
      printf("SKIP nranks=%d (needs a survivor)\n", ranks[i]);
      continue;
    }
    for (int m = MODE_RAISE; m <= MODE_NOJOIN; m++) {
      if (!mp_want(mode_name[m]) || (m >= MODE_HANG && !slow_modes)) continue;
      overall = mp_fold(overall, run_mode(ranks[i], (kill_mode)m));
    }
  }
  return mp_fold(overall, mp_run_variants(argc, argv, variants, 6 * 60));
}
