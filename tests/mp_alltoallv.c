/*
 * mp_alltoallv.c - moecclAlltoAllv with MoE-shaped traffic on 1..8 forked
 * ranks: random uneven splits, many zero blocks, one hot destination with 80%
 * of the tokens, an all-zero call (also with NULL buffers), splits that change
 * every iteration (top-2 routing), 80-150 calls with random scenario, element
 * size and layout, overlapping send blocks, in place (sendbuff == recvbuff),
 * and about 2 MiB per rank.  Blocks are laid out with gaps and in reversed
 * or shuffled order in both buffers.  Element sizes 1, 2, 4 and 8.
 *
 * Every rank derives the whole count matrix from the seed, so its recvcounts
 * match what the others send.  Displacements are local: each rank lays out
 * its own buffers.  Bytes outside the blocks are filled with a sentinel and
 * must stay untouched, in the receive and in the send buffer.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "mp_harness.h"

#define GUARD_BYTES 128

enum scenario { UNIFORM, SPARSE, SKEWED, ALL_ZERO, MOE, LARGE };
static const char* scenario_name[] = {"uniform", "sparse", "skewed", "all-zero", "moe", "large"};

enum order { ORDER_PACKED, ORDER_GAPS, ORDER_REVERSED_GAPS, ORDER_SHUFFLED_GAPS };

typedef struct {
  enum scenario scenario;
  uint64_t seed;
  size_t elsize;
  enum order order;
  int iter;
} vcase;

/* counts[src*n+dst], the same on every rank for the same case. */
static void make_matrix(const vcase* c, int n, size_t* m) {
  mp_rng rng;
  mp_rng_seed(&rng, c->seed);
  for (int s = 0; s < n; s++) {
    size_t* row = m + (size_t)s * n;
    for (int d = 0; d < n; d++) row[d] = 0;
    switch (c->scenario) {
      case UNIFORM:
        for (int d = 0; d < n; d++) row[d] = mp_rng_below(&rng, 10) < 4 ? 0 : mp_rng_below(&rng, 3000);
        break;
      case SPARSE: /* most blocks empty, a few tiny ones */
        for (int d = 0; d < n; d++) row[d] = mp_rng_below(&rng, 10) < 8 ? 0 : 1 + mp_rng_below(&rng, 40);
        break;
      case SKEWED: { /* 80% of each rank's tokens go to one hot expert */
        int hot = c->iter % n;
        size_t tokens = 200 + mp_rng_below(&rng, 200), hidden = 16;
        row[hot] = tokens * 8 / 10 * hidden;
        size_t rest = tokens - tokens * 8 / 10;
        for (size_t t = 0; t < rest; t++) row[mp_rng_below(&rng, (uint64_t)n)] += hidden;
        break;
      }
      case ALL_ZERO:
        break;
      case MOE: { /* top-2 routing of a changing number of tokens */
        size_t tokens = 64 + mp_rng_below(&rng, 192), hidden = 32;
        for (size_t t = 0; t < tokens; t++) {
          int e1 = (int)mp_rng_below(&rng, (uint64_t)n), e2 = (int)mp_rng_below(&rng, (uint64_t)n);
          row[e1] += hidden;
          if (e2 != e1) row[e2] += hidden;
        }
        break;
      }
      case LARGE: /* about 2 MiB of 8-byte elements per rank, uneven */
        for (int d = 0; d < n; d++) row[d] = (256 * 1024 / (size_t)n) * (1 + mp_rng_below(&rng, 100)) / 50;
        break;
    }
  }
}

/* Places n blocks of counts[] in a buffer, in the given order, with gaps;
 * returns the extent in elements. */
