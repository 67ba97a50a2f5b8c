/*
 * mp_sendrecv.c - moecclSend / moecclRecv on 1..8 forked ranks: a ring
 * shift, all pairs (every rank sends to every rank, itself included) in one
 * group, several messages to the same peer in one group matched in issue
 * order, zero counts, self-sends, multi-MiB ungrouped transfers between ranks
 * 0 and 1, nested groups, a group mixing alltoall, alltoallv and send/recv,
 * and random groups of 0..3 messages per pair issued in shuffled order.
 */
#include "config.h"

#include <stdlib.h>

#include "mp_harness.h"

#define GUARD_BYTES 64

static uint64_t seed_of(int n, int test, int k) {
  return mp_mix64(((uint64_t)n << 48) ^ ((uint64_t)test << 24) ^ (uint64_t)k ^ 0x5E4D);
}

/* Receives into a buffer with a guard, checks block and guard. */
static int check_recv(const char* what, const unsigned char* buf, size_t elsize, size_t count,
                      uint64_t seed, int src, int dst) {
  MP_CHECK_BLOCK(what, buf, elsize, count, seed, src, dst, 0);
  char msg[160];
  snprintf(msg, sizeof(msg), "%s: guard past recvbuff", what);
  MP_CHECK_SENTINEL(msg, buf + count * elsize, GUARD_BYTES);
  return 0;
}

/* Each rank sends to rank+1 and receives from rank-1, both orders. */
static int ring_shift(moecclComm_t comm, int rank, int n) {
  size_t count = 1000 + 17;
  unsigned char* s = mp_xmalloc(count * 4);
  unsigned char* r = mp_xmalloc(count * 4 + GUARD_BYTES);
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  for (int variant = 0; variant < 2; variant++) {
    uint64_t seed = seed_of(n, 1, variant);
    mp_fill(s, 4, count, seed, rank, next, 0);
    mp_fill_sentinel(r, count * 4 + GUARD_BYTES);
    MP_OK_COMM(comm, moecclGroupStart());
    if (variant == 0) {
      MP_OK_COMM(comm, moecclSend(s, count, moecclFloat32, next, comm, NULL));
      MP_OK_COMM(comm, moecclRecv(r, count, moecclFloat32, prev, comm, NULL));
    } else {
      MP_OK_COMM(comm, moecclRecv(r, count, moecclFloat32, prev, comm, NULL));
      MP_OK_COMM(comm, moecclSend(s, count, moecclFloat32, next, comm, NULL));
    }
    MP_OK_COMM(comm, moecclGroupEnd());
    if (check_recv(variant ? "ring shift (recv first)" : "ring shift", r, 4, count, seed, prev, rank))
      return 1;
  }
  free(s);
  free(r);
  return 0;
}

/* Uneven, deterministic pair sizes, some zero. */
static size_t pair_count(int src, int dst, int k) {
  uint64_t h = mp_mix64(((uint64_t)src << 20) ^ ((uint64_t)dst << 8) ^ (uint64_t)k);
  return (h % 5 == 0) ? 0 : 1 + (size_t)(h % 3000);
}

