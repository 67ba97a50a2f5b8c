/*
 * Direct collectives: every rank talks to every peer, so over shared memory
 * each transfer is one copy (or one reduction) straight out of the peer's
 * buffer.  Slices are element-aligned (coll_slice_*: the first count % n
 * get one element more); zero-byte ops drop out on both sides.
 *
 * ReduceScatter: n-1 steps; step k sends SEND block r-k to rank r-k and
 *   reduces block r from rank r+k into RECV (step 1: RECV = own SEND block
 *   (+) message, both raw; later RECV = RECV (+) message, the message raw).
 *   (n-1) * count elements each way per rank, no scratch.
 * AllReduce: that reduce-scatter over n slices of the vector (slice r into
 *   RECV slice r), then one step sending RECV slice r to every peer and
 *   receiving slice p from every peer: n steps, 2 (n-1)/n of the vector
 *   each way, no scratch.
 * AllGather: one step, own block to every peer (and copied to RECV unless
 *   in place), every peer's block received.
 * Broadcast: one step, the root sends to every peer (and copies SEND to
 *   RECV unless in place).
 * Reduce: the reduce-scatter of n slices (non-roots into SCRATCH, one
 *   slice of scratch; the root straight into RECV slice root), then one step
 *   in which every non-root sends its slice to the root.  n steps.
 * Gather / Scatter: one step at the root with all n-1 peers; the root
 *   copies its own block unless in place.
 * nranks == 1: one copy (scaled by the pre-multiplier for reductions).
 * In place: SEND slice r is read only by the first reduction into the same
 * RECV range; other SEND ranges are read by peers before this rank's last
 * step writes the RECV bytes over them.
 */
#include "algos/coll_util.h"

moecclResult_t moeccl_coll_direct_rs(const moeccl_coll_desc_t* d, moeccl_sched_t* s,
                                     const coll_group_t* g, size_t count, coll_range_t dst) {
  int n = g->n, me = g->me;
  MOECCL_CHECK(moeccl_sched_reserve(s, 2 * n, n));
  for (int k = 1; k < n; k++) {
    int to = (me - k + n) % n, from = (me + k) % n;
    MOECCL_CHECK(
        coll_send(s, coll_member(g, to), coll_slices(d, MOECCL_BUF_SEND, 0, count, n, to, to + 1)));
    coll_range_t src = k == 1 ? coll_slices(d, MOECCL_BUF_SEND, 0, count, n, me, me + 1) : dst;
    unsigned fl = MOECCL_OPF_PRE_B | (k == 1 ? MOECCL_OPF_PRE_A : 0);
    MOECCL_CHECK(coll_recv_reduce(s, coll_member(g, from), src, dst, fl));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moecclSuccess;
}

moecclResult_t moeccl_coll_direct_ag(const moeccl_coll_desc_t* d, moeccl_sched_t* s,
                                     const coll_group_t* g, size_t count, uint64_t base) {
  int n = g->n, me = g->me;
  MOECCL_CHECK(moeccl_sched_reserve(s, 2 * n, 1));
  coll_range_t mine = coll_slices(d, MOECCL_BUF_RECV, base, count, n, me, me + 1);
  for (int k = 1; k < n; k++) {
    int p = (me + k) % n;
    MOECCL_CHECK(coll_send(s, coll_member(g, p), mine));
    MOECCL_CHECK(
        coll_recv(s, coll_member(g, p), coll_slices(d, MOECCL_BUF_RECV, base, count, n, p, p + 1)));
  }
  return moeccl_sched_end_step(s);
}

moecclResult_t moeccl_reduce_scatter_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  if (d->nranks == 1) return coll_single(d, s);
  coll_group_t g = coll_flat(d);
  coll_range_t dst = coll_range(MOECCL_BUF_RECV, 0, d->count * d->elem_size);
  return moeccl_coll_direct_rs(d, s, &g, d->count * (size_t)d->nranks, dst);
}

moecclResult_t moeccl_allreduce_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  if (d->nranks == 1) return coll_single(d, s);
  coll_group_t g = coll_flat(d);
  int r = d->rank;
  MOECCL_CHECK(moeccl_coll_direct_rs(
      d, s, &g, d->count, coll_slices(d, MOECCL_BUF_RECV, 0, d->count, d->nranks, r, r + 1)));
  return moeccl_coll_direct_ag(d, s, &g, d->count, 0);
}

