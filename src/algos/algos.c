/* The table of all-to-all algorithms (their shared helpers: alltoall_util.c). */
#include "algos.h"

#include <string.h>
#include <strings.h>

const moeccl_a2a_algo_t moeccl_a2a_algos[MOECCL_A2A_NALGOS] = {
    {MOECCL_A2A_DIRECT, "direct",
     "every peer's block posted at once, or window peers per step (MOECCL_A2A_WINDOW)",
     moeccl_a2a_direct, MOECCL_META_NONE, NULL},
    {MOECCL_A2A_PAIRWISE, "pairwise", "n-1 steps: step k sends to rank+k, receives from rank-k",
     moeccl_a2a_pairwise, MOECCL_META_NONE, NULL},
    {MOECCL_A2A_BRUCK, "bruck",
     "ceil(log2 n) rounds of packed blocks, exact sizes for alltoallv (all ranks' counts)",
     moeccl_a2a_bruck, MOECCL_META_ALL, NULL},
    {MOECCL_A2A_HIER2, "hier2",
     "gather by destination node, one message per pair of nodes, scatter on the node",
     moeccl_a2a_hier2, MOECCL_META_NODE, moeccl_a2a_hier2_applies},
    {MOECCL_A2A_HIER3, "hier3",
     "packed exchanges within the node, then the group of nodes, then between groups",
     moeccl_a2a_hier3, MOECCL_META_GROUP, moeccl_a2a_hier3_applies},
    {MOECCL_A2A_RAIL, "rail",
     "to the rank with the destination's local index (rail), then one message per destination",
     moeccl_a2a_rail, MOECCL_META_NODE, moeccl_a2a_rail_applies},
    {MOECCL_A2A_HIER2P, "hier2p",
     "hier2 in chunks (MOECCL_A2A_CHUNKS): the node gather, the exchange between nodes and "
     "the scatter of successive chunks overlap",
     moeccl_a2a_hier2p, MOECCL_META_NODE, moeccl_a2a_hier2_applies},
    {MOECCL_A2A_RAILP, "railp",
     "rail in chunks: the exchange across nodes of one chunk with the next one's on the node",
     moeccl_a2a_railp, MOECCL_META_NODE, moeccl_a2a_rail_applies},
    {MOECCL_A2A_HIER3P, "hier3p",
     "hier3 in chunks: the node, group and global exchanges of successive chunks overlap",
     moeccl_a2a_hier3p, MOECCL_META_GROUP, moeccl_a2a_hier3_applies},
};

const moeccl_a2a_algo_t* moeccl_a2a_algo_by_name(const char* name) {
  for (int i = 0; i < MOECCL_A2A_NALGOS; i++)
    if (name && strcasecmp(name, moeccl_a2a_algos[i].name) == 0) return &moeccl_a2a_algos[i];
  return NULL;
}
