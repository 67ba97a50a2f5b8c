/* Pairwise all-to-all: n-1 steps; in step k this rank sends to rank+k and
 * receives from rank-k, so every rank has exactly one partner in flight each
 * way.  Bounds memory traffic per step and avoids incast on large messages.
 * The local block is copied in the first step, overlapping the exchange. */
#include "algos.h"

moecclResult_t moeccl_a2a_pairwise(const moeccl_a2a_desc_t* d, moeccl_sched_t* out) {
  int n = d->nranks, r = d->rank;
  moecclResult_t rc = moeccl_sched_reserve(out, 2 * n, n);
  if (rc == moecclSuccess) rc = moeccl_a2a_add_self_copy(d, out);
  for (int k = 1; k < n && rc == moecclSuccess; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    rc = moeccl_a2a_add_exchange(d, out, to, from);
    if (rc == moecclSuccess) rc = moeccl_sched_end_step(out);
  }
  if (rc == moecclSuccess) rc = moeccl_sched_end_step(out); /* n == 1: the copy alone */
  return rc;
}
