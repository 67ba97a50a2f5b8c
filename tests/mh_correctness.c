/*
 * mh_correctness.c - the collectives across hosts: network namespaces as
 * hosts (tests/mh_harness.h), shared memory between the ranks of a host and
 * the network transport between hosts, for MOECCL_NET=ofi
 * (MOECCL_OFI_PROVIDER=tcp) and MOECCL_NET=ucx (UCX_TLS=tcp), on 2, 3 and 4
 * hosts of 2 ranks (3 hosts also with ranks dealt round-robin).
 *
 *   types      alltoall of several datatypes, counts 0 .. 1 MiB per rank,
 *              blocks around the network eager size (64 KiB) and, on 2
 *              hosts, past the network chunk size (1 MiB)
 *   v          alltoallv: random uneven splits, zero blocks, gaps and
 *              permuted block order on both sides; bytes outside the blocks
 *              must stay untouched
 *   p2p        grouped send/recv: all shifts at once, several messages per
 *              pair in order, self and zero-size messages, ungrouped pairs
 *   split      comm split per host (shared memory only), across hosts (one
 *              rank per host: network only), with NOCOLOR and reversed keys
 *   repeated   random sizes and types, many calls on one communicator
 *   memalloc   moecclMemAlloc buffers over the network
 *   stream     alltoallv on a host stream
 *
 * A variant whose transport is not in this build skips (moecclInvalidUsage
 * from init); one that is there must pass.  MH_SAME_HOSTID=1 runs the same
 * suite with every rank on one MOECCL_HOSTID (shared memory only), which
 * validates the harness without a network transport.  MP_SUBTESTS=v,p2p
 * runs only some parts; MH_HOSTS=2,4 and MH_VARIANTS=ofi choose the cases.
 */
#include <stdlib.h>

#include "mh_harness.h"

#define GUARD 256

static uint64_t seed_of(int nranks, int step) { return mp_mix64(((uint64_t)nranks << 40) ^ 0xC0FFEEull ^ (uint64_t)step); }

/* ---- alltoall ------------------------------------------------------------- */

static int a2a_checked(moecclComm_t comm, int rank, int n, moecclDataType_t dt, size_t count, uint64_t seed,
                       unsigned char* send, unsigned char* recv, const char* tag) {
  size_t es = mp_dtype_size(dt), block = count * es, total = block * (size_t)n;
  for (int j = 0; j < n; j++) mp_fill(send + j * block, es, count, seed, rank, j, 0);
  mp_fill_sentinel(recv, total + GUARD);
  MP_OK_COMM(comm, moecclAlltoAll(send, recv, count, dt, comm, NULL));
  char what[160];
  for (int i = 0; i < n; i++) {
    snprintf(what, sizeof(what), "%s alltoall %s count %zu from rank %d (host %d)", tag, mp_dtypes[dt].name, count,
             i, mh_rank_host(i));
    MP_CHECK_BLOCK(what, recv + i * block, es, count, seed, i, rank, 0);
  }
  for (int j = 0; j < n; j++) {
    snprintf(what, sizeof(what), "%s alltoall %s count %zu: send block %d changed", tag, mp_dtypes[dt].name, count, j);
    MP_CHECK_BLOCK(what, send + j * block, es, count, seed, rank, j, 0);
  }
  snprintf(what, sizeof(what), "%s alltoall %s count %zu: guard past recvbuff", tag, mp_dtypes[dt].name, count);
  MP_CHECK_SENTINEL(what, recv + total, GUARD);
  return 0;
}

static int a2a_fresh(moecclComm_t comm, int rank, int n, moecclDataType_t dt, size_t count, uint64_t seed,
                     const char* tag) {
  size_t total = count * mp_dtype_size(dt) * (size_t)n;
  unsigned char* s = mp_xmalloc(total + GUARD);
  unsigned char* r = mp_xmalloc(total + GUARD);
  int rc = a2a_checked(comm, rank, n, dt, count, seed, s, r, tag);
  free(s);
  free(r);
  return rc;
}

