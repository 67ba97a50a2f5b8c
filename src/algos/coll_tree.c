/*
 * Binomial trees over v = (rank - root) mod n: the parent of v is v minus
 * its lowest set bit; the children of v are v + m for the powers of two m
 * below that bit (all m < n at the root).  The whole vector per message:
 * ceil(log2 n) messages on the critical path (latency), count elements per
 * tree edge.
 *
 * Broadcast: receive from the parent (one step), then one step per child,
 *   the largest subtree first.  The root sends from SEND and copies it to
 *   RECV (unless in place) in its first step.  Root: ceil(log2 n) steps.
 * Reduce: children in increasing m, one step each: the first reduces the
 *   own raw SEND (PRE_A) with the child's message into the partial, later
 *   ones reduce into the partial in place (the message is raw, PRE_B, when
 *   the child is a leaf); then one step sends the partial (a leaf: its raw
 *   SEND) to the parent.  Partials: RECV at the root, SCRATCH (count
 *   elements) on the non-roots with children.  The order of the reduction
 *   depends on n, root and count only.
 * AllReduce: that reduce to rank 0 with the partials in RECV on every rank,
 *   then the broadcast from rank 0 out of RECV.  2 ceil(log2 n) steps at
 *   rank 0; no scratch.
 * nranks == 1: one copy (scaled for reductions).
 */
#include "algos/coll_util.h"

static int lowbit(int v) { return v & -v; }

/* The first child distance of v: children are v + m, m < this. */
static int child_limit(int v, int n) {
  if (v) return lowbit(v);
  int m = 1;
  while (m < n) m *= 2;
  return m;
}

/* Binomial reduce to root; acc: the partial of a rank with children. */
static moecclResult_t tree_reduce(moeccl_sched_t* s, int n, int r, int root, coll_range_t send,
                                  coll_range_t acc) {
  int v = (r - root + n) % n, lim = child_limit(v, n), any = 0;
  for (int m = 1; m < lim && v + m < n; m *= 2) {
    int c = v + m, leaf = m == 1 || c + 1 >= n;
    unsigned fl = (any ? 0 : MOECCL_OPF_PRE_A) | (leaf ? MOECCL_OPF_PRE_B : 0);
    MOECCL_CHECK(coll_recv_reduce(s, (c + root) % n, any ? acc : send, acc, fl));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    any = 1;
  }
  if (v) {
    MOECCL_CHECK(coll_send(s, (v - lowbit(v) + root) % n, any ? acc : send));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moecclSuccess;
}

/* Binomial broadcast from root of src (root) into RECV (everywhere). */
static moecclResult_t tree_bcast(const moeccl_coll_desc_t* d, moeccl_sched_t* s, int root,
                                 coll_range_t src) {
  int n = d->nranks, v = (d->rank - root + n) % n;
  coll_range_t recv = coll_range(MOECCL_BUF_RECV, 0, d->count * d->elem_size);
  if (v) {
    MOECCL_CHECK(coll_recv(s, (v - lowbit(v) + root) % n, recv));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    src = recv;
  } else {
    MOECCL_CHECK(coll_copy(d, s, src, recv, 0));
  }
  for (int m = child_limit(v, n) / 2; m >= 1; m /= 2) {
    if (v + m >= n) continue;
    MOECCL_CHECK(coll_send(s, (v + m + root) % n, src));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moeccl_sched_end_step(s); /* the root's copy when it has no child */
}

moecclResult_t moeccl_broadcast_tree(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  MOECCL_CHECK(moeccl_sched_reserve(s, 64, 64));
  return tree_bcast(d, s, d->root, coll_range(MOECCL_BUF_SEND, 0, d->count * d->elem_size));
}

moecclResult_t moeccl_reduce_tree(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank;
  uint64_t b = d->count * d->elem_size;
  if (n == 1) return coll_single(d, s);
  MOECCL_CHECK(moeccl_sched_reserve(s, 64, 64));
  int v = (r - d->root + n) % n;
  coll_range_t acc = coll_range(MOECCL_BUF_RECV, 0, b);
  if (v) {
    acc = coll_range(MOECCL_BUF_SCRATCH, 0, b);
    if (v + 1 < n && lowbit(v) > 1) coll_need_scratch(s, b); /* it has a child */
  }
  return tree_reduce(s, n, r, d->root, coll_range(MOECCL_BUF_SEND, 0, b), acc);
}

moecclResult_t moeccl_allreduce_tree(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  uint64_t b = d->count * d->elem_size;
  if (d->nranks == 1) return coll_single(d, s);
  MOECCL_CHECK(moeccl_sched_reserve(s, 64, 64));
  coll_range_t recv = coll_range(MOECCL_BUF_RECV, 0, b);
  MOECCL_CHECK(tree_reduce(s, d->nranks, d->rank, 0, coll_range(MOECCL_BUF_SEND, 0, b), recv));
  return tree_bcast(d, s, 0, recv);
}
