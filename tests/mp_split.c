/*
 * mp_split.c - moecclCommSplit on 1..8 forked ranks.  Color rank%2 with key
 * -rank (so each child comm reverses the old order), MOECCL_SPLIT_NOCOLOR
 * (newcomm NULL), two children of one parent alive at once, one group with
 * alltoalls on a child and on the parent, a non-blocking split (blocking=0,
 * polled), a split of a child with tied keys (old order kept), two threads
 * driving two communicators at once, 20 split/destroy rounds that must leak
 * no fd, thread or mapping, alltoalls on every communicator, children
 * destroyed before the parent; a simulator of the parent prices the
 * child's members as one of the child does.  Then a run where every rank
 * makes the world communicator with a non-blocking moecclCommInitRankConfig.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moeccl_sim.h"
#include "mp_harness.h"

/* A checked alltoall on comm, whose ranks are me of n. */
static int alltoall_on(moecclComm_t comm, int me, int n, size_t count, uint64_t seed,
                       const char* what) {
  unsigned char* s = mp_xmalloc(count * 4 * (size_t)n);
  unsigned char* r = mp_xmalloc(count * 4 * (size_t)n + 64);
  for (int p = 0; p < n; p++) mp_fill(s + p * count * 4, 4, count, seed, me, p, 0);
  mp_fill_sentinel(r, count * 4 * (size_t)n + 64);
  MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclInt32, comm, NULL));
  char msg[128];
  for (int p = 0; p < n; p++) {
    snprintf(msg, sizeof(msg), "%s: block from %d", what, p);
    MP_CHECK_BLOCK(msg, r + p * count * 4, 4, count, seed, p, me, 0);
  }
  snprintf(msg, sizeof(msg), "%s: guard", what);
  MP_CHECK_SENTINEL(msg, r + count * 4 * (size_t)n, 64);
  free(s);
  free(r);
  return 0;
}

static int check_shape(moecclComm_t c, int expect_count, int expect_rank, const char* what) {
  int count = -1, rank = -1;
  MP_OK_COMM(c, moecclCommCount(c, &count));
  MP_OK_COMM(c, moecclCommUserRank(c, &rank));
  MP_CHECK(count == expect_count, "%s: moecclCommCount gave %d, expected %d", what, count,
           expect_count);
  MP_CHECK(rank == expect_rank, "%s: moecclCommUserRank gave %d, expected %d", what, rank,
           expect_rank);
  moecclResult_t async = moecclInternalError;
  MP_OK_COMM(c, moecclCommGetAsyncError(c, &async));
  MP_CHECK(async == moecclSuccess, "%s: async error %d (%s)", what, (int)async,
           moecclGetErrorString(async));
  return 0;
}

/* Two communicators driven at the same time by two threads of each rank
 * (a communicator is used by one thread at a time, as the API requires). */
typedef struct {
  moecclComm_t comm;
  int rank, n, iters, rc;
  uint64_t seed;
} thread_job;

static void* thread_main(void* arg) {
  thread_job* j = arg;
  for (int it = 0; it < j->iters && !j->rc; it++)
    j->rc = alltoall_on(j->comm, j->rank, j->n, 100 + (size_t)(it % 7) * 1500,
                        j->seed + (uint64_t)it, "alltoall from a second thread");
  return NULL;
}

static int two_threads(moecclComm_t comm, int rank, int n, uint64_t seed) {
  moecclComm_t ca = NULL, cb = NULL;
  MP_OK(moecclCommSplit(comm, 0, rank, &ca, NULL));
  MP_OK(moecclCommSplit(comm, 5, rank, &cb, NULL));
  thread_job other = {cb, rank, n, 40, 0, seed ^ 0x7777};
  pthread_t t;
  MP_CHECK(pthread_create(&t, NULL, thread_main, &other) == 0, "pthread_create failed");
  int rc = 0;
  for (int it = 0; it < 40 && !rc; it++)
    rc = alltoall_on(ca, rank, n, 3000 - (size_t)(it % 5) * 500, seed + (uint64_t)it,
                     "alltoall from the main thread");
  pthread_join(t, NULL);
  MP_CHECK(!rc && !other.rc, "two threads on two communicators failed");
  MP_OK_COMM(NULL, moecclCommDestroy(cb));
  MP_OK_COMM(NULL, moecclCommDestroy(ca));
  return 0;
}