static int types(moecclComm_t comm, int rank, int n, int* step) {
  const moecclDataType_t dts[] = {moecclInt8, moecclBfloat16, moecclFloat32, moecclUint64, moecclFloat8e5m2};
  for (size_t t = 0; t < sizeof(dts) / sizeof(dts[0]); t++) {
    size_t es = mp_dtype_size(dts[t]);
    size_t counts[] = {0, 1, 7, 1000, 16384 / es, (1u << 20) / ((size_t)n * es)}; /* the last: 1 MiB per rank */
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
      if (a2a_fresh(comm, rank, n, dts[t], counts[c], seed_of(n, (*step)++), "types")) return 1;
  }
  MP_OK_COMM(comm, moecclAlltoAll(NULL, NULL, 0, moecclFloat32, comm, NULL));
  /* Blocks around the network eager size, byte-sized elements. */
  size_t edges[] = {65535, 65536, 65537, 3 * 65536 + 5};
  for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]); e++)
    if (a2a_fresh(comm, rank, n, moecclUint8, edges[e], seed_of(n, (*step)++), "eager-edge")) return 1;
  /* Past the network chunk size (1 MiB), odd length: on the smallest job only. */
  if (mh_nhosts == 2 && n <= 4)
    if (a2a_fresh(comm, rank, n, moecclUint8, (1u << 20) + 3, seed_of(n, (*step)++), "chunk-edge")) return 1;
  return 0;
}

/* ---- alltoallv ------------------------------------------------------------ */

/* Elements src sends to dst in round `seed`: every rank computes the same. */
static size_t v_count(uint64_t seed, int src, int dst, size_t max_elems) {
  uint64_t h = mp_mix64(seed ^ ((uint64_t)(src + 1) << 20) ^ (uint64_t)(dst + 1));
  if (h % 5 == 0 || max_elems == 0) return 0; /* a zero block */
  size_t bits = 0;
  while (((size_t)1 << bits) < max_elems) bits++;
  size_t c = (size_t)1 << ((h >> 8) % (bits + 1)); /* log-uniform */
  c += (h >> 24) % c;
  return c > max_elems ? max_elems : c;
}

/* Lays out blocks of counts[] in a permuted order with random gaps; writes
 * displacements and returns the extent in elements. */
static size_t v_layout(mp_rng* rng, int n, const size_t* counts, size_t* displs) {
  int order[MH_MAX_RANKS];
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)mp_rng_below(rng, (uint64_t)i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  size_t pos = 0;
  for (int i = 0; i < n; i++) {
    pos += mp_rng_below(rng, 4) == 0 ? 0 : mp_rng_below(rng, 17); /* a gap, or none */
    displs[order[i]] = pos;
    pos += counts[order[i]];
  }
  return pos + mp_rng_below(rng, 9);
}

static int v_round(moecclComm_t comm, int rank, int n, moecclDataType_t dt, size_t max_elems, uint64_t seed,
                   moecclStream_t stream) {
  size_t es = mp_dtype_size(dt);
  size_t sc[MH_MAX_RANKS], sd[MH_MAX_RANKS], rc[MH_MAX_RANKS], rd[MH_MAX_RANKS];
  for (int p = 0; p < n; p++) {
    sc[p] = v_count(seed, rank, p, max_elems);
    rc[p] = v_count(seed, p, rank, max_elems);
  }
  mp_rng rng;
  mp_rng_seed(&rng, seed ^ (uint64_t)rank * 7919);
  size_t sext = v_layout(&rng, n, sc, sd), rext = v_layout(&rng, n, rc, rd);
  unsigned char* s = mp_xmalloc(sext * es + 1);
  unsigned char* r = mp_xmalloc(rext * es + GUARD);
  unsigned char* mask = calloc(rext * es + GUARD, 1);
  MP_CHECK(mask, "out of memory");
  mp_fill_sentinel(s, sext * es);
  for (int p = 0; p < n; p++) mp_fill(s + sd[p] * es, es, sc[p], seed, rank, p, 0);
  mp_fill_sentinel(r, rext * es + GUARD);
  moecclResult_t res = moecclAlltoAllv(s, sc, sd, r, rc, rd, dt, comm, stream);
  if (res == moecclSuccess && stream) res = moecclHostStreamSynchronize(stream);
  MP_OK_COMM(comm, res);
  char what[160];
  for (int p = 0; p < n; p++) {
    snprintf(what, sizeof(what), "alltoallv %s (max %zu) block from rank %d (host %d), %zu elements at %zu",
             mp_dtypes[dt].name, max_elems, p, mh_rank_host(p), rc[p], rd[p]);
    MP_CHECK_BLOCK(what, r + rd[p] * es, es, rc[p], seed, p, rank, 0);
    memset(mask + rd[p] * es, 1, rc[p] * es);
    snprintf(what, sizeof(what), "alltoallv %s: send block %d changed", mp_dtypes[dt].name, p);
    MP_CHECK_BLOCK(what, s + sd[p] * es, es, sc[p], seed, rank, p, 0);
  }
  for (size_t i = 0; i < rext * es + GUARD; i++)
    MP_CHECK(mask[i] || r[i] == MP_SENTINEL, "alltoallv %s (max %zu): byte %zu of %zu outside every block written (0x%02x)",
             mp_dtypes[dt].name, max_elems, i, rext * es, r[i]);
  free(mask);
  free(s);
  free(r);
  return 0;
}

