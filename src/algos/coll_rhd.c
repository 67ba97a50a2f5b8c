/*
 * Recursive halving / doubling (Rabenseifner), log2 n steps each way.
 *
 * AllReduce (any n): with p the largest power of two <= n and rem = n - p,
 *   the first 2 rem ranks fold (MPICH): each even one sends its raw vector to
 *   the next odd one, which reduces it into RECV, and sits out until the
 *   end.  The p remaining ranks (new index v) cut the vector into p
 *   element-aligned slices and run a recursive-halving reduce-scatter:
 *   step j (distance p/2, p/4, ..., 1) keeps the half of its current slice
 *   range on v's side, sends the other half to v ^ distance and reduces the
 *   partner's copy of the kept half into RECV (the kept and the sent halves
 *   are disjoint, so RECV accumulates in place).  Rank v then holds slice v;
 *   recursive doubling (distance 1, 2, ..., p/2) gathers the slices.  The
 *   odd fold ranks send the result to their even partner.  2 log2 p steps
 *   (+2 with the fold), about 2 (p-1)/p of the vector each way (+1 vector
 *   for the fold), no scratch.
 * ReduceScatter (n a power of two): recursive halving over the n blocks,
 *   partials of the kept blocks in scratch ((n/2) count elements), the last
 *   step reducing block r into RECV.  log2 n steps.
 * AllGather (n a power of two): recursive doubling, the first step sending
 *   SEND (and copying it to RECV block r unless in place).  log2 n steps.
 * Elsewhere (ReduceScatter and AllGather on other n) the generators write
 * ring's schedule; moeccl_coll_rhd_applies() is 0 there.
 */
#include "algos/coll_util.h"

int moeccl_coll_rhd_applies(const moeccl_coll_desc_t* d) {
  return d->kind == MOECCL_COLL_ALLREDUCE || coll_is_pow2(d->nranks);
}

/* Fold step (before) or unfold step (after) of a non-power-of-two group. */
static moecclResult_t rhd_fold(moeccl_sched_t* s, const coll_group_t* g, coll_range_t vec, int raw,
                               int after) {
  int rem = g->n - coll_pow2_floor(g->n), me = g->me;
  if (me >= 2 * rem) return moecclSuccess;
  coll_range_t in = vec;
  if (raw) in.buf = MOECCL_BUF_SEND;
  if (me % 2 == 0)
    MOECCL_CHECK(after ? coll_recv(s, coll_member(g, me + 1), vec)
                       : coll_send(s, coll_member(g, me + 1), in));
  else if (after) MOECCL_CHECK(coll_send(s, coll_member(g, me - 1), vec));
  else
    MOECCL_CHECK(coll_recv_reduce(s, coll_member(g, me - 1), in, vec,
                                  raw ? MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B : 0));
  return moeccl_sched_end_step(s);
}

moecclResult_t moeccl_coll_rhd_ar(const moeccl_coll_desc_t* d, moeccl_sched_t* s,
                                  const coll_group_t* g, size_t count, uint64_t base, int raw) {
  int p = coll_pow2_floor(g->n), rem = g->n - p, v = coll_fold_new(g->me, rem);
  coll_range_t vec = coll_range(MOECCL_BUF_RECV, base, count * d->elem_size);
  MOECCL_CHECK(moeccl_sched_reserve(s, 8 + 4 * p, 4 + 2 * p));
  MOECCL_CHECK(rhd_fold(s, g, vec, raw, 0));
  if (v >= 0) {
    int mine_raw = raw && g->me >= 2 * rem, lo = 0;
    for (int dist = p / 2; dist >= 1; dist /= 2) {
      int pv = v ^ dist, pr = coll_fold_old(pv, rem), keep = lo + (v & dist),
          give = lo + (pv & dist);
      int peer_raw = raw && dist == p / 2 && pr >= 2 * rem;
      uint32_t cur = mine_raw ? MOECCL_BUF_SEND : MOECCL_BUF_RECV;
      MOECCL_CHECK(
          coll_send(s, coll_member(g, pr), coll_slices(d, cur, base, count, p, give, give + dist)));
      unsigned fl = (mine_raw ? MOECCL_OPF_PRE_A : 0) | (peer_raw ? MOECCL_OPF_PRE_B : 0);
      MOECCL_CHECK(coll_recv_reduce(
          s, coll_member(g, pr), coll_slices(d, cur, base, count, p, keep, keep + dist),
          coll_slices(d, MOECCL_BUF_RECV, base, count, p, keep, keep + dist), fl));
      MOECCL_CHECK(moeccl_sched_end_step(s));
      lo = keep, mine_raw = 0;
    }
    for (int dist = 1; dist < p; dist *= 2) {
      int pv = v ^ dist, pr = coll_fold_old(pv, rem), a = v & ~(dist - 1), b = pv & ~(dist - 1);
      MOECCL_CHECK(coll_send(s, coll_member(g, pr),
                             coll_slices(d, MOECCL_BUF_RECV, base, count, p, a, a + dist)));
      MOECCL_CHECK(coll_recv(s, coll_member(g, pr),
                             coll_slices(d, MOECCL_BUF_RECV, base, count, p, b, b + dist)));
      MOECCL_CHECK(moeccl_sched_end_step(s));
    }
  }
  return rhd_fold(s, g, vec, raw, 1);
}

