/*
 * Ring collectives: every step this rank sends one slice to rank r+1 and
 * receives one from rank r-1, so each link carries 1/n of the data per step
 * (bandwidth-optimal, n-1 steps each way).
 *
 * AllReduce: the vector in n element-aligned slices of RECV.  Reduce-scatter,
 *   steps k = 0..n-2: send slice r-k (step 0: the raw SEND slice r; later the
 *   RECV slice reduced in the step before), receive slice r-k-1 and reduce
 *   it into RECV with the own SEND slice (PRE_A; the message is raw in step
 *   0 only).  Rank r then holds slice r+1 complete; all-gather, steps k =
 *   0..n-2: send RECV slice r+1-k, receive slice r-k.  2(n-1) steps, about
 *   2 (n-1)/n of the vector each way, no scratch.  Slice s is reduced in the
 *   order s, s+1, ..., s-1 on every run.
 * ReduceScatter: block b (count elements) of SEND goes to rank b.  Steps k =
 *   0..n-2: rank r receives the partial of block r-k-2 from r-1 and adds its
 *   own SEND block to it; it sends what it received in the step before (step
 *   0: its raw SEND block r-1).  Partials alternate between two scratch
 *   halves, so no step writes what it sends; the last step reduces block r
 *   straight into RECV.  n-1 steps, (n-1) count elements each way, scratch
 *   min(n-2, 2) * count elements.
 * AllGather: step 0 copies SEND to RECV block r (unless in place) and sends
 *   SEND to r+1; step k sends RECV block r-k and receives block r-k-1.  n-1
 *   steps, no scratch.
 * nranks == 1: one copy (scaled for reductions).  In place: SEND slices and
 * blocks are read only before (or by the op that reduces into) the RECV
 * bytes aliasing them.
 */
#include "algos/coll_util.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

moecclResult_t moeccl_allreduce_ring(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank, right = mod(r + 1, n), left = mod(r - 1, n);
  size_t c = d->count;
  if (n == 1) return coll_single(d, s);
  MOECCL_CHECK(moeccl_sched_reserve(s, 4 * n, 2 * n));
  for (int k = 0; k < n - 1; k++) {
    int snd = mod(r - k, n), rcv = mod(r - k - 1, n);
    uint32_t sb = k == 0 ? MOECCL_BUF_SEND : MOECCL_BUF_RECV;
    MOECCL_CHECK(coll_send(s, right, coll_slices(d, sb, 0, c, n, snd, snd + 1)));
    unsigned fl = MOECCL_OPF_PRE_A | (k == 0 ? MOECCL_OPF_PRE_B : 0);
    MOECCL_CHECK(coll_recv_reduce(s, left, coll_slices(d, MOECCL_BUF_SEND, 0, c, n, rcv, rcv + 1),
                                  coll_slices(d, MOECCL_BUF_RECV, 0, c, n, rcv, rcv + 1), fl));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  for (int k = 0; k < n - 1; k++) {
    int snd = mod(r + 1 - k, n), rcv = mod(r - k, n);
    MOECCL_CHECK(coll_send(s, right, coll_slices(d, MOECCL_BUF_RECV, 0, c, n, snd, snd + 1)));
    MOECCL_CHECK(coll_recv(s, left, coll_slices(d, MOECCL_BUF_RECV, 0, c, n, rcv, rcv + 1)));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moecclSuccess;
}

moecclResult_t moeccl_reduce_scatter_ring(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank, right = mod(r + 1, n), left = mod(r - 1, n);
  uint64_t b = d->count * d->elem_size;
  if (n == 1) return coll_single(d, s);
  MOECCL_CHECK(moeccl_sched_reserve(s, 2 * n, n));
  coll_need_scratch(s, (size_t)(n - 2 < 2 ? n - 2 : 2) * b);
  coll_range_t prev = coll_range(MOECCL_BUF_SEND, (uint64_t)mod(r - 1, n) * b, b);
  for (int k = 0; k < n - 1; k++) {
    int blk = mod(r - k - 2, n);
    coll_range_t dst = k == n - 2 ? coll_range(MOECCL_BUF_RECV, 0, b)
                                  : coll_range(MOECCL_BUF_SCRATCH, (uint64_t)(k % 2) * b, b);
    MOECCL_CHECK(coll_send(s, right, prev));
    unsigned fl = MOECCL_OPF_PRE_A | (k == 0 ? MOECCL_OPF_PRE_B : 0);
    MOECCL_CHECK(
        coll_recv_reduce(s, left, coll_range(MOECCL_BUF_SEND, (uint64_t)blk * b, b), dst, fl));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    prev = dst;
  }
  return moecclSuccess;
}

moecclResult_t moeccl_allgather_ring(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank, right = mod(r + 1, n), left = mod(r - 1, n);
  uint64_t b = d->count * d->elem_size;
  if (n == 1) return coll_single(d, s);
  MOECCL_CHECK(moeccl_sched_reserve(s, 3 * n, n));
  MOECCL_CHECK(coll_copy(d, s, coll_range(MOECCL_BUF_SEND, 0, b),
                         coll_range(MOECCL_BUF_RECV, (uint64_t)r * b, b), 0));
  for (int k = 0; k < n - 1; k++) {
    int snd = mod(r - k, n), rcv = mod(r - k - 1, n);
    coll_range_t src = k == 0 ? coll_range(MOECCL_BUF_SEND, 0, b)
                              : coll_range(MOECCL_BUF_RECV, (uint64_t)snd * b, b);
    MOECCL_CHECK(coll_send(s, right, src));
    MOECCL_CHECK(coll_recv(s, left, coll_range(MOECCL_BUF_RECV, (uint64_t)rcv * b, b)));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moecclSuccess;
}