/* Split, use and destroy many times: no fd, thread or mapping may leak. */
static int split_leaks(moecclComm_t comm, int rank, int n, uint64_t seed) {
  mp_resources before;
  for (int it = 0; it < 21; it++) {
    if (it == 1) mp_resources_get(&before); /* after one warm-up round */
    moecclComm_t c = NULL;
    MP_OK(moecclCommSplit(comm, rank % 2, rank, &c, NULL));
    int size = (n + 1 - rank % 2) / 2;
    if (alltoall_on(c, rank / 2, size, 5000, seed + (uint64_t)it,
                    "alltoall on a short-lived child"))
      return 1;
    void* m = NULL;
    MP_OK(moecclMemAlloc(&m, 1 << 20));
    MP_OK(moecclMemFree(m));
    MP_OK_COMM(NULL, moecclCommDestroy(c));
  }
  MP_CHECK_RESOURCES("20 rounds of split / alltoall / destroy", &before, 10);
  return 0;
}

/* Variant "secret" (every rank logs SHM at INFO into one file): the names
 * of the shared-memory segments the ranks made, which anyone may list in
 * /dev/shm while they exist, carry no 8 consecutive bytes of the unique id
 * in hex, in either byte order, and every communicator's name differs (a
 * split's comes from its own derived secret). */
static int names_keep_secret(void) {
  char path[256], line[512], names[64][96];
  int nn = 0;
  snprintf(path, sizeof(path), "/tmp/mp_split_secret.log"); /* every rank's lines */
  FILE* f = fopen(path, "r");
  MP_CHECK(f != NULL, "secret: no log %s", path);
  while (f && fgets(line, sizeof(line), f) && nn < 64) {
    const char* at = strstr(line, "shm: segment ");
    if (at && sscanf(at + 13, "%95s", names[nn]) == 1) nn++;
  }
  if (f) fclose(f);
  unlink(path);
  MP_CHECK(nn >= 4, "secret: %d segment names logged, want the parent's and the splits'", nn);
  const unsigned char* id = (const unsigned char*)mp_unique_id.internal;
  for (int k = 0; k < nn; k++) {
    for (int o = 0; o + 8 <= MOECCL_UNIQUE_ID_BYTES; o++) {
      char fw[17], bw[17];
      int zero = 1; /* runs of zero bytes (the id's padding) prove nothing */
      for (int i = 0; i < 8; i++) {
        zero &= id[o + i] == 0;
        snprintf(fw + 2 * i, 3, "%02x", id[o + i]);
        snprintf(bw + 2 * i, 3, "%02x", id[o + 7 - i]);
      }
      MP_CHECK(zero || (!strstr(names[k], fw) && !strstr(names[k], bw)),
               "secret: segment %s carries the id's bytes %d-%d", names[k], o, o + 7);
    }
    for (int q = 0; q < k; q++)
      MP_CHECK(strcmp(names[k], names[q]) != 0, "secret: two communicators share segment %s",
               names[k]);
  }
  return 0;
}

/* moecclSimCreateFromComm: a simulator of the parent prices the child's
 * members (c1: same parity, ranks descending) exactly as a simulator of
 * the child prices all of its ranks, since both see the split's topology,
 * costs and window; and both outlive neither communicator's use. */