static size_t layout(mp_rng* rng, int n, const size_t* counts, size_t* displs, enum order order) {
  int perm[256];
  for (int i = 0; i < n; i++) perm[i] = (order == ORDER_REVERSED_GAPS) ? n - 1 - i : i;
  if (order == ORDER_SHUFFLED_GAPS)
    for (int i = n - 1; i > 0; i--) {
      int j = (int)mp_rng_below(rng, (uint64_t)i + 1), t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
  size_t pos = 0;
  for (int k = 0; k < n; k++) {
    if (order != ORDER_PACKED) pos += mp_rng_below(rng, 8);
    displs[perm[k]] = pos;
    pos += counts[perm[k]];
  }
  if (order != ORDER_PACKED) pos += mp_rng_below(rng, 8);
  return pos;
}

/* Checks the blocks, then blanks them, so what is left must be all sentinel. */
static int check_blocks_and_gaps(const char* what, unsigned char* buf, size_t extent_bytes,
                                 int n, const size_t* counts, const size_t* displs, size_t elsize,
                                 uint64_t seed, int me, int is_recv) {
  char msg[160];
  for (int p = 0; p < n; p++) {
    snprintf(msg, sizeof(msg), "%s block %d", what, p);
    int src = is_recv ? p : me, dst = is_recv ? me : p;
    MP_CHECK_BLOCK(msg, buf + displs[p] * elsize, elsize, counts[p], seed, src, dst, 0);
  }
  for (int p = 0; p < n; p++) mp_fill_sentinel(buf + displs[p] * elsize, counts[p] * elsize);
  snprintf(msg, sizeof(msg), "%s gaps and guard", what);
  MP_CHECK_SENTINEL(msg, buf, extent_bytes + GUARD_BYTES);
  return 0;
}

static int run_case(moecclComm_t comm, int rank, int n, const vcase* c) {
  size_t* m = mp_xmalloc(sizeof(size_t) * (size_t)n * (size_t)n);
  size_t* v = mp_xmalloc(sizeof(size_t) * 4 * (size_t)n);
  size_t *scounts = v, *sdispls = v + n, *rcounts = v + 2 * n, *rdispls = v + 3 * n;
  make_matrix(c, n, m);
  for (int p = 0; p < n; p++) {
    scounts[p] = m[(size_t)rank * n + p];
    rcounts[p] = m[(size_t)p * n + rank];
  }
  mp_rng rng;
  mp_rng_seed(&rng, c->seed ^ mp_mix64((uint64_t)rank + 1000));
  size_t sext = layout(&rng, n, scounts, sdispls, c->order);
  size_t rext = layout(&rng, n, rcounts, rdispls, c->order);
  size_t es = c->elsize;
  moecclDataType_t dt = mp_dtype_of_size(es);
  unsigned char* send = mp_xmalloc(sext * es + GUARD_BYTES);
  unsigned char* recv = mp_xmalloc(rext * es + GUARD_BYTES);
  mp_fill_sentinel(send, sext * es + GUARD_BYTES);
  mp_fill_sentinel(recv, rext * es + GUARD_BYTES);
  for (int p = 0; p < n; p++) mp_fill(send + sdispls[p] * es, es, scounts[p], c->seed, rank, p, 0);

  char what[128];
  snprintf(what, sizeof(what), "alltoallv %s iter %d elsize %zu order %d", scenario_name[c->scenario],
           c->iter, es, (int)c->order);
  moecclResult_t res = moecclAlltoAllv(send, scounts, sdispls, recv, rcounts, rdispls, dt, comm, NULL);
  int rc = 0;
  if (res != moecclSuccess) {
    mp_failf(__FILE__, __LINE__, "%s: moecclAlltoAllv returned %d (%s): %s", what, (int)res,
             moecclGetErrorString(res), mp_last_error_text(comm));
    rc = 1;
  }
  char sw[160];
  snprintf(sw, sizeof(sw), "%s recvbuff", what);
  if (!rc) rc = check_blocks_and_gaps(sw, recv, rext * es, n, rcounts, rdispls, es, c->seed, rank, 1);
  snprintf(sw, sizeof(sw), "%s sendbuff (must not change)", what);
  if (!rc) rc = check_blocks_and_gaps(sw, send, sext * es, n, scounts, sdispls, es, c->seed, rank, 0);
  free(send);
  free(recv);
  free(m);
  free(v);
  return rc;
}

/* The receive blocks of an in-place call, then every other byte against
 * before, the buffer as the call started. */
static int check_inplace(const char* what, unsigned char* buf, const unsigned char* before,
                         size_t bytes, int n, const size_t* rcounts, const size_t* rdispls,
                         size_t es, uint64_t seed, int me) {
  for (int p = 0; p < n; p++) {
    MP_CHECK_BLOCK(what, buf + rdispls[p] * es, es, rcounts[p], seed, p, me, 0);
    memcpy(buf + rdispls[p] * es, before + rdispls[p] * es, rcounts[p] * es);
  }
  for (size_t i = 0; i < bytes; i++)
    MP_CHECK(buf[i] == before[i], "%s: byte %zu of %zu, outside the receive blocks, changed", what,
             i, bytes);
  return 0;
}

/* In place (sendbuff == recvbuff): the send and the receive blocks are laid
 * out in one buffer, the send blocks moved up by shift elements (0: both
 * extents start at 0; rext/2: they overlap in part; rext: they lie apart).
 * What the man page promises, and all that is checked: each receive block
 * holds what its peer sent out of its buffer as the call started, and every
 * other byte of the buffer (send data where no block lands, gaps, guard)
 * keeps the value it had then. */
static int run_inplace(moecclComm_t comm, int rank, int n, const vcase* c, int shift_kind) {
  size_t* m = mp_xmalloc(sizeof(size_t) * (size_t)n * (size_t)n);
  size_t* v = mp_xmalloc(sizeof(size_t) * 4 * (size_t)n);
  size_t *scounts = v, *sdispls = v + n, *rcounts = v + 2 * n, *rdispls = v + 3 * n;
  make_matrix(c, n, m);
  for (int p = 0; p < n; p++)
    scounts[p] = m[(size_t)rank * n + p], rcounts[p] = m[(size_t)p * n + rank];
  mp_rng rng;
  mp_rng_seed(&rng, c->seed ^ mp_mix64((uint64_t)rank + 2000));
  size_t sext = layout(&rng, n, scounts, sdispls, c->order);
  size_t rext = layout(&rng, n, rcounts, rdispls, c->order);
  size_t shift = shift_kind == 0 ? 0 : shift_kind == 1 ? rext / 2 : rext, es = c->elsize;
  for (int p = 0; p < n; p++) sdispls[p] += shift;
  sext += shift;
  size_t bytes = (sext > rext ? sext : rext) * es + GUARD_BYTES;
  unsigned char* buf = mp_xmalloc(bytes);
  unsigned char* before = mp_xmalloc(bytes);
  mp_fill_sentinel(buf, bytes);
  for (int p = 0; p < n; p++) mp_fill(buf + sdispls[p] * es, es, scounts[p], c->seed, rank, p, 0);
  memcpy(before, buf, bytes);
  char what[160];
  snprintf(what, sizeof(what), "in-place alltoallv %s iter %d elsize %zu order %d shift %zu",
           scenario_name[c->scenario], c->iter, es, (int)c->order, shift);
  moecclResult_t res = moecclAlltoAllv(buf, scounts, sdispls, buf, rcounts, rdispls,
                                       mp_dtype_of_size(es), comm, NULL);
  int rc = 0;
  if (res != moecclSuccess) {
    mp_failf(__FILE__, __LINE__, "%s: moecclAlltoAllv returned %d (%s): %s", what, (int)res,
             moecclGetErrorString(res), mp_last_error_text(comm));
    rc = 1;
  }
  if (!rc) rc = check_inplace(what, buf, before, bytes, n, rcounts, rdispls, es, c->seed, rank);
  free(buf);
  free(before);
  free(m);
  free(v);
  return rc;
}

static uint64_t seed_of(int n, int step) { return mp_mix64(((uint64_t)n << 40) ^ 0xA11A11ull ^ (uint64_t)step); }

static const size_t elsizes[] = {1, 2, 4, 8};

static int run_all_sizes(moecclComm_t comm, int rank, int n, enum scenario s, int iters,
                         enum order order, int* step) {
  for (int it = 0; it < iters; it++)
    for (int e = 0; e < 4; e++) {
      vcase c = {s, seed_of(n, (*step)++), elsizes[e], order, it};
      if (run_case(comm, rank, n, &c)) return 1;
    }
  return 0;
}

/* All counts zero: with real buffers, and with NULL buffers. */
static int all_zero(moecclComm_t comm, int rank, int n, int* step) {
  vcase c = {ALL_ZERO, seed_of(n, (*step)++), 4, ORDER_GAPS, 0};
  if (run_case(comm, rank, n, &c)) return 1;
  size_t* zeros = calloc((size_t)n, sizeof(size_t));
  MP_CHECK(zeros, "calloc");
  moecclResult_t r = moecclAlltoAllv(NULL, zeros, zeros, NULL, zeros, zeros, moecclFloat32, comm, NULL);
  free(zeros);
  MP_CHECK(r == moecclSuccess, "all-zero alltoallv with NULL buffers returned %d (%s): %s", (int)r,
           moecclGetErrorString(r), mp_last_error_text(comm));
  return 0;
}

/* Send blocks may overlap each other (man page): every rank sends windows of
 * one shared region, block j starting at element (j*37)%100. */
static int overlapping_send_blocks(moecclComm_t comm, int rank, int n, int* step) {
  uint64_t seed = seed_of(n, (*step)++);
  size_t* v = mp_xmalloc(sizeof(size_t) * 4 * (size_t)n);
  size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n, region = 0, rpos = 0;
  for (int p = 0; p < n; p++) {
    sc[p] = 50 + (size_t)((rank * 7 + p * 3) % 200), sd[p] = (size_t)(p * 37) % 100;
    if (sd[p] + sc[p] > region) region = sd[p] + sc[p];
    rc[p] = 50 + (size_t)((p * 7 + rank * 3) % 200), rd[p] = rpos, rpos += rc[p];
  }
  unsigned char* send = mp_xmalloc(region * 4);
  unsigned char* recv = mp_xmalloc(rpos * 4 + GUARD_BYTES);
  mp_fill(send, 4, region, seed, rank, -1, 0);
  mp_fill_sentinel(recv, rpos * 4 + GUARD_BYTES);
  MP_OK_COMM(comm, moecclAlltoAllv(send, sc, sd, recv, rc, rd, moecclInt32, comm, NULL));
  for (int p = 0; p < n; p++) /* p's block for me starts at its element (rank*37)%100 */
    MP_CHECK_BLOCK("alltoallv with overlapping send blocks", recv + rd[p] * 4, 4, rc[p], seed, p, -1,
                   (size_t)(rank * 37) % 100);
  MP_CHECK_SENTINEL("alltoallv with overlapping send blocks: guard", recv + rpos * 4, GUARD_BYTES);
  MP_CHECK_BLOCK("alltoallv with overlapping send blocks: sendbuff changed", send, 4, region, seed, rank, -1, 0);
  free(send);
  free(recv);
  free(v);
  return 0;
}

/* In place: every scenario but the large one, each layout, element size
 * and shift of the send blocks; then the large one. */
static int in_place(moecclComm_t comm, int rank, int n, int* step) {
  for (int it = 0; it < 24; it++) {
    vcase c = {(enum scenario)(it % (MOE + 1)), seed_of(n, (*step)++), elsizes[it % 4],
               (enum order)(it / 2 % 4), it};
    if (run_inplace(comm, rank, n, &c, it % 3)) return 1;
  }
  vcase c = {LARGE, seed_of(n, (*step)++), 8, ORDER_SHUFFLED_GAPS, 0};
  return run_inplace(comm, rank, n, &c, 1);
}

/* MoE training loop: the split changes every iteration, element size too. */
static int moe_loop(moecclComm_t comm, int rank, int n, int* step) {
  for (int it = 0; it < 20; it++) {
    vcase c = {MOE, seed_of(n, (*step)++), elsizes[(it / 2) % 4], (enum order)(it % 4), it};
    if (run_case(comm, rank, n, &c)) return 1;
  }
  return 0;
}

/* Random scenario, element size and layout on every call. */
static int fuzz(moecclComm_t comm, int rank, int n, int* step) {
  mp_rng rng;
  mp_rng_seed(&rng, 0xF0222 + (uint64_t)n);
  int iters = n > 4 ? 80 : 150;
  for (int it = 0; it < iters; it++) {
    enum scenario sc = (enum scenario)mp_rng_below(&rng, MOE + 1); /* not LARGE */
    vcase c = {sc, seed_of(n, (*step)++), elsizes[mp_rng_below(&rng, 4)], (enum order)mp_rng_below(&rng, 4), it};
    if (run_case(comm, rank, n, &c)) return 1;
  }
  return 0;
}

/* Two ranks whose calls disagree on one block, rank 0 to rank 1
 * (MP_DISAGREE; run over the network, where rank 1 learns the size from
 * rank 0's header): "short", 200,000 bytes sent where 300,000 are
 * expected (taken, as a shorter message); "long", 300,000 where 200,000 are
 * expected (both ranks fail with a text, nothing written past the block);
 * "eager", 1,000 where 200,000 are expected (rank 1 fails with a text).  No
 * rank may wait for ever.  Ends the body: the communicator may be failed. */
static int disagree(moecclComm_t comm, int rank, const char* mode) {
  size_t sent = 200000, expected = 300000;
  if (strcmp(mode, "long") == 0) sent = 300000, expected = 200000;
  else if (strcmp(mode, "eager") == 0) sent = 1000, expected = 200000;
  else MP_CHECK(strcmp(mode, "short") == 0, "MP_DISAGREE=%s: not short, long or eager", mode);
  const size_t other = 150000, cap = 300000;
  size_t sc[2], rc[2], sd[2] = {0, cap}, rd[2] = {0, cap};
  sc[rank] = rc[rank] = other;
  sc[1 - rank] = rank == 0 ? sent : other;
  rc[1 - rank] = rank == 1 ? expected : other;
  unsigned char* send = mp_xmalloc(2 * cap);
  unsigned char* recv = mp_xmalloc(2 * cap + GUARD_BYTES);
  for (size_t i = 0; i < 2 * cap; i++) send[i] = (unsigned char)(i * 7 + (size_t)rank);
  memset(recv, 0xA5, 2 * cap + GUARD_BYTES);
  moecclResult_t res =
      moecclAlltoAllv(send, sc, sd, recv, rc, rd, moecclUint8, comm, NULL);
  int bad = 0;
  if (strcmp(mode, "short") == 0) {
    MP_CHECK(res == moecclSuccess, "short: rank %d: moecclAlltoAllv returned %d: %s", rank,
             (int)res, mp_last_error_text(comm));
    if (rank == 1) /* rank 0's block: its 200,000 bytes, then the rest untouched */
      for (size_t i = 0; i < expected; i++)
        bad += recv[i] != (i < sent ? (unsigned char)((cap + i) * 7) : 0xA5);
  } else if (strcmp(mode, "long") == 0) {
    MP_CHECK(res != moecclSuccess, "long: rank %d: the call succeeded", rank);
    if (rank == 1)
      for (size_t i = expected; i < cap; i++) bad += recv[i] != 0xA5;
  } else if (rank == 1) {
    MP_CHECK(res == moecclInvalidUsage, "eager: rank 1: moecclAlltoAllv returned %d, want %d: %s",
             (int)res, (int)moecclInvalidUsage, mp_last_error_text(comm));
    MP_CHECK(strstr(mp_last_error_text(comm), "disagree") != NULL,
             "eager: rank 1: the text does not say the ranks disagree: %s",
             mp_last_error_text(comm));
  }
  MP_CHECK(!bad, "%s: rank %d: %d bytes of the receive buffer wrong", mode, rank, bad);
  if (res != moecclSuccess) printf("rank %d (%s): %s\n", rank, mode, mp_last_error_text(comm));
  free(send);
  free(recv);
  return 0;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  int step = 0;
  const char* dis = getenv("MP_DISAGREE");
  if (dis && *dis) return n == 2 ? disagree(comm, rank, dis) : 0;
  if (mp_want("uniform")) {
    if (run_all_sizes(comm, rank, n, UNIFORM, 1, ORDER_PACKED, &step)) return 1;
    if (run_all_sizes(comm, rank, n, UNIFORM, 2, ORDER_SHUFFLED_GAPS, &step)) return 1;
  }
  if (mp_want("sparse") && run_all_sizes(comm, rank, n, SPARSE, 2, ORDER_GAPS, &step)) return 1;
  if (mp_want("skewed") && run_all_sizes(comm, rank, n, SKEWED, 2, ORDER_REVERSED_GAPS, &step)) return 1;
  if (mp_want("zero") && all_zero(comm, rank, n, &step)) return 1;
  if (mp_want("moe") && moe_loop(comm, rank, n, &step)) return 1;
  if (mp_want("fuzz") && fuzz(comm, rank, n, &step)) return 1;
  if (mp_want("overlap") && overlapping_send_blocks(comm, rank, n, &step)) return 1;
  if (mp_want("inplace") && in_place(comm, rank, n, &step)) return 1;
  for (int it = 0; it < 2 && mp_want("large"); it++) {
    vcase c = {LARGE, seed_of(n, step++), 8, it ? ORDER_SHUFFLED_GAPS : ORDER_PACKED, it};
    if (run_case(comm, rank, n, &c)) return 1;
  }
  return 0;
}

/* The same checks under other algorithms and shared-memory settings. */
static const mp_variant variants[] = {
#ifdef MOECCL_HAVE_LIBFABRIC
    /* calls that disagree on a block's size, over ofi (early CTS) */
    {"disagree-short-ofi",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MP_RANKS_PER_NODE=1", "MP_DISAGREE=short"},
     "2"},
    {"disagree-long-ofi",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MP_RANKS_PER_NODE=1", "MP_DISAGREE=long"},
     "2"},
    {"disagree-eager-ofi",
     {"MOECCL_NET=ofi", "MOECCL_OFI_PROVIDER=tcp", "MP_RANKS_PER_NODE=1", "MP_DISAGREE=eager"},
     "2"},
#endif
    {"algo-direct", {"MOECCL_ALGO=direct"}, "4"},
    {"algo-pairwise", {"MOECCL_ALGO=pairwise"}, "5"},
    {"no-cma", {"MOECCL_CMA_DISABLE=1"}, "3"},
    {"small-shm", {"MOECCL_SHM_EAGER_SIZE=256", "MOECCL_SHM_SLOTS=2", "MOECCL_SHM_CHUNK_SIZE=40000"}, "3"},
    {"nt-copy", {"MOECCL_NT_COPY_SIZE=1", "MOECCL_SHM_CHUNK_SIZE=40000"}, "3"},
    {NULL, {NULL}, NULL},
};

int main(int argc, char** argv) {
  int rc = mp_main(argc, argv, mp_default_ranks, body, NULL, 120, variants);
  return mp_fold(rc, mp_run_variants(argc, argv, mp_topo_variants, 120));
}