static int alltoallv(moecclComm_t comm, int rank, int n, int* step) {
  const struct {
    moecclDataType_t dt;
    size_t max_elems;
  } rounds[] = {
      {moecclInt8, 0},          {moecclInt8, 40},        {moecclFloat16, 3000},  {moecclInt32, 20000},
      {moecclFloat64, 16384},   {moecclUint8, 200000},   {moecclBfloat16, 9},    {moecclUint32, 70000},
  };
  for (size_t i = 0; i < sizeof(rounds) / sizeof(rounds[0]); i++)
    if (v_round(comm, rank, n, rounds[i].dt, rounds[i].max_elems, seed_of(n, (*step)++), NULL)) return 1;
  return 0;
}

/* ---- grouped send / recv -------------------------------------------------- */

static size_t p2p_count(uint64_t seed, int src, int dst, int msg) {
  uint64_t h = mp_mix64(seed ^ ((uint64_t)src << 32) ^ ((uint64_t)dst << 16) ^ (uint64_t)msg);
  switch (h % 6) {
    case 0: return 0;
    case 1: return 1 + h % 64;
    case 2: return 16384 + (h >> 8) % 3;
    case 3: return 65536 + (h >> 8) % 3 - 1;
    default: return (h >> 8) % 150000;
  }
}

/* In one group: every rank sends nmsg messages to every rank (itself too)
 * and receives as many from each; messages of one pair must match in order. */
static int p2p_all(moecclComm_t comm, int rank, int n, int nmsg, uint64_t seed) {
  int total = n * nmsg;
  unsigned char** sb = calloc((size_t)total, sizeof(*sb));
  unsigned char** rb = calloc((size_t)total, sizeof(*rb));
  MP_CHECK(sb && rb, "out of memory");
  MP_OK_COMM(comm, moecclGroupStart());
  for (int k = 0; k < n; k++) {
    int dst = (rank + k) % n, src = (rank - k + n) % n;
    for (int m = 0; m < nmsg; m++) {
      size_t sc = p2p_count(seed, rank, dst, m), rc = p2p_count(seed, src, rank, m);
      unsigned char* s = sb[dst * nmsg + m] = mp_xmalloc(sc * 4);
      unsigned char* r = rb[src * nmsg + m] = mp_xmalloc(rc * 4 + GUARD);
      mp_fill(s, 4, sc, seed + (uint64_t)m, rank, dst, 0);
      mp_fill_sentinel(r, rc * 4 + GUARD);
      MP_OK_COMM(comm, moecclSend(s, sc, moecclInt32, dst, comm, NULL));
      MP_OK_COMM(comm, moecclRecv(r, rc, moecclInt32, src, comm, NULL));
    }
  }
  MP_OK_COMM(comm, moecclGroupEnd());
  char what[160];
  for (int src = 0; src < n; src++)
    for (int m = 0; m < nmsg; m++) {
      size_t rc = p2p_count(seed, src, rank, m);
      snprintf(what, sizeof(what), "grouped p2p message %d of %d from rank %d (host %d), %zu elements", m, nmsg, src,
               mh_rank_host(src), rc);
      MP_CHECK_BLOCK(what, rb[src * nmsg + m], 4, rc, seed + (uint64_t)m, src, rank, 0);
      MP_CHECK_SENTINEL(what, rb[src * nmsg + m] + rc * 4, GUARD);
    }
  for (int i = 0; i < total; i++) free(sb[i]), free(rb[i]);
  free(sb);
  free(rb);
  return 0;
}

/* Ungrouped blocking pairs: r and its partner on another host (when there
 * is one); the lower rank sends first. */