static int sim_of_split(moecclComm_t comm, moecclComm_t c1, int rank, int n) {
  moecclSim_t whole = NULL, child = NULL;
  MP_OK(moecclSimCreateFromComm(&whole, comm));
  MP_OK(moecclSimCreateFromComm(&child, c1));
  int members[64], m = 0, count = -1;
  for (int r = n - 1; r >= 0; r--)
    if (r % 2 == rank % 2) members[m++] = r;
  MP_OK(moecclSimRanks(child, &count));
  MP_CHECK(count == m, "simulator of the child: %d ranks, want %d", count, m);
  int ident[64];
  for (int i = 0; i < m; i++) ident[i] = i;
  static const char* algos[] = {NULL, "direct", "pairwise", "bruck", "hier2", "rail"};
  for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
    double t_whole = -1, t_child = -2;
    const char *u_whole = NULL, *u_child = NULL;
    MP_OK(moecclSimAlltoAll(whole, members, m, 4096, algos[a], &t_whole, &u_whole));
    MP_OK(moecclSimAlltoAll(child, ident, m, 4096, algos[a], &t_child, &u_child));
    MP_CHECK(t_whole == t_child && strcmp(u_whole, u_child) == 0,
             "alltoall %s: %.9g s by %s on the parent's members, %.9g s by %s on the child",
             algos[a] ? algos[a] : "(tuner)", t_whole, u_whole, t_child, u_child);
  }
  double t_whole = -1, t_child = -2;
  MP_OK(moecclSimCollective(whole, moecclSimAllReduce, members, m, 1 << 20, &t_whole, NULL));
  MP_OK(moecclSimCollective(child, moecclSimAllReduce, ident, m, 1 << 20, &t_child, NULL));
  MP_CHECK(t_whole == t_child && t_whole > 0,
           "allreduce: %.9g s on the parent, %.9g s on the child", t_whole, t_child);
  MP_OK(moecclSimDestroy(child));
  MP_OK(moecclSimDestroy(whole));
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;

  uint64_t seed = mp_mix64((uint64_t)n * 7919);

  /* Split 1: color rank%2, key -rank: new rank = same-color ranks above me. */
  int color = rank % 2, size1 = 0, rank1 = 0;
  for (int r = 0; r < n; r++)
    if (r % 2 == color) {
      size1++;
      if (r > rank) rank1++;
    }
  moecclComm_t c1 = (moecclComm_t)&c1; /* must be overwritten */
  MP_OK(moecclCommSplit(comm, color, -rank, &c1, NULL));
  MP_CHECK(c1 != NULL && c1 != (moecclComm_t)&c1, "split 1: newcomm not set");
  if (check_shape(c1, size1, rank1, "split by parity, key -rank")) return 1;
  if (sim_of_split(comm, c1, rank, n)) return 1;

  /* Split 2: ranks with rank%3 == 0 opt out; the others keep their order. */
  int out = rank % 3 == 0, size2 = 0, rank2 = 0;
  for (int r = 0; r < n; r++)
    if (r % 3 != 0) {
      size2++;
      if (r < rank) rank2++;
    }
  moecclComm_t c2 = (moecclComm_t)&c2;
  moecclConfig_t config = MOECCL_CONFIG_INITIALIZER;
  config.commName = "mp_split.second";
  MP_OK(moecclCommSplit(comm, out ? MOECCL_SPLIT_NOCOLOR : 7, rank, &c2, &config));
  if (out) {
    MP_CHECK(c2 == NULL, "split 2: MOECCL_SPLIT_NOCOLOR gave a non-NULL newcomm");
  } else {
    MP_CHECK(c2 != NULL && c2 != (moecclComm_t)&c2, "split 2: newcomm not set");
    if (check_shape(c2, size2, rank2, "split with NOCOLOR for rank%3==0")) return 1;
  }

  /* Traffic on each communicator, interleaved. */
  if (alltoall_on(c1, rank1, size1, 1000, seed ^ 1, "alltoall on parity child")) return 1;
  if (c2 && alltoall_on(c2, rank2, size2, 777, seed ^ 2, "alltoall on second child")) return 1;
  if (alltoall_on(comm, rank, n, 300, seed ^ 3, "alltoall on parent")) return 1;
  if (alltoall_on(c1, rank1, size1, 20000, seed ^ 4, "second alltoall on parity child")) return 1;

  /* One group with an alltoall on the child and one on the parent. */
  {
    size_t c = 256;
    unsigned char* s1 = mp_xmalloc(c * 4 * (size_t)size1);
    unsigned char* r1 = mp_xmalloc(c * 4 * (size_t)size1);
    unsigned char* s0 = mp_xmalloc(c * 4 * (size_t)n);
    unsigned char* r0 = mp_xmalloc(c * 4 * (size_t)n);
    for (int p = 0; p < size1; p++) mp_fill(s1 + p * c * 4, 4, c, seed ^ 10, rank1, p, 0);
    for (int p = 0; p < n; p++) mp_fill(s0 + p * c * 4, 4, c, seed ^ 11, rank, p, 0);
    MP_OK(moecclGroupStart());
    MP_OK_COMM(c1, moecclAlltoAll(s1, r1, c, moecclInt32, c1, NULL));
    MP_OK(moecclAlltoAll(s0, r0, c, moecclInt32, comm, NULL));
    MP_OK(moecclGroupEnd());
    for (int p = 0; p < size1; p++)
      MP_CHECK_BLOCK("grouped alltoall on child", r1 + p * c * 4, 4, c, seed ^ 10, p, rank1, 0);
    for (int p = 0; p < n; p++)
      MP_CHECK_BLOCK("grouped alltoall on parent", r0 + p * c * 4, 4, c, seed ^ 11, p, rank, 0);
    free(s1), free(r1), free(s0), free(r0);
  }

  /* A non-blocking split: InProgress or Success, then poll the state. */
  {
    moecclConfig_t nb = MOECCL_CONFIG_INITIALIZER;
    nb.blocking = 0;
    moecclComm_t c4 = NULL;
    moecclResult_t res = moecclCommSplit(comm, 0, n - rank, &c4, &nb);
    MP_CHECK(res == moecclSuccess || res == moecclInProgress,
             "non-blocking split returned %d (%s): %s", (int)res, moecclGetErrorString(res),
             mp_last_error_text(comm));
    MP_CHECK(c4 != NULL, "non-blocking split returned %d without setting newcomm", (int)res);
    while (res == moecclInProgress) {
      usleep(1000);
      MP_OK_COMM(c4, moecclCommGetAsyncError(c4, &res));
    }
    MP_CHECK(res == moecclSuccess, "non-blocking split ended with %d (%s): %s", (int)res,
             moecclGetErrorString(res), mp_last_error_text(c4));
    if (check_shape(c4, n, n - 1 - rank, "non-blocking split, key n-rank")) return 1;
    if (alltoall_on(c4, n - 1 - rank, n, 99, seed ^ 12, "alltoall on non-blocking split")) return 1;
    MP_OK_COMM(NULL, moecclCommDestroy(c4));
  }

  /* Split of a child, all keys tied: order of the child kept. */
  moecclComm_t c3 = NULL;
  MP_OK_COMM(c1, moecclCommSplit(c1, 0, 0, &c3, NULL));
  MP_CHECK(c3 != NULL, "split of child: newcomm NULL");
  if (check_shape(c3, size1, rank1, "split of child with tied keys")) return 1;
  if (alltoall_on(c3, rank1, size1, 55, seed ^ 5, "alltoall on grandchild")) return 1;

  if (mp_want("threads") && two_threads(comm, rank, n, seed ^ 13)) return 1;
  if (mp_want("leaks") && split_leaks(comm, rank, n, seed ^ 14)) return 1;

  /* Children first, then (in the harness) the parent. */
  MP_OK_COMM(NULL, moecclCommDestroy(c3));
  if (c2) MP_OK_COMM(NULL, moecclCommDestroy(c2));
  if (alltoall_on(c1, rank1, size1, 10, seed ^ 6, "alltoall on child after sibling destroyed"))
    return 1;
  MP_OK_COMM(NULL, moecclCommDestroy(c1));
  if (alltoall_on(comm, rank, n, 64, seed ^ 7, "alltoall on parent after children destroyed"))
    return 1;
  /* every rank's communicators are made by now: the alltoall waited for all */
  if (getenv("MP_SPLIT_SECRET") && rank == 0 && names_keep_secret()) return 1;
  return 0;
}

