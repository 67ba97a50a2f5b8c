/*
 * mp_hoststream.c - library-owned host streams on 1..8 forked ranks.  Several
 * AlltoAll and AlltoAllv calls are issued on one host stream (each returns at
 * once), a local computation overlaps them, the stream is synchronized and
 * every buffer checked.  Count and displacement arrays are overwritten right
 * after issue (the library must have copied them).  Also: grouped send/recv
 * on the stream, a NULL-stream call after synchronizing, moecclCommDestroy
 * with operations still queued (it must wait for them), two communicators
 * with a stream each running at once, 20 streams created and destroyed
 * without leaks, and destroy without an explicit synchronize.
 */
#include <pthread.h>
#include <stdlib.h>

#include "mp_harness.h"

#define N_A2A 3
#define N_A2AV 3
#define GUARD 64

typedef struct {
  size_t count;
  size_t es;
  uint64_t seed;
  unsigned char *send, *recv;
} a2a_op;

typedef struct {
  size_t es;
  uint64_t seed;
  size_t *scounts, *sdispls, *rcounts, *rdispls; /* kept for checking */
  size_t *scratch;                               /* given to the library, then clobbered */
  size_t rext;
  unsigned char *send, *recv;
} a2av_op;

static size_t vcount(uint64_t seed, int src, int dst) {
  uint64_t h = mp_mix64(seed ^ ((uint64_t)src << 16) ^ (uint64_t)dst);
  return (h % 4 == 0) ? 0 : (size_t)(h % 5000);
}

static void a2a_prepare(a2a_op* op, int rank, int n, size_t count, size_t es, uint64_t seed) {
  op->count = count;
  op->es = es;
  op->seed = seed;
  op->send = mp_xmalloc(count * es * (size_t)n);
  op->recv = mp_xmalloc(count * es * (size_t)n + GUARD);
  for (int p = 0; p < n; p++) mp_fill(op->send + p * count * es, es, count, seed, rank, p, 0);
  mp_fill_sentinel(op->recv, count * es * (size_t)n + GUARD);
}

static int a2a_check(const a2a_op* op, int rank, int n, const char* what) {
  size_t block = op->count * op->es;
  for (int p = 0; p < n; p++) MP_CHECK_BLOCK(what, op->recv + p * block, op->es, op->count, op->seed, p, rank, 0);
  MP_CHECK_SENTINEL(what, op->recv + block * (size_t)n, GUARD);
  free(op->send);
  free(op->recv);
  return 0;
}

static void a2av_prepare(a2av_op* op, int rank, int n, size_t es, uint64_t seed) {
  op->es = es;
  op->seed = seed;
  op->scounts = mp_xmalloc(sizeof(size_t) * 4 * (size_t)n);
  op->sdispls = op->scounts + n;
  op->rcounts = op->scounts + 2 * n;
  op->rdispls = op->scounts + 3 * n;
  op->scratch = mp_xmalloc(sizeof(size_t) * 4 * (size_t)n);
  size_t spos = 0, rpos = 0;
  for (int p = 0; p < n; p++) { /* blocks in reverse order with a gap of 3 elements */
    int q = n - 1 - p;
    op->scounts[q] = vcount(seed, rank, q);
    op->sdispls[q] = spos + 3;
    spos += 3 + op->scounts[q];
    op->rcounts[q] = vcount(seed, q, rank);
    op->rdispls[q] = rpos + 3;
    rpos += 3 + op->rcounts[q];
  }
  op->rext = rpos + 3;
  op->send = mp_xmalloc(spos * es + 1);
  op->recv = mp_xmalloc(op->rext * es + GUARD);
  for (int p = 0; p < n; p++) mp_fill(op->send + op->sdispls[p] * es, es, op->scounts[p], seed, rank, p, 0);
  mp_fill_sentinel(op->recv, op->rext * es + GUARD);
  memcpy(op->scratch, op->scounts, sizeof(size_t) * 4 * (size_t)n);
}

static int a2av_check(a2av_op* op, int rank, int n, const char* what) {
  for (int p = 0; p < n; p++) {
    MP_CHECK_BLOCK(what, op->recv + op->rdispls[p] * op->es, op->es, op->rcounts[p], op->seed, p, rank, 0);
    mp_fill_sentinel(op->recv + op->rdispls[p] * op->es, op->rcounts[p] * op->es);
  }
  MP_CHECK_SENTINEL(what, op->recv, op->rext * op->es + GUARD);
  free(op->scounts);
  free(op->scratch);
  free(op->send);
  free(op->recv);
  return 0;
}

static int issue_a2av(moecclComm_t comm, a2av_op* op, int n, moecclStream_t stream) {
  size_t* s = op->scratch;
  MP_OK_COMM(comm, moecclAlltoAllv(op->send, s, s + n, op->recv, s + 2 * n, s + 3 * n,
                                   mp_dtype_of_size(op->es), comm, stream));
  /* Arrays are copied at issue time: garbage now must not matter. */
  memset(op->scratch, 0xFF, sizeof(size_t) * 4 * (size_t)n);
  return 0;
}