static int p2p_pairs(moecclComm_t comm, int rank, int n, uint64_t seed) {
  /* A matching every rank computes alike: each unmatched rank, in order,
   * takes the first unmatched higher rank of another host. */
  int match[MH_MAX_RANKS];
  for (int r = 0; r < n; r++) match[r] = -1;
  for (int r = 0; r < n; r++)
    for (int q = r + 1; q < n && match[r] < 0; q++)
      if (match[q] < 0 && mh_rank_host(q) != mh_rank_host(r)) match[r] = q, match[q] = r;
  int partner = match[rank];
  if (partner < 0) return 0;
  size_t counts[] = {1, 4096, 300000};
  for (int i = 0; i < 3; i++) {
    size_t c = counts[i];
    unsigned char* s = mp_xmalloc(c * 8);
    unsigned char* r = mp_xmalloc(c * 8 + GUARD);
    mp_fill(s, 8, c, seed + (uint64_t)i, rank, partner, 0);
    mp_fill_sentinel(r, c * 8 + GUARD);
    if (rank < partner) {
      MP_OK_COMM(comm, moecclSend(s, c, moecclUint64, partner, comm, NULL));
      MP_OK_COMM(comm, moecclRecv(r, c, moecclUint64, partner, comm, NULL));
    } else {
      MP_OK_COMM(comm, moecclRecv(r, c, moecclUint64, partner, comm, NULL));
      MP_OK_COMM(comm, moecclSend(s, c, moecclUint64, partner, comm, NULL));
    }
    char what[128];
    snprintf(what, sizeof(what), "ungrouped p2p %zu elements from rank %d", c, partner);
    MP_CHECK_BLOCK(what, r, 8, c, seed + (uint64_t)i, partner, rank, 0);
    MP_CHECK_SENTINEL(what, r + c * 8, GUARD);
    free(s);
    free(r);
  }
  return 0;
}

/* Ranks of other hosts only, in a ring over hosts: host h sends to host h+1. */
static int p2p_host_ring(moecclComm_t comm, int rank, int n, uint64_t seed) {
  int to = -1, from = -1;
  int my_host = mh_rank_host(rank), local = 0;
  for (int r = 0; r < rank; r++) local += mh_rank_host(r) == my_host;
  /* the rank with the same local index on the next and previous host */
  int want_to = (my_host + 1) % mh_nhosts, want_from = (my_host - 1 + mh_nhosts) % mh_nhosts;
  int lt = 0, lf = 0;
  for (int r = 0; r < n; r++) {
    if (mh_rank_host(r) == want_to && lt++ == local) to = r;
    if (mh_rank_host(r) == want_from && lf++ == local) from = r;
  }
  MP_CHECK(to >= 0 && from >= 0, "host ring: no peer");
  size_t c = 200003;
  unsigned char* s = mp_xmalloc(c * 2);
  unsigned char* r = mp_xmalloc(c * 2 + GUARD);
  mp_fill(s, 2, c, seed, rank, to, 0);
  mp_fill_sentinel(r, c * 2 + GUARD);
  MP_OK_COMM(comm, moecclGroupStart());
  MP_OK_COMM(comm, moecclRecv(r, c, moecclFloat16, from, comm, NULL));
  MP_OK_COMM(comm, moecclSend(s, c, moecclFloat16, to, comm, NULL));
  MP_OK_COMM(comm, moecclGroupEnd());
  MP_CHECK_BLOCK("host ring", r, 2, c, seed, from, rank, 0);
  MP_CHECK_SENTINEL("host ring guard", r + c * 2, GUARD);
  free(s);
  free(r);
  return 0;
}

static int p2p(moecclComm_t comm, int rank, int n, int* step) {
  if (p2p_all(comm, rank, n, 1, seed_of(n, (*step)++))) return 1;
  if (p2p_all(comm, rank, n, 3, seed_of(n, (*step)++))) return 1;
  if (p2p_host_ring(comm, rank, n, seed_of(n, (*step)++))) return 1;
  return p2p_pairs(comm, rank, n, seed_of(n, (*step)++));
}

/* ---- comm split ----------------------------------------------------------- */

static int check_child(moecclComm_t child, int expect_rank, int expect_n, const char* what, int* step) {
  int cr = -1, cn = -1;
  MP_OK_COMM(child, moecclCommUserRank(child, &cr));
  MP_OK_COMM(child, moecclCommCount(child, &cn));
  MP_CHECK(cr == expect_rank && cn == expect_n, "%s: rank %d of %d, expected %d of %d", what, cr, cn, expect_rank,
           expect_n);
  if (a2a_fresh(child, cr, cn, moecclFloat32, 70000 / (size_t)cn + 3, seed_of(cn, (*step)++), what)) return 1;
  if (v_round(child, cr, cn, moecclInt32, 30000, seed_of(cn, (*step)++), NULL)) return 1;
  return 0;
}

