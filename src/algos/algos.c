/* The table of all-to-all algorithms. */
#include "algos.h"

#define MOECCL_CHECK_SCHED(call)                                                                   \
  do {                                                                                             \
    moecclResult_t rc_ = (call);                                                                   \
    if (rc_ != moecclSuccess) return rc_;                                                          \
  } while (0)

#include <string.h>
#include <strings.h>

const moeccl_a2a_algo_t moeccl_a2a_algos[MOECCL_A2A_NALGOS] = {
    {MOECCL_A2A_DIRECT, "direct", "one step: every peer's block posted at once", moeccl_a2a_direct},
    {MOECCL_A2A_PAIRWISE, "pairwise", "n-1 steps: step k sends to rank+k, receives from rank-k",
     moeccl_a2a_pairwise},
    {MOECCL_A2A_BRUCK, "bruck", "ceil(log2 n) rounds of packed blocks; uniform calls only (v: pairwise)",
     moeccl_a2a_bruck},
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