/* Run with no_init: the body makes the world comm with a non-blocking
 * config and polls it, as the moecclCommGetAsyncError man page shows. */
static int body_nonblocking_init(moecclComm_t unused, int rank, int n, void* arg) {
  (void)unused, (void)arg;
  moecclConfig_t config = MOECCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "mp_split.nonblocking";
  moecclComm_t comm = NULL;
  moecclResult_t res = moecclCommInitRankConfig(&comm, n, mp_unique_id, rank, &config);
  MP_CHECK(res == moecclSuccess || res == moecclInProgress,
           "non-blocking init returned %d (%s): %s", (int)res, moecclGetErrorString(res),
           mp_last_error_text(NULL));
  MP_CHECK(comm != NULL, "non-blocking init returned %d without setting comm", (int)res);
  while (res == moecclInProgress) {
    usleep(1000);
    MP_OK_COMM(comm, moecclCommGetAsyncError(comm, &res));
  }
  MP_CHECK(res == moecclSuccess, "non-blocking init ended with %d (%s): %s", (int)res,
           moecclGetErrorString(res), mp_last_error_text(comm));
  if (check_shape(comm, n, rank, "non-blocking init")) return 1;
  if (alltoall_on(comm, rank, n, 1234, 0xB10C, "alltoall after non-blocking init")) return 1;
  MP_OK_COMM(NULL, moecclCommDestroy(comm));
  return 0;
}

static const mp_variant variants[] = {
    {"secret",
     {"MP_SPLIT_SECRET=1", "MOECCL_DEBUG=INFO", "MOECCL_DEBUG_SUBSYS=SHM",
      "MOECCL_DEBUG_FILE=/tmp/mp_split_secret.log"},
     "4"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  unlink("/tmp/mp_split_secret.log");
  int overall = mp_main(argc, argv, mp_default_ranks, body, NULL, 120, variants);
  if (mp_want("nbinit")) {
    int ranks[64];
    int n = mp_parse_ranks(argc, argv, mp_default_ranks, ranks, 64);
    mp_opts opts = MP_OPTS_DEFAULT;
    opts.no_init = 1;
    printf("non-blocking init:\n");
    for (int i = 0; i < n; i++)
      overall = mp_fold(overall, mp_run_opts(ranks[i], body_nonblocking_init, NULL, &opts));
  }
  return overall;
}