static int split(moecclComm_t comm, int rank, int n, int* step) {
  int step0 = *step; /* ranks that sit out a split do not count its steps */
  int host = mh_rank_host(rank), local = 0, per_host = 0, below = 0;
  for (int r = 0; r < n; r++) {
    if (mh_rank_host(r) == host) {
      per_host++;
      if (r < rank) local++;
    }
  }
  /* Per host, keys reversed: shared memory only. */
  moecclComm_t c = NULL;
  MP_OK_COMM(comm, moecclCommSplit(comm, host, -rank, &c, NULL));
  MP_CHECK(c, "split per host: NULL comm");
  if (check_child(c, per_host - 1 - local, per_host, "split per host", step)) return 1;
  MP_OK_COMM(c, moecclCommDestroy(c));
  /* Same local index across hosts: network only (one rank per host). */
  c = NULL;
  MP_OK_COMM(comm, moecclCommSplit(comm, local, host, &c, NULL));
  MP_CHECK(c, "split across hosts: NULL comm");
  if (check_child(c, host, mh_nhosts, "split across hosts", step)) return 1;
  /* Split of the split, in two: an even and an odd host. */
  moecclComm_t cc = NULL;
  MP_OK_COMM(c, moecclCommSplit(c, host % 2, 0, &cc, NULL));
  MP_CHECK(cc, "nested split: NULL comm");
  if (check_child(cc, host / 2, (mh_nhosts - host % 2 + 1) / 2, "nested split", step)) return 1;
  MP_OK_COMM(cc, moecclCommDestroy(cc));
  MP_OK_COMM(c, moecclCommDestroy(c));
  /* Every third rank sits out; the rest in reverse order. */
  int color = rank % 3 == 1 ? MOECCL_SPLIT_NOCOLOR : 7;
  c = NULL;
  MP_OK_COMM(comm, moecclCommSplit(comm, color, n - rank, &c, NULL));
  if (color == MOECCL_SPLIT_NOCOLOR) {
    MP_CHECK(c == NULL, "NOCOLOR split gave a communicator");
  } else {
    int members = 0;
    for (int r = 0; r < n; r++)
      if (r % 3 != 1) {
        members++;
        if (r > rank) below++;
      }
    MP_CHECK(c, "split with NOCOLOR: NULL comm");
    if (check_child(c, below, members, "split with NOCOLOR", step)) return 1;
    MP_OK_COMM(c, moecclCommDestroy(c));
  }
  /* The parent is still good. */
  *step = step0 + 100;
  return a2a_fresh(comm, rank, n, moecclInt64, 5000, seed_of(n, (*step)++), "after splits");
}

/* ---- repeated, memalloc, stream ------------------------------------------- */

static int repeated(moecclComm_t comm, int rank, int n, int* step) {
  size_t cap = (size_t)n * 65536 * 2;
  unsigned char* s = mp_xmalloc(cap + GUARD);
  unsigned char* r = mp_xmalloc(cap + GUARD);
  mp_rng rng;
  mp_rng_seed(&rng, 0x4E7 + (uint64_t)n);
  int rc = 0;
  for (int it = 0; it < 40 && !rc; it++) {
    const mp_dtype_info* d = &mp_dtypes[mp_rng_below(&rng, moecclNumTypes)];
    size_t bytes = (size_t)1 << mp_rng_below(&rng, 18);
    bytes += mp_rng_below(&rng, bytes);
    if (bytes > 2 * 65536) bytes = 2 * 65536;
    char tag[32];
    snprintf(tag, sizeof(tag), "repeated #%d", it);
    rc = a2a_checked(comm, rank, n, d->type, bytes / d->size, seed_of(n, (*step)++), s, r, tag);
    if (!rc && it % 8 == 7) rc = v_round(comm, rank, n, moecclUint8, 5000, seed_of(n, (*step)++), NULL);
  }
  free(s);
  free(r);
  return rc;
}

