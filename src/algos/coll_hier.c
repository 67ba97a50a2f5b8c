/*
 * Hierarchical AllReduce on a regular topology of N nodes of L ranks
 * (desc->topo; applies when it describes the communicator, N >= 2, L >= 2).
 * The vector is cut into L element-aligned slices; local index l owns slice l.
 *   1. within the node: direct reduce-scatter of the L slices into RECV
 *      slice l (L-1 steps, shared memory: one reduction per peer);
 *   2. between nodes: the N ranks of local index l (one per node, member m
 *      on node m) allreduce slice l with Rabenseifner's algorithm
 *      (coll_rhd.c: fold for non-power-of-two N, recursive halving, then
 *      doubling; 2 log2 N steps, +2 with the fold);
 *   3. within the node: direct all-gather of the slices (one step).
 * Bytes per rank: about 2 (L-1)/L of the vector on the node and 2 (N-1)/N
 * of one slice between nodes; no scratch.  Everything stays in RECV after
 * phase 1, so in place needs no care beyond direct's.
 * Where it does not apply: direct's schedule when there is no topology or
 * every rank sits on one node, ring's otherwise.
 */
#include "algos/coll_util.h"

int moeccl_coll_hier_applies(const moeccl_coll_desc_t* d) {
  const moeccl_topo_t* t = d->topo;
  if (!t || t->nranks != d->nranks || !moeccl_topo_regular(t, 2)) return 0;
  return t->nnodes >= 2 && t->ranks_per_node >= 2;
}

moecclResult_t moeccl_allreduce_hier(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  const moeccl_topo_t* t = d->topo;
  if (!moeccl_coll_hier_applies(d)) {
    if (!t || (t->nranks == d->nranks && t->nnodes <= 1)) return moeccl_allreduce_direct(d, s);
    return moeccl_allreduce_ring(d, s);
  }
  int r = d->rank, L = t->ranks_per_node, l = t->rank_local[r], node = t->rank_node[r];
  coll_group_t local = {L, l, t, node, 0}, rail = {t->nnodes, node, t, l, 1};
  size_t off = coll_slice_off(d->count, L, l), cnt = coll_slice_cnt(d->count, L, l);
  coll_range_t mine = coll_slices(d, MOECCL_BUF_RECV, 0, d->count, L, l, l + 1);
  MOECCL_CHECK(moeccl_coll_direct_rs(d, s, &local, d->count, mine));
  MOECCL_CHECK(moeccl_coll_rhd_ar(d, s, &rail, cnt, off * d->elem_size, 0));
  return moeccl_coll_direct_ag(d, s, &local, d->count, 0);
}
