/*
 * What the MoE plan's files share (moe_int.h): prefix sums, the all-to-all(v)
 * exchanges of plan memory and the token groups of a table.  Below
 * moe_layout.c and moe_hier.c, which both use them.
 */
#include "api/moe_int.h"
#include "exec/enqueue.h"

#include <stdlib.h>
#include <string.h>

size_t moeccl_moeplan_prefix(size_t* first, int n) {
  size_t sum = 0;
  for (int r = 0; r < n; r++) {
    size_t cnt = first[r];
    first[r] = sum;
    sum += cnt;
  }
  first[n] = sum;
  return sum;
}

moecclResult_t moeccl_moeplan_alltoallv(moecclMoePlan_t p, const void* send, const size_t* sfirst,
                                        void* recv, const size_t* rfirst, size_t elem, size_t per) {
  moeccl_comm_t* c = p->comm;
  size_t n = (size_t)c->nranks, *v = p->counts;
  for (size_t r = 0; r < n; r++) {
    v[r] = (sfirst[r + 1] - sfirst[r]) * per, v[n + r] = sfirst[r] * per;
    v[2 * n + r] = (rfirst[r + 1] - rfirst[r]) * per, v[3 * n + r] = rfirst[r] * per;
  }
  moeccl_call_t call = {.kind = MOECCL_CALL_A2A, .sendbuf = send, .recvbuf = recv};
  call.a2a = (moeccl_a2a_desc_t){.rank = c->rank,
                                 .nranks = c->nranks,
                                 .send_counts = v,
                                 .send_displs = v + n,
                                 .recv_counts = v + 2 * n,
                                 .recv_displs = v + 3 * n,
                                 .elem_size = elem};
  return moeccl_call_issue(c, &call, NULL);
}

size_t moeccl_moeplan_token_groups(size_t* tok, size_t T, moeccl_row_term_t* out) {
  size_t sum = 0;
  for (size_t t = 0; t < T; t++) {
    size_t cnt = tok[t];
    tok[t] = sum;
    if (!cnt) out[sum] = moe_term(t, MOECCL_ROW_NONE, MOECCL_ROW_NONE);
    sum += cnt ? cnt : 1;
  }
  return sum;
}