/* Work done while the stream runs. */
static uint64_t local_compute(void) {
  uint64_t acc = 0;
  for (uint64_t i = 0; i < 3000000; i++) acc = mp_mix64(acc + i);
  return acc;
}

static int round_of_ops(moecclComm_t comm, int rank, int n, moecclStream_t stream, uint64_t seed,
                        int explicit_sync) {
  a2a_op a[N_A2A];
  a2av_op v[N_A2AV];
  static const size_t es_list[] = {1, 2, 4, 8};
  for (int i = 0; i < N_A2A; i++)
    a2a_prepare(&a[i], rank, n, 1000 + 6000 * (size_t)i, es_list[i % 4], seed + (uint64_t)i);
  for (int i = 0; i < N_A2AV; i++) a2av_prepare(&v[i], rank, n, es_list[(i + 1) % 4], seed + 100 + (uint64_t)i);

  for (int i = 0; i < N_A2A || i < N_A2AV; i++) { /* interleave the two kinds */
    if (i < N_A2A)
      MP_OK_COMM(comm, moecclAlltoAll(a[i].send, a[i].recv, a[i].count, mp_dtype_of_size(a[i].es), comm, stream));
    if (i < N_A2AV && issue_a2av(comm, &v[i], n, stream)) return 1;
  }
  moecclResult_t q = moecclHostStreamQuery(stream);
  MP_CHECK(q == moecclSuccess || q == moecclInProgress, "moecclHostStreamQuery returned %d (%s): %s",
           (int)q, moecclGetErrorString(q), mp_last_error_text(comm));
  volatile uint64_t sink = local_compute();
  (void)sink;
  if (explicit_sync) {
    MP_OK_COMM(comm, moecclHostStreamSynchronize(stream));
    q = moecclHostStreamQuery(stream);
    MP_CHECK(q == moecclSuccess, "moecclHostStreamQuery after synchronize returned %d (%s)", (int)q,
             moecclGetErrorString(q));
  } else {
    MP_OK_COMM(comm, moecclHostStreamDestroy(stream));
  }
  char what[64];
  for (int i = 0; i < N_A2A; i++) {
    snprintf(what, sizeof(what), "host-stream alltoall %d", i);
    if (a2a_check(&a[i], rank, n, what)) return 1;
  }
  for (int i = 0; i < N_A2AV; i++) {
    snprintf(what, sizeof(what), "host-stream alltoallv %d", i);
    if (a2av_check(&v[i], rank, n, what)) return 1;
  }
  return 0;
}

/* A ring of grouped send/receive on the host stream. */
static int p2p_on_stream(moecclComm_t comm, int rank, int n, moecclStream_t stream, uint64_t seed) {
  size_t count = 4096;
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  unsigned char* s = mp_xmalloc(count * 4);
  unsigned char* r = mp_xmalloc(count * 4 + GUARD);
  mp_fill(s, 4, count, seed, rank, next, 0);
  mp_fill_sentinel(r, count * 4 + GUARD);
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclSend(s, count, moecclFloat32, next, comm, stream));
  MP_OK_COMM(comm, moecclRecv(r, count, moecclFloat32, prev, comm, stream));
  MP_OK_COMM(comm, moecclGroupEnd());
  MP_OK_COMM(comm, moecclHostStreamSynchronize(stream));
  MP_CHECK_BLOCK("host-stream send/recv ring", r, 4, count, seed, prev, rank, 0);
  MP_CHECK_SENTINEL("host-stream send/recv ring guard", r + count * 4, GUARD);
  free(s);
  free(r);
  return 0;
}

static int null_stream_alltoall(moecclComm_t comm, int rank, int n, uint64_t seed) {
  a2a_op op;
  a2a_prepare(&op, rank, n, 500, 8, seed);
  MP_OK_COMM(comm, moecclAlltoAll(op.send, op.recv, op.count, moecclUint64, comm, NULL));
  return a2a_check(&op, rank, n, "NULL-stream alltoall after host-stream work");
}

/* moecclCommDestroy with operations still queued on a stream: it waits for
 * them (man page), after which the stream is idle and the data is there. */
static int destroy_comm_with_queued_ops(moecclComm_t world, int rank, int n, uint64_t seed) {
  moecclComm_t c = NULL;
  MP_OK_COMM(world, moecclCommSplit(world, 0, rank, &c, NULL));
  moecclStream_t st = NULL;
  MP_OK(moecclHostStreamCreate(&st));
  a2a_op a[3];
  for (int i = 0; i < 3; i++) {
    a2a_prepare(&a[i], rank, n, 20000 + 1000 * (size_t)i, 4, seed + (uint64_t)i);
    MP_OK_COMM(c, moecclAlltoAll(a[i].send, a[i].recv, a[i].count, moecclFloat32, c, st));
  }
  MP_OK_COMM(NULL, moecclCommDestroy(c));
  MP_OK_COMM(NULL, moecclHostStreamSynchronize(st));
  MP_OK_COMM(NULL, moecclHostStreamDestroy(st));
  for (int i = 0; i < 3; i++)
    if (a2a_check(&a[i], rank, n, "alltoall queued before moecclCommDestroy")) return 1;
  return 0;
}