/* One group: a send to every rank (itself included), then a receive from every rank. */
static int all_pairs(moecclComm_t comm, int rank, int n, moecclDataType_t dt) {
  size_t es = mp_dtype_size(dt);
  unsigned char** s = mp_xmalloc(sizeof(void*) * (size_t)n);
  unsigned char** r = mp_xmalloc(sizeof(void*) * (size_t)n);
  uint64_t seed = seed_of(n, 2, (int)dt);
  for (int p = 0; p < n; p++) {
    s[p] = mp_xmalloc(pair_count(rank, p, 0) * es);
    r[p] = mp_xmalloc(pair_count(p, rank, 0) * es + GUARD_BYTES);
    mp_fill(s[p], es, pair_count(rank, p, 0), seed, rank, p, 0);
    mp_fill_sentinel(r[p], pair_count(p, rank, 0) * es + GUARD_BYTES);
  }
  MP_OK_COMM(comm, moecclGroupStart());
  for (int p = 0; p < n; p++) MP_OK_COMM(comm, moecclSend(s[p], pair_count(rank, p, 0), dt, p, comm, NULL));
  for (int p = 0; p < n; p++) MP_OK_COMM(comm, moecclRecv(r[p], pair_count(p, rank, 0), dt, p, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  char what[96];
  for (int p = 0; p < n; p++) {
    snprintf(what, sizeof(what), "all pairs %s from %d", mp_dtypes[dt].name, p);
    if (check_recv(what, r[p], es, pair_count(p, rank, 0), seed, p, rank)) return 1;
    free(s[p]);
    free(r[p]);
  }
  free(s);
  free(r);
  return 0;
}

/* K messages of different sizes to each peer in one group, received in the
 * same order: message k from src must land in the k-th receive posted for src. */
#define K_MSGS 4
static int same_peer_ordering(moecclComm_t comm, int rank, int n) {
  const size_t es = 8;
  unsigned char** s = mp_xmalloc(sizeof(void*) * (size_t)n * K_MSGS);
  unsigned char** r = mp_xmalloc(sizeof(void*) * (size_t)n * K_MSGS);
  for (int k = 0; k < K_MSGS; k++)
    for (int p = 0; p < n; p++) {
      size_t sc = pair_count(rank, p, k + 1), rc = pair_count(p, rank, k + 1);
      s[k * n + p] = mp_xmalloc(sc * es);
      r[k * n + p] = mp_xmalloc(rc * es + GUARD_BYTES);
      mp_fill(s[k * n + p], es, sc, seed_of(n, 3, k), rank, p, 0);
      mp_fill_sentinel(r[k * n + p], rc * es + GUARD_BYTES);
    }
  MP_OK_COMM(comm, moecclGroupStart());
  for (int k = 0; k < K_MSGS; k++)
    for (int p = 0; p < n; p++) {
      int peer = (rank + p) % n; /* different issue order per rank */
      MP_OK_COMM(comm, moecclSend(s[k * n + peer], pair_count(rank, peer, k + 1), moecclInt64, peer, comm, NULL));
    }
  for (int k = 0; k < K_MSGS; k++)
    for (int p = n - 1; p >= 0; p--)
      MP_OK_COMM(comm, moecclRecv(r[k * n + p], pair_count(p, rank, k + 1), moecclInt64, p, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  char what[96];
  for (int k = 0; k < K_MSGS; k++)
    for (int p = 0; p < n; p++) {
      snprintf(what, sizeof(what), "same-peer message %d from %d", k, p);
      if (check_recv(what, r[k * n + p], es, pair_count(p, rank, k + 1), seed_of(n, 3, k), p, rank))
        return 1;
      free(s[k * n + p]);
      free(r[k * n + p]);
    }
  free(s);
  free(r);
  return 0;
}

/* Zero-count sends and receives (NULL buffers), with and without data alongside. */
static int zero_counts(moecclComm_t comm, int rank, int n) {
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclSend(NULL, 0, moecclFloat32, next, comm, NULL));
  MP_OK_COMM(comm, moecclRecv(NULL, 0, moecclFloat32, prev, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  uint64_t v = 0, seed = seed_of(n, 4, 0);
  mp_fill(&v, 8, 1, seed, rank, next, 0);
  uint64_t got[1 + GUARD_BYTES / 8];
  mp_fill_sentinel(got, sizeof(got));
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclSend(NULL, 0, moecclUint64, next, comm, NULL));
  MP_OK_COMM(comm, moecclSend(&v, 1, moecclUint64, next, comm, NULL));
  MP_OK_COMM(comm, moecclRecv(NULL, 0, moecclUint64, prev, comm, NULL));
  MP_OK_COMM(comm, moecclRecv(got, 1, moecclUint64, prev, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  return check_recv("zero count then one element", (unsigned char*)got, 8, 1, seed, prev, rank);
}

/* A rank sends to itself inside a group, small and 1 MiB. */
static int self_send(moecclComm_t comm, int rank, int n) {
  size_t counts[] = {1, 1 << 20};
  for (int i = 0; i < 2; i++) {
    unsigned char* s = mp_xmalloc(counts[i]);
    unsigned char* r = mp_xmalloc(counts[i] + GUARD_BYTES);
    uint64_t seed = seed_of(n, 5, i);
    mp_fill(s, 1, counts[i], seed, rank, rank, 0);
    mp_fill_sentinel(r, counts[i] + GUARD_BYTES);
    MP_OK_COMM(comm, moecclGroupStart());
    MP_OK_COMM(comm, moecclRecv(r, counts[i], moecclUint8, rank, comm, NULL));
    MP_OK_COMM(comm, moecclSend(s, counts[i], moecclUint8, rank, comm, NULL));
    MP_OK_COMM(comm, moecclGroupEnd());
    if (check_recv("self send", r, 1, counts[i], seed, rank, rank)) return 1;
    free(s);
    free(r);
  }
  return 0;
}

/* Several MiB ungrouped: 0 sends to 1, then 1 sends back to 0 (no deadlock). */
static int large_ungrouped(moecclComm_t comm, int rank, int n) {
  if (n < 2 || rank > 1) return 0;
  size_t c1 = (6u << 20) / 4, c2 = (3u << 20) / 8 + 5;
  uint64_t seed1 = seed_of(n, 6, 1), seed2 = seed_of(n, 6, 2);
  unsigned char* b1 = mp_xmalloc(c1 * 4 + GUARD_BYTES);
  unsigned char* b2 = mp_xmalloc(c2 * 8 + GUARD_BYTES);
  if (rank == 0) {
    mp_fill(b1, 4, c1, seed1, 0, 1, 0);
    MP_OK_COMM(comm, moecclSend(b1, c1, moecclInt32, 1, comm, NULL));
    mp_fill_sentinel(b2, c2 * 8 + GUARD_BYTES);
    MP_OK_COMM(comm, moecclRecv(b2, c2, moecclFloat64, 1, comm, NULL));
    if (check_recv("large ungrouped 1->0", b2, 8, c2, seed2, 1, 0)) return 1;
    MP_CHECK_BLOCK("large ungrouped: sendbuff changed", b1, 4, c1, seed1, 0, 1, 0);
  } else {
    mp_fill_sentinel(b1, c1 * 4 + GUARD_BYTES);
    MP_OK_COMM(comm, moecclRecv(b1, c1, moecclInt32, 0, comm, NULL));
    if (check_recv("large ungrouped 0->1", b1, 4, c1, seed1, 0, 1)) return 1;
    mp_fill(b2, 8, c2, seed2, 1, 0, 0);
    MP_OK_COMM(comm, moecclSend(b2, c2, moecclFloat64, 0, comm, NULL));
  }
  free(b1);
  free(b2);
  return 0;
}

/* GroupStart twice, GroupEnd twice: only the outer end issues. */
static int nested_groups(moecclComm_t comm, int rank, int n) {
  size_t count = 333;
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  unsigned char* s = mp_xmalloc(count * 2);
  unsigned char* r = mp_xmalloc(count * 2 + GUARD_BYTES);
  uint64_t seed = seed_of(n, 7, 0);
  mp_fill(s, 2, count, seed, rank, next, 0);
  mp_fill_sentinel(r, count * 2 + GUARD_BYTES);
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclSend(s, count, moecclBfloat16, next, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  /* The inner end must not have issued the send alone (which could block
   * forever when the receive is posted only afterwards). */
  MP_OK_COMM(comm, moecclRecv(r, count, moecclBfloat16, prev, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  if (check_recv("nested groups", r, 2, count, seed, prev, rank)) return 1;
  free(s);
  free(r);
  return 0;
}

/* One group holding an alltoall, a ring send/receive and an alltoallv. */
static int mixed_group(moecclComm_t comm, int rank, int n) {
  size_t ac = 700, pc = 2000;
  unsigned char* as = mp_xmalloc(ac * 4 * (size_t)n);
  unsigned char* ar = mp_xmalloc(ac * 4 * (size_t)n + GUARD_BYTES);
  unsigned char* ps = mp_xmalloc(pc * 2);
  unsigned char* pr = mp_xmalloc(pc * 2 + GUARD_BYTES);
  size_t* v = mp_xmalloc(sizeof(size_t) * 4 * (size_t)n);
  size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n, spos = 0, rpos = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = pair_count(rank, p, 9), sd[p] = spos, spos += sc[p];
    rc[p] = pair_count(p, rank, 9), rd[p] = rpos, rpos += rc[p];
  }
  unsigned char* vs = mp_xmalloc(spos * 8);
  unsigned char* vr = mp_xmalloc(rpos * 8 + GUARD_BYTES);
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  uint64_t sa = seed_of(n, 9, 1), sp = seed_of(n, 9, 2), sv = seed_of(n, 9, 3);
  for (int p = 0; p < n; p++) mp_fill(as + p * ac * 4, 4, ac, sa, rank, p, 0);
  for (int p = 0; p < n; p++) mp_fill(vs + sd[p] * 8, 8, sc[p], sv, rank, p, 0);
  mp_fill(ps, 2, pc, sp, rank, next, 0);
  mp_fill_sentinel(ar, ac * 4 * (size_t)n + GUARD_BYTES);
  mp_fill_sentinel(pr, pc * 2 + GUARD_BYTES);
  mp_fill_sentinel(vr, rpos * 8 + GUARD_BYTES);
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclAlltoAll(as, ar, ac, moecclFloat32, comm, NULL));
  MP_OK_COMM(comm, moecclSend(ps, pc, moecclFloat16, next, comm, NULL));
  MP_OK_COMM(comm, moecclRecv(pr, pc, moecclFloat16, prev, comm, NULL));
  MP_OK_COMM(comm, moecclAlltoAllv(vs, sc, sd, vr, rc, rd, moecclInt64, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  char what[96];
  for (int p = 0; p < n; p++) {
    snprintf(what, sizeof(what), "grouped alltoall from %d", p);
    MP_CHECK_BLOCK(what, ar + p * ac * 4, 4, ac, sa, p, rank, 0);
    snprintf(what, sizeof(what), "grouped alltoallv from %d", p);
    MP_CHECK_BLOCK(what, vr + rd[p] * 8, 8, rc[p], sv, p, rank, 0);
  }
  MP_CHECK_SENTINEL("grouped alltoall guard", ar + ac * 4 * (size_t)n, GUARD_BYTES);
  MP_CHECK_SENTINEL("grouped alltoallv guard", vr + rpos * 8, GUARD_BYTES);
  if (check_recv("grouped ring send/recv", pr, 2, pc, sp, prev, rank)) return 1;
  free(as), free(ar), free(ps), free(pr), free(v), free(vs), free(vr);
  return 0;
}

/* Random traffic: in each group, 0..3 messages per (src, dst) pair with random
 * sizes (from a shared seed), issued in a random local order that keeps the
 * per-pair order. */
static int fuzz(moecclComm_t comm, int rank, int n) {
  int iters = n > 4 ? 15 : 30;
  for (int it = 0; it < iters; it++) {
    uint64_t seed = seed_of(n, 10, it);
    mp_rng rng;
    mp_rng_seed(&rng, seed);
    int nmsg_cap = 3 * n;
    int* ns = mp_xmalloc(sizeof(int) * (size_t)n * (size_t)n); /* messages src->dst */
    for (int i = 0; i < n * n; i++) ns[i] = (int)mp_rng_below(&rng, 4);
    /* my sends and receives, each (peer, k) with its buffer */
    typedef struct { int send, peer, k; size_t count; unsigned char* buf; } msg;
    msg* m = mp_xmalloc(sizeof(msg) * (size_t)nmsg_cap * 2);
    int nm = 0;
    for (int p = 0; p < n; p++) {
      for (int k = 0; k < ns[rank * n + p]; k++) m[nm++] = (msg){1, p, k, pair_count(rank, p, 100 * it + k), NULL};
      for (int k = 0; k < ns[p * n + rank]; k++) m[nm++] = (msg){0, p, k, pair_count(p, rank, 100 * it + k), NULL};
    }
    /* Shuffle, then restore per-(direction, peer) order by k. */
    mp_rng local;
    mp_rng_seed(&local, seed ^ (uint64_t)(rank + 1));
    for (int i = nm - 1; i > 0; i--) {
      int j = (int)mp_rng_below(&local, (uint64_t)i + 1);
      msg t = m[i];
      m[i] = m[j];
      m[j] = t;
    }
    for (int i = 0; i < nm; i++) /* insertion pass: k increasing among same (send, peer) */
      for (int j = i + 1; j < nm; j++)
        if (m[j].send == m[i].send && m[j].peer == m[i].peer && m[j].k < m[i].k) {
          int k = m[i].k;
          size_t c = m[i].count;
          m[i].k = m[j].k, m[i].count = m[j].count;
          m[j].k = k, m[j].count = c;
        }
    for (int i = 0; i < nm; i++) {
      m[i].buf = mp_xmalloc(m[i].count * 4 + GUARD_BYTES);
      if (m[i].send)
        mp_fill(m[i].buf, 4, m[i].count, seed + (uint64_t)m[i].k, rank, m[i].peer, 0);
      else
        mp_fill_sentinel(m[i].buf, m[i].count * 4 + GUARD_BYTES);
    }
    MP_OK_COMM(comm, moecclGroupStart());
    for (int i = 0; i < nm; i++) {
      if (m[i].send)
        MP_OK_COMM(comm, moecclSend(m[i].buf, m[i].count, moecclUint32, m[i].peer, comm, NULL));
      else
        MP_OK_COMM(comm, moecclRecv(m[i].buf, m[i].count, moecclUint32, m[i].peer, comm, NULL));
    }
    MP_OK_COMM(comm, moecclGroupEnd());
    char what[96];
    for (int i = 0; i < nm; i++) {
      if (!m[i].send) {
        snprintf(what, sizeof(what), "fuzz iteration %d: message %d from %d", it, m[i].k, m[i].peer);
        if (check_recv(what, m[i].buf, 4, m[i].count, seed + (uint64_t)m[i].k, m[i].peer, rank)) return 1;
      }
      free(m[i].buf);
    }
    free(m);
    free(ns);
  }
  return 0;
}

/* A receive larger than its message (moecclRecv takes a shorter one): a
 * small message into a large receive and a large one into a larger one,
 * ring order; the bytes past the message stay untouched.  Over ofi the
 * receive must not be treated as exact (no early CTS: sched->inexact). */
static int shorter(moecclComm_t comm, int rank, int n) {
  static const size_t sent[] = {250, 37500}, posted[] = {50000, 75000}; /* uint32 */
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  for (int c = 0; c < 2; c++) {
    unsigned char* s = mp_xmalloc(sent[c] * 4);
    unsigned char* r = mp_xmalloc(posted[c] * 4);
    mp_fill(s, 4, sent[c], 0x5407 + (uint64_t)c, rank, next, 0);
    mp_fill_sentinel(r, posted[c] * 4);
    MP_OK_COMM(comm, moecclGroupStart());
    MP_OK_COMM(comm, moecclSend(s, sent[c], moecclUint32, next, comm, NULL));
    MP_OK_COMM(comm, moecclRecv(r, posted[c], moecclUint32, prev, comm, NULL));
    MP_OK_COMM(comm, moecclGroupEnd());
    char what[64];
    snprintf(what, sizeof(what), "shorter message %d from %d", c, prev);
    MP_CHECK_BLOCK(what, r, 4, sent[c], 0x5407 + (uint64_t)c, prev, rank, 0);
    MP_CHECK_SENTINEL(what, r + sent[c] * 4, (posted[c] - sent[c]) * 4);
    free(s);
    free(r);
  }
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  if (mp_want("shorter") && n > 1 && shorter(comm, rank, n)) return 1;
  if (mp_want("ring") && ring_shift(comm, rank, n)) return 1;
  if (mp_want("allpairs")) {
    for (int t = 0; t < moecclNumTypes; t += 3)
      if (all_pairs(comm, rank, n, mp_dtypes[t].type)) return 1;
    if (all_pairs(comm, rank, n, moecclFloat8e5m2)) return 1;
  }
  if (mp_want("samepeer") && same_peer_ordering(comm, rank, n)) return 1;
  if (mp_want("zero") && zero_counts(comm, rank, n)) return 1;
  if (mp_want("self") && self_send(comm, rank, n)) return 1;
  if (mp_want("large") && large_ungrouped(comm, rank, n)) return 1;
  if (mp_want("nested") && nested_groups(comm, rank, n)) return 1;
  if (mp_want("mixed") && mixed_group(comm, rank, n)) return 1;
  if (mp_want("fuzz") && fuzz(comm, rank, n)) return 1;
  /* The communicator still serves collectives after point-to-point traffic. */
  size_t count = 100;
  unsigned char* s = mp_xmalloc(count * 4 * (size_t)n);
  unsigned char* r = mp_xmalloc(count * 4 * (size_t)n);
  uint64_t seed = seed_of(n, 8, 0);
  for (int p = 0; p < n; p++) mp_fill(s + p * count * 4, 4, count, seed, rank, p, 0);
  MP_OK_COMM(comm, moecclAlltoAll(s, r, count, moecclUint32, comm, NULL));
  for (int p = 0; p < n; p++) MP_CHECK_BLOCK("alltoall after p2p", r + p * count * 4, 4, count, seed, p, rank, 0);
  free(s);
  free(r);
  return 0;
}

/* The same checks under other shared-memory settings. */
static const mp_variant variants[] = {
    {"no-cma", {"MOECCL_CMA_DISABLE=1"}, "2,3"},
#ifdef MOECCL_HAVE_LIBFABRIC
    {"shorter-ofi",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=shorter"},
     "2,3"},
#endif
#ifdef MOECCL_HAVE_UCX
    {"shorter-ucx", {"MOECCL_NET=ucx", "MP_RANKS_PER_NODE=1", "MP_SUBTESTS=shorter"}, "2"},
#endif
    {"small-shm", {"MOECCL_SHM_EAGER_SIZE=256", "MOECCL_SHM_SLOTS=2", "MOECCL_SHM_CHUNK_SIZE=40000"}, "3"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  return mp_main(argc, argv, mp_default_ranks, body, NULL, 120, variants);
}
