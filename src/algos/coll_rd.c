/*
 * Recursive-doubling AllReduce: the whole vector every step, so log2 n
 * messages on the critical path (latency-optimal, for small vectors).
 *
 * With p the largest power of two <= n and rem = n - p, the first 2 rem
 * ranks fold (MPICH): each even one sends its raw vector to the next odd
 * one, which reduces it, and gets the result back at the end.  The p others
 * (new index v) run log2 p steps: step j exchanges the whole partial with
 * v ^ 2^j and both compute mine (+) theirs (the same value on both sides:
 * the reductions commute).  Each step sends one buffer and reduces into the
 * other, alternating between RECV and SCRATCH, arranged so that the last
 * write lands in RECV; no step writes what it sends.  In place, where the
 * first exchange would reduce into the RECV bytes it sends from SEND, the
 * partials use two scratch halves first (and with a single exchange one
 * copy step moves the result to RECV).
 * Steps: log2 p (+1 fold, +1 unfold); bytes per rank: the vector per step
 * each way; scratch: the vector (two of them in the in-place case above).
 */
#include "algos/coll_util.h"

/* Where write k (1-based) of t lands; special: the in-place case. */
static coll_range_t rd_dst(int k, int t, int special, uint64_t b) {
  coll_range_t recv = coll_range(MOECCL_BUF_RECV, 0, b), s0 = coll_range(MOECCL_BUF_SCRATCH, 0, b);
  if (!special) return (t - k) % 2 == 0 ? recv : s0;
  if (k == 1) return s0;
  if (k == 2) return coll_range(MOECCL_BUF_SCRATCH, b, b);
  return (k % 2) ? recv : s0;
}

moecclResult_t moeccl_allreduce_rd(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank;
  if (n == 1) return coll_single(d, s);
  int p = coll_pow2_floor(n), rem = n - p, v = coll_fold_new(r, rem), lp = 0;
  uint64_t b = d->count * d->elem_size;
  coll_range_t send = coll_range(MOECCL_BUF_SEND, 0, b), recv = coll_range(MOECCL_BUF_RECV, 0, b);
  while ((1 << lp) < p) lp++;
  MOECCL_CHECK(moeccl_sched_reserve(s, 2 * lp + 4, lp + 4));
  if (v < 0) { /* even fold rank: hand over the raw vector, get the result */
    MOECCL_CHECK(coll_send(s, r + 1, send));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    MOECCL_CHECK(coll_recv(s, r + 1, recv));
    return moeccl_sched_end_step(s);
  }
  int folded = r < 2 * rem, t = lp + folded;
  int special = d->in_place && !folded && t % 2 == 1;
  coll_need_scratch(s, (size_t)(special && t > 1 ? 2 : 1) * b);
  coll_range_t cur = send;
  int k = 1;
  if (folded) {
    cur = rd_dst(k++, t, special, b);
    MOECCL_CHECK(coll_recv_reduce(s, r - 1, send, cur, MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  for (int j = 0; j < lp; j++, k++) {
    int pr = coll_fold_old(v ^ (1 << j), rem);
    coll_range_t dst = rd_dst(k, t, special, b);
    unsigned fl =
        (k == 1 ? MOECCL_OPF_PRE_A : 0) | (j == 0 && pr >= 2 * rem ? MOECCL_OPF_PRE_B : 0);
    MOECCL_CHECK(coll_send(s, pr, cur));
    MOECCL_CHECK(coll_recv_reduce(s, pr, cur, dst, fl));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    cur = dst;
  }
  if (cur.buf != MOECCL_BUF_RECV) { /* in place, one exchange */
    MOECCL_CHECK(coll_copy(d, s, cur, recv, 0));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  if (folded) {
    MOECCL_CHECK(coll_send(s, r - 1, recv));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moecclSuccess;
}
