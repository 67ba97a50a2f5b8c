/* The table of the collectives' algorithms (coll_algos.h). */
#include <string.h>
#include <strings.h>

#include "algos/coll_algos.h"

#define ROW(ar, rs, ag, bc, red, ga, sc)                                                           \
  { ar, rs, ag, bc, red, ga, sc }

const moeccl_coll_algo_t moeccl_coll_algos[MOECCL_COLL_NALGOS] = {
    {MOECCL_COLL_RING, "ring", "n-1 steps each way, one slice to the next rank per step",
     ROW(moeccl_allreduce_ring, moeccl_reduce_scatter_ring, moeccl_allgather_ring, NULL, NULL, NULL,
         NULL),
     NULL},
    {MOECCL_COLL_RHD, "rhd",
     "recursive halving then doubling (Rabenseifner), log2 n steps each way, folds odd ranks",
     ROW(moeccl_allreduce_rhd, moeccl_reduce_scatter_rhd, moeccl_allgather_rhd, NULL, NULL, NULL,
         NULL),
     moeccl_coll_rhd_applies},
    {MOECCL_COLL_RD, "rd", "recursive doubling of the whole vector, log2 n steps (small vectors)",
     ROW(moeccl_allreduce_rd, NULL, NULL, NULL, NULL, NULL, NULL), NULL},
    {MOECCL_COLL_TREE, "tree", "binomial tree rooted at the root (AllReduce: reduce, broadcast)",
     ROW(moeccl_allreduce_tree, NULL, NULL, moeccl_broadcast_tree, moeccl_reduce_tree, NULL, NULL),
     NULL},
    {MOECCL_COLL_DIRECT, "direct",
     "every peer directly: one copy or reduction per peer, straight from its memory on a node",
     ROW(moeccl_allreduce_direct, moeccl_reduce_scatter_direct, moeccl_allgather_direct,
         moeccl_broadcast_direct, moeccl_reduce_direct, moeccl_gather_direct,
         moeccl_scatter_direct),
     NULL},
    {MOECCL_COLL_HIER, "hier",
     "direct reduce-scatter on the node, rhd between nodes per local index, direct all-gather",
     ROW(moeccl_allreduce_hier, NULL, NULL, NULL, NULL, NULL, NULL), moeccl_coll_hier_applies},
};

const moeccl_coll_algo_t* moeccl_coll_algo_by_name(const char* name) {
  for (int i = 0; i < MOECCL_COLL_NALGOS; i++)
    if (name && strcasecmp(name, moeccl_coll_algos[i].name) == 0) return &moeccl_coll_algos[i];
  return NULL;
}

const char* moeccl_coll_kind_name(moeccl_coll_kind_t kind) {
  static const char* const names[MOECCL_COLL_NKINDS] = {
      "AllReduce", "ReduceScatter", "AllGather", "Broadcast", "Reduce", "Gather", "Scatter"};
  return (unsigned)kind < MOECCL_COLL_NKINDS ? names[kind] : "unknown";
}