moecclResult_t moeccl_allreduce_rhd(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  if (d->nranks == 1) return coll_single(d, s);
  coll_group_t g = coll_flat(d);
  return moeccl_coll_rhd_ar(d, s, &g, d->count, 0, 1);
}

/* Recursive halving over the n blocks: the kept blocks' partials live in
 * scratch at (block - first kept block of step 1) * count. */
moecclResult_t moeccl_reduce_scatter_rhd(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank;
  if (!coll_is_pow2(n)) return moeccl_reduce_scatter_ring(d, s);
  if (n == 1) return coll_single(d, s);
  uint64_t b = d->count * d->elem_size;
  coll_need_scratch(s, n > 2 ? (size_t)(n / 2) * b : 0);
  MOECCL_CHECK(moeccl_sched_reserve(s, 4 * n, n));
  int lo = 0, base = (r & (n / 2)); /* base: first block kept after step 1 */
  for (int dist = n / 2; dist >= 1; dist /= 2) {
    int peer = r ^ dist, keep = lo + (r & dist), give = lo + (peer & dist);
    int first = dist == n / 2;
    uint32_t cur = first ? MOECCL_BUF_SEND : MOECCL_BUF_SCRATCH;
    uint64_t cur_base = first ? 0 : (uint64_t)base * b;
    MOECCL_CHECK(
        coll_send(s, peer, coll_range(cur, (uint64_t)give * b - cur_base, (uint64_t)dist * b)));
    coll_range_t src = coll_range(cur, (uint64_t)keep * b - cur_base, (uint64_t)dist * b);
    coll_range_t dst =
        dist == 1 ? coll_range(MOECCL_BUF_RECV, 0, b)
                  : coll_range(MOECCL_BUF_SCRATCH, (uint64_t)(keep - base) * b, (uint64_t)dist * b);
    MOECCL_CHECK(
        coll_recv_reduce(s, peer, src, dst, first ? MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B : 0));
    MOECCL_CHECK(moeccl_sched_end_step(s));
    lo = keep;
  }
  return moecclSuccess;
}

moecclResult_t moeccl_allgather_rhd(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  int n = d->nranks, r = d->rank;
  if (!coll_is_pow2(n)) return moeccl_allgather_ring(d, s);
  if (n == 1) return coll_single(d, s);
  uint64_t b = d->count * d->elem_size;
  MOECCL_CHECK(moeccl_sched_reserve(s, 4 * n, n));
  MOECCL_CHECK(coll_copy(d, s, coll_range(MOECCL_BUF_SEND, 0, b),
                         coll_range(MOECCL_BUF_RECV, (uint64_t)r * b, b), 0));
  for (int dist = 1; dist < n; dist *= 2) {
    int peer = r ^ dist, a = r & ~(dist - 1), c = peer & ~(dist - 1);
    coll_range_t mine = dist == 1
                            ? coll_range(MOECCL_BUF_SEND, 0, b)
                            : coll_range(MOECCL_BUF_RECV, (uint64_t)a * b, (uint64_t)dist * b);
    MOECCL_CHECK(coll_send(s, peer, mine));
    MOECCL_CHECK(
        coll_recv(s, peer, coll_range(MOECCL_BUF_RECV, (uint64_t)c * b, (uint64_t)dist * b)));
    MOECCL_CHECK(moeccl_sched_end_step(s));
  }
  return moecclSuccess;
}