static int memalloc(moecclComm_t comm, int rank, int n, int* step) {
  size_t count = 40000, bytes = count * 4 * (size_t)n + GUARD;
  void *s = NULL, *r = NULL;
  MP_OK_COMM(comm, moecclMemAlloc(&s, bytes));
  MP_OK_COMM(comm, moecclMemAlloc(&r, bytes));
  int rc = a2a_checked(comm, rank, n, moecclFloat32, count, seed_of(n, (*step)++), s, r, "memalloc");
  if (!rc) rc = a2a_checked(comm, rank, n, moecclFloat32, 333, seed_of(n, (*step)++), s, r, "memalloc small");
  MP_OK_COMM(comm, moecclMemFree(s));
  MP_OK_COMM(comm, moecclMemFree(r));
  return rc;
}

static int stream(moecclComm_t comm, int rank, int n, int* step) {
  moecclStream_t st = NULL;
  MP_OK_COMM(comm, moecclHostStreamCreate(&st));
  int rc = v_round(comm, rank, n, moecclFloat32, 50000, seed_of(n, (*step)++), st);
  MP_OK_COMM(comm, moecclHostStreamDestroy(st));
  return rc;
}

static int body(moecclComm_t comm, int rank, int n, void* arg) {
  (void)arg;
  int step = 0, rc = 0;
  if (!rc && mp_want("types")) rc = types(comm, rank, n, &step);
  if (!rc && mp_want("v")) rc = alltoallv(comm, rank, n, &step);
  if (!rc && mp_want("p2p")) rc = p2p(comm, rank, n, &step);
  if (!rc && mp_want("split")) rc = split(comm, rank, n, &step);
  if (!rc && mp_want("repeated")) rc = repeated(comm, rank, n, &step);
  if (!rc && mp_want("memalloc")) rc = memalloc(comm, rank, n, &step);
  if (!rc && mp_want("stream")) rc = stream(comm, rank, n, &step);
  if (!rc && rank == 0) printf("rank 0: %d checked rounds on %d ranks over %d hosts\n", step, n, mh_nhosts);
  return rc;
}

int main(int argc, char** argv) {
  (void)argc, (void)argv;
  int rc = mh_setup(4, 900);
  if (rc != MP_EXIT_PASS) return rc;
  int hosts[8];
  int nh = mh_parse_ints("MH_HOSTS", "2,3,4", hosts, 8);
  const char* keep = getenv("MH_KEEP_GOING");
  int keep_going = keep && *keep && strcmp(keep, "0") != 0;
  const char* variants[] = {"ofi", "ucx"};
  int overall = MP_EXIT_SKIP;
  for (int v = 0; v < 2; v++) {
    if (!mh_want_variant(variants[v])) continue;
    mh_variant_env(variants[v]);
    printf("variant %s (MOECCL_NET=%s%s)%s:\n", variants[v], variants[v],
           v == 0 ? " MOECCL_OFI_PROVIDER=tcp" : " UCX_TLS=tcp",
           mh_same_hostid() ? " [MH_SAME_HOSTID=1: shared memory only]" : "");
    fflush(stdout);
    int vres = MP_EXIT_SKIP;
    for (int i = 0; i < nh; i++) {
      if (hosts[i] < 1 || hosts[i] > 4) continue;
      mh_opts o = {0};
      o.nhosts = hosts[i];
      o.layout = MH_LAYOUT_BLOCK;
      o.deadline_s = 150;
      o.label = variants[v];
      int r = mh_run(&o, body, NULL);
      if (r == MP_EXIT_SKIP) {
        printf("SKIP variant %s: MOECCL_NET=%s is not in this build (the rest of the variant is skipped)\n",
               variants[v], variants[v]);
        vres = mp_fold(vres, r);
        break;
      }
      vres = mp_fold(vres, r);
      if (r == MP_EXIT_PASS && hosts[i] == 3) { /* ranks dealt round-robin over the hosts */
        o.layout = MH_LAYOUT_CYCLIC;
        vres = mp_fold(vres, mh_run(&o, body, NULL));
      }
      if (vres == MP_EXIT_FAIL && !keep_going) break;
    }
    overall = mp_fold(overall, vres);
    if (overall == MP_EXIT_FAIL && !keep_going) break;
  }
  int clean = mh_teardown();
  if (clean != MP_EXIT_PASS) overall = MP_EXIT_FAIL;
  printf("%s mh_correctness\n", overall == MP_EXIT_PASS ? "PASS" : overall == MP_EXIT_SKIP ? "SKIP" : "FAIL");
  return overall;
}