/* Two communicators, each with its own stream, run at the same time. */
static int two_streams(moecclComm_t world, int rank, int n, uint64_t seed) {
  moecclComm_t c1 = NULL, c2 = NULL;
  MP_OK_COMM(world, moecclCommSplit(world, 1, rank, &c1, NULL));
  MP_OK_COMM(world, moecclCommSplit(world, 2, -rank, &c2, NULL));
  moecclStream_t s1 = NULL, s2 = NULL;
  MP_OK(moecclHostStreamCreate(&s1));
  MP_OK(moecclHostStreamCreate(&s2));
  enum { K = 8 };
  a2a_op a[K], b[K];
  int rank2 = n - 1 - rank;
  for (int i = 0; i < K; i++) {
    a2a_prepare(&a[i], rank, n, 3000 + 500 * (size_t)i, 8, seed + (uint64_t)i);
    a2a_prepare(&b[i], rank2, n, 7000 - 500 * (size_t)i, 2, seed + 100 + (uint64_t)i);
    MP_OK_COMM(c1, moecclAlltoAll(a[i].send, a[i].recv, a[i].count, moecclUint64, c1, s1));
    MP_OK_COMM(c2, moecclAlltoAll(b[i].send, b[i].recv, b[i].count, moecclHalf, c2, s2));
  }
  MP_OK_COMM(c2, moecclHostStreamSynchronize(s2));
  MP_OK_COMM(c1, moecclHostStreamSynchronize(s1));
  for (int i = 0; i < K; i++) {
    if (a2a_check(&a[i], rank, n, "stream 1 on comm 1")) return 1;
    if (a2a_check(&b[i], rank2, n, "stream 2 on comm 2")) return 1;
  }
  MP_OK(moecclHostStreamDestroy(s1));
  MP_OK(moecclHostStreamDestroy(s2));
  MP_OK_COMM(NULL, moecclCommDestroy(c1));
  MP_OK_COMM(NULL, moecclCommDestroy(c2));
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  uint64_t seed = mp_mix64((uint64_t)n << 20);
  moecclStream_t stream = NULL;
  MP_OK(moecclHostStreamCreate(&stream));
  MP_CHECK(stream != NULL, "moecclHostStreamCreate gave NULL");
  MP_CHECK(moecclHostStreamQuery(stream) == moecclSuccess, "a new host stream is not idle");
  if (round_of_ops(comm, rank, n, stream, seed, 1)) return 1;
  if (round_of_ops(comm, rank, n, stream, seed + 1000, 1)) return 1; /* the stream is reusable */
  if (null_stream_alltoall(comm, rank, n, seed + 2000)) return 1;
  if (p2p_on_stream(comm, rank, n, stream, seed + 3000)) return 1;
  MP_OK(moecclHostStreamSynchronize(stream)); /* idle stream: returns at once */
  MP_OK(moecclHostStreamDestroy(stream));

  if (mp_want("destroycomm") && destroy_comm_with_queued_ops(comm, rank, n, seed + 5000)) return 1;
  if (mp_want("twostreams") && two_streams(comm, rank, n, seed + 6000)) return 1;

  /* Streams made and destroyed many times leak no thread or fd. */
  if (mp_want("leaks")) {
    mp_resources before;
    for (int it = 0; it < 21; it++) {
      if (it == 1) mp_resources_get(&before);
      moecclStream_t s = NULL;
      MP_OK(moecclHostStreamCreate(&s));
      if (it % 2 == 0 && null_stream_alltoall(comm, rank, n, seed + 7000 + (uint64_t)it)) return 1;
      MP_OK(moecclHostStreamDestroy(s));
    }
    MP_CHECK_RESOURCES("20 host streams created and destroyed", &before, 10);
  }

  /* A second stream, destroyed with work still queued. */
  MP_OK(moecclHostStreamCreate(&stream));
  if (round_of_ops(comm, rank, n, stream, seed + 4000, 0)) return 1;
  moecclResult_t async = moecclInternalError;
  MP_OK(moecclCommGetAsyncError(comm, &async));
  MP_CHECK(async == moecclSuccess, "async error %d after host-stream work", (int)async);
  return 0;
}

static const mp_variant variants[] = {
    {"small-shm", {"MOECCL_SHM_EAGER_SIZE=256", "MOECCL_SHM_SLOTS=2", "MOECCL_SHM_CHUNK_SIZE=40000"}, "3"},
    /* Streams and groups of v-calls whose count rows are exchanged first. */
    {"hier2-ppn2", {"MOECCL_ALGO=hier2", "MP_RANKS_PER_NODE=2"}, "4,6"},
    {"hier3-ppn1-g2", {"MOECCL_ALGO=hier3", "MP_RANKS_PER_NODE=1", "MOECCL_TOPO_GROUP_SIZE=2"}, "4"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  return mp_main(argc, argv, mp_default_ranks, body, NULL, 120, variants);
}
