/* Helpers the all-to-all generators share: the block to self, one exchange
 * with a pair of peers, whether the topology suits a hierarchical schedule.
 * Apart from the table (algos.c), which names the generators, so that no
 * generator and the table need each other. */
#include "algos.h"
#include "base/check.h"
#include "topo/topo.h"

moecclResult_t moeccl_a2a_add_self_copy(const moeccl_a2a_desc_t* d, moeccl_sched_t* out) {
  size_t bytes = moeccl_a2a_send_bytes(d, d->rank);
  size_t rbytes = moeccl_a2a_recv_bytes(d, d->rank);
  if (rbytes < bytes) bytes = rbytes; /* callers reject this mismatch before planning */
  return moeccl_sched_add(out, MOECCL_OP_COPY, -1, MOECCL_BUF_SEND, moeccl_a2a_send_off(d, d->rank),
                          MOECCL_BUF_RECV, moeccl_a2a_recv_off(d, d->rank), bytes);
}

moecclResult_t moeccl_a2a_add_exchange(const moeccl_a2a_desc_t* d, moeccl_sched_t* out, int to,
                                       int from) {
  MOECCL_CHECK(moeccl_sched_add(out, MOECCL_OP_SEND, to, MOECCL_BUF_SEND,
                                moeccl_a2a_send_off(d, to), 0, 0, moeccl_a2a_send_bytes(d, to)));
  return moeccl_sched_add(out, MOECCL_OP_RECV, from, 0, 0, MOECCL_BUF_RECV,
                          moeccl_a2a_recv_off(d, from), moeccl_a2a_recv_bytes(d, from));
}

int moeccl_a2a_topo_fits(const moeccl_a2a_desc_t* d, int levels) {
  const moeccl_topo_t* t = d->topo;
  if (!t || t->nranks != d->nranks || !moeccl_topo_regular(t, levels)) return 0;
  return levels < 3 ? t->nnodes >= 2 : t->ngroups >= 2;
}
