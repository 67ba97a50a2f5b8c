/* Direct all-to-all: one step in which this rank posts a send to and a receive
 * from every peer.  Peers are visited starting at rank+1 (sends) and rank-1
 * (receives) so that the ranks of a node do not all pull from the same peer at
 * once.  The executor posts every send before it copies the local block. */
#include "algos.h"

moecclResult_t moeccl_a2a_direct(const moeccl_a2a_desc_t* d, moeccl_sched_t* out) {
  int n = d->nranks, r = d->rank;
  moecclResult_t rc = moeccl_sched_reserve(out, 2 * n, 1);
  for (int k = 1; k < n && rc == moecclSuccess; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    rc = moeccl_a2a_add_exchange(d, out, to, from);
  }
  if (rc == moecclSuccess) rc = moeccl_a2a_add_self_copy(d, out);
  if (rc == moecclSuccess) rc = moeccl_sched_end_step(out);
  return rc;
}
