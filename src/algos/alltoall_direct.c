/* Direct all-to-all: this rank posts a send to and a receive from every peer,
 * window peers per step (desc->window; 0 or at least n-1: all in one step),
 * so that large communicators do not post thousands of operations at once.
 * Peers are visited starting at rank+1 (sends) and rank-1 (receives) so that
 * the ranks of a node do not all pull from the same peer at once; step j
 * holds distances j*window+1 .. (j+1)*window, so a rank's partners in a step
 * are in the same step on their side.  The local block is copied in the
 * first step; the executor posts every send of a step before its copies. */
#include "algos.h"

moecclResult_t moeccl_a2a_direct(const moeccl_a2a_desc_t* d, moeccl_sched_t* out) {
  int n = d->nranks, r = d->rank;
  int window = d->window > 0 && d->window < n - 1 ? d->window : n - 1;
  moecclResult_t rc = moeccl_sched_reserve(out, 2 * n, n > 1 ? (n - 2) / window + 1 : 1);
  if (rc == moecclSuccess) rc = moeccl_a2a_add_self_copy(d, out);
  for (int k = 1; k < n && rc == moecclSuccess; k++) {
    int to = (r + k) % n, from = (r - k + n) % n;
    rc = moeccl_a2a_add_exchange(d, out, to, from);
    if (rc == moecclSuccess && k % window == 0) rc = moeccl_sched_end_step(out);
  }
  if (rc == moecclSuccess) rc = moeccl_sched_end_step(out);
  return rc;
}
