/* The table of all-to-all algorithms. */
#include "algos.h"
#include "topo/topo.h"

#define MOECCL_CHECK_SCHED(call)                                                                   \
  do {                                                                                             \
    moecclResult_t rc_ = (call);                                                                   \
    if (rc_ != moecclSuccess) return rc_;                                                          \
  } while (0)

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
};

const moeccl_a2a_algo_t* moeccl_a2a_algo_by_name(const char* name) {
  for (int i = 0; i < MOECCL_A2A_NALGOS; i++)
    if (name && strcasecmp(name, moeccl_a2a_algos[i].name) == 0) return &moeccl_a2a_algos[i];
  return NULL;
}

moecclResult_t moeccl_a2a_add_self_copy(const moeccl_a2a_desc_t* d, moeccl_sched_t* out) {
  size_t bytes = moeccl_a2a_send_bytes(d, d->rank);
  size_t rbytes = moeccl_a2a_recv_bytes(d, d->rank);
  if (rbytes < bytes) bytes = rbytes; /* callers reject this mismatch before planning */
  return moeccl_sched_add(out, MOECCL_OP_COPY, -1, MOECCL_BUF_SEND, moeccl_a2a_send_off(d, d->rank),
                          MOECCL_BUF_RECV, moeccl_a2a_recv_off(d, d->rank), bytes);
}

moecclResult_t moeccl_a2a_add_exchange(const moeccl_a2a_desc_t* d, moeccl_sched_t* out, int to,
                                       int from) {
  MOECCL_CHECK_SCHED(moeccl_sched_add(out, MOECCL_OP_SEND, to, MOECCL_BUF_SEND,
                                      moeccl_a2a_send_off(d, to), 0, 0,
                                      moeccl_a2a_send_bytes(d, to)));
  return moeccl_sched_add(out, MOECCL_OP_RECV, from, 0, 0, MOECCL_BUF_RECV,
                          moeccl_a2a_recv_off(d, from), moeccl_a2a_recv_bytes(d, from));
}

int moeccl_a2a_topo_fits(const moeccl_a2a_desc_t* d, int levels) {
  const moeccl_topo_t* t = d->topo;
  if (!t || t->nranks != d->nranks || !moeccl_topo_regular(t, levels)) return 0;
  return levels < 3 ? t->nnodes >= 2 : t->ngroups >= 2;
}