moecclResult_t moeccl_allgather_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank;
  uint64_t b = d->count * d->elem_size;
  MOECCL_CHECK(moeccl_sched_reserve(s, 2 * n, 1));
  MOECCL_CHECK(coll_copy(d, s, coll_range(MOECCL_BUF_SEND, 0, b),
                         coll_range(MOECCL_BUF_RECV, (uint64_t)r * b, b), 0));
  for (int k = 1; k < n; k++) {
    int p = (r + k) % n;
    MOECCL_CHECK(coll_send(s, p, coll_range(MOECCL_BUF_SEND, 0, b)));
    MOECCL_CHECK(coll_recv(s, p, coll_range(MOECCL_BUF_RECV, (uint64_t)p * b, b)));
  }
  return moeccl_sched_end_step(s);
}

/* ---- the rooted ones: one step centred on the root ------------------------ */

/* Peer p's block at the root. */
typedef coll_range_t (*root_block_t)(const moeccl_coll_desc_t* d, int p);

static uint64_t block_bytes(const moeccl_coll_desc_t* d) { return d->count * d->elem_size; }
static coll_range_t whole_send(const moeccl_coll_desc_t* d, int p) {
  return coll_range(MOECCL_BUF_SEND, 0, block_bytes(d));
}
static coll_range_t send_block(const moeccl_coll_desc_t* d, int p) {
  return coll_range(MOECCL_BUF_SEND, (uint64_t)p * block_bytes(d), block_bytes(d));
}
static coll_range_t recv_block(const moeccl_coll_desc_t* d, int p) {
  return coll_range(MOECCL_BUF_RECV, (uint64_t)p * block_bytes(d), block_bytes(d));
}
static coll_range_t recv_slice(const moeccl_coll_desc_t* d, int p) {
  return coll_slices(d, MOECCL_BUF_RECV, 0, d->count, d->nranks, p, p + 1);
}

/* The step every rooted collective ends with.  mine is a rank's own block:
 * a non-root sends it to the root (to_root) or receives it from the root.
 * The root copies its own block between mine and at(d, root) (coll_copy
 * drops it in place, and where the two are one range), then receives
 * at(d, p) from each peer p (to_root) or sends it, from root + 1 on.
 * Inlined into each caller, so that `at` is a known function there: every
 * call of these collectives plans this step (a call through the pointer
 * per peer cost a 1 KiB Broadcast 3% of its instructions). */
static inline __attribute__((always_inline)) moecclResult_t
rooted_step(const moeccl_coll_desc_t* d, moeccl_sched_t* s, int to_root, coll_range_t mine,
            root_block_t at) {
  int n = d->nranks, r = d->rank;
  if (r != d->root) {
    MOECCL_CHECK(to_root ? coll_send(s, d->root, mine) : coll_recv(s, d->root, mine));
    return moeccl_sched_end_step(s);
  }
  MOECCL_CHECK(to_root ? coll_copy(d, s, mine, at(d, r), 0) : coll_copy(d, s, at(d, r), mine, 0));
  for (int k = 1; k < n; k++) {
    int p = (r + k) % n;
    MOECCL_CHECK(to_root ? coll_recv(s, p, at(d, p)) : coll_send(s, p, at(d, p)));
  }
  return moeccl_sched_end_step(s);
}

moecclResult_t moeccl_broadcast_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  MOECCL_CHECK(moeccl_sched_reserve(s, d->nranks, 1));
  return rooted_step(d, s, 0, coll_range(MOECCL_BUF_RECV, 0, block_bytes(d)), whole_send);
}

moecclResult_t moeccl_reduce_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank, root = d->root;
  if (n == 1) return coll_single(d, s);
  coll_group_t g = coll_flat(d);
  coll_range_t mine = recv_slice(d, r);
  if (r != root) {
    mine.buf = MOECCL_BUF_SCRATCH, mine.off = 0;
    coll_need_scratch(s, mine.bytes);
  }
  MOECCL_CHECK(moeccl_coll_direct_rs(d, s, &g, d->count, mine));
  return rooted_step(d, s, 1, mine, recv_slice); /* the root's slice is in place */
}

moecclResult_t moeccl_gather_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  MOECCL_CHECK(moeccl_sched_reserve(s, d->nranks, 1));
  return rooted_step(d, s, 1, coll_range(MOECCL_BUF_SEND, 0, block_bytes(d)), recv_block);
}

moecclResult_t moeccl_scatter_direct(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  MOECCL_CHECK(moeccl_sched_reserve(s, d->nranks, 1));
  return rooted_step(d, s, 0, coll_range(MOECCL_BUF_RECV, 0, block_bytes(d)), send_block);
}
