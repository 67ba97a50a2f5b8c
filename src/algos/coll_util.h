/*
 * Helpers the collective generators (coll_*.c) share: element-aligned
 * slicing of a count into n parts, op shorthands, in-place aliasing, and
 * the folding of a non-power-of-two rank set (MPICH style) that rhd, rd and
 * hier use.  Everything is static inline; nothing here allocates.
 */
#ifndef MOECCL_COLL_UTIL_H_
#define MOECCL_COLL_UTIL_H_

#include <stdint.h>

#include "algos/coll_algos.h"
#include "base/check.h"
#include "topo/topo.h"

/* Slice i of count elements cut into n parts: the first count % n slices
 * hold one element more.  Offsets and sizes in elements. */
static inline size_t coll_slice_off(size_t count, int n, int i) {
  size_t q = count / (size_t)n, rem = count % (size_t)n, u = (size_t)i;
  return u * q + (u < rem ? u : rem);
}
static inline size_t coll_slice_cnt(size_t count, int n, int i) {
  return count / (size_t)n + ((size_t)i < count % (size_t)n ? 1 : 0);
}

/* A byte range of a buffer. */
typedef struct {
  uint32_t buf;
  uint64_t off, bytes;
} coll_range_t;

static inline coll_range_t coll_range(uint32_t buf, uint64_t off, uint64_t bytes) {
  coll_range_t x = {buf, off, bytes};
  return x;
}
/* Slices [a, b) of count cut into n, in buf at base bytes. */
static inline coll_range_t coll_slices(const moeccl_coll_desc_t* d, uint32_t buf, uint64_t base,
                                       size_t count, int n, int a, int b) {
  size_t lo = coll_slice_off(count, n, a), hi = coll_slice_off(count, n, b);
  return coll_range(buf, base + lo * d->elem_size, (hi - lo) * d->elem_size);
}

static inline moecclResult_t coll_send(moeccl_sched_t* s, int peer, coll_range_t x) {
  return moeccl_sched_add(s, MOECCL_OP_SEND, peer, x.buf, x.off, 0, 0, x.bytes);
}
static inline moecclResult_t coll_recv(moeccl_sched_t* s, int peer, coll_range_t x) {
  return moeccl_sched_add(s, MOECCL_OP_RECV, peer, 0, 0, x.buf, x.off, x.bytes);
}
/* dst = src (+) the message from peer (dst.bytes of it). */
static inline moecclResult_t coll_recv_reduce(moeccl_sched_t* s, int peer, coll_range_t src,
                                              coll_range_t dst, unsigned flags) {
  return moeccl_sched_add_flags(s, MOECCL_OP_RECV_REDUCE, peer, src.buf, src.off, dst.buf, dst.off,
                                dst.bytes, flags);
}

/* Where SEND byte 0 lies in RECV when the call is in place (coll_algos.h),
 * in bytes (negative: RECV starts inside SEND). */
static inline int64_t coll_send_in_recv(const moeccl_coll_desc_t* d) {
  int64_t blk = (int64_t)(d->count * d->elem_size);
  switch (d->kind) {
    case MOECCL_COLL_ALLGATHER: return (int64_t)d->rank * blk;
    case MOECCL_COLL_REDUCE_SCATTER: return -(int64_t)d->rank * blk;
    case MOECCL_COLL_GATHER: return (int64_t)d->root * blk;
    case MOECCL_COLL_SCATTER: return -(int64_t)d->root * blk;
    default: return 0;
  }
}

/* A copy SEND -> RECV (or RECV -> RECV), dropped when in place makes it a
 * copy of a range onto itself.  flags: MOECCL_OPF_PRE_B for a raw input
 * that becomes a result (then it is kept even onto itself: it scales). */
static inline moecclResult_t coll_copy(const moeccl_coll_desc_t* d, moeccl_sched_t* s,
                                       coll_range_t src, coll_range_t dst, unsigned flags) {
  if (!flags && src.buf == dst.buf && src.off == dst.off) return moecclSuccess;
  if (!flags && d->in_place && src.buf == MOECCL_BUF_SEND && dst.buf == MOECCL_BUF_RECV &&
      (int64_t)dst.off == (int64_t)src.off + coll_send_in_recv(d))
    return moecclSuccess;
  return moeccl_sched_add_flags(s, MOECCL_OP_COPY, -1, src.buf, src.off, dst.buf, dst.off,
                                src.bytes, flags);
}

/* One rank's own result from its raw input alone (nranks == 1). */
static inline moecclResult_t coll_single(const moeccl_coll_desc_t* d, moeccl_sched_t* s) {
  uint64_t b = d->count * d->elem_size;
  MOECCL_CHECK(coll_copy(d, s, coll_range(MOECCL_BUF_SEND, 0, b), coll_range(MOECCL_BUF_RECV, 0, b),
                         d->reduce ? MOECCL_OPF_PRE_B : 0));
  return moeccl_sched_end_step(s);
}

static inline void coll_need_scratch(moeccl_sched_t* s, size_t bytes) {
  if (bytes > s->scratch_bytes) s->scratch_bytes = bytes;
}

static inline int coll_is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }
static inline int coll_pow2_floor(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/* Folding n members onto p = pow2_floor(n) (MPICH): of the first 2 * rem
 * (rem = n - p) members the even ones hand their vector to the next odd one
 * and sit out.  coll_fold_new: the member's index among the p (-1: sits
 * out); coll_fold_old: the member of index v. */
static inline int coll_fold_new(int m, int rem) {
  if (m < 2 * rem) return (m & 1) ? m / 2 : -1;
  return m - rem;
}
static inline int coll_fold_old(int v, int rem) { return v < rem ? 2 * v + 1 : v + rem; }

/* The ranks a phase runs among: every rank (topo NULL), the ranks of one
 * node (member m: local index m), or the ranks of one local index across
 * the nodes (member m: the one on node m). */
typedef struct {
  int n, me; /* members, this rank's index among them */
  const moeccl_topo_t* topo;
  int fixed;  /* the node, or (across) the local index */
  int across; /* 1: members share a local index, one per node */
} coll_group_t;

static inline coll_group_t coll_flat(const moeccl_coll_desc_t* d) {
  coll_group_t g = {d->nranks, d->rank, NULL, 0, 0};
  return g;
}
static inline int coll_member(const coll_group_t* g, int m) {
  if (!g->topo) return m;
  return g->across ? moeccl_topo_rank_at(g->topo, m, g->fixed)
                   : moeccl_topo_rank_at(g->topo, g->fixed, m);
}

/* Phases shared between the algorithms (coll_direct.c, coll_rhd.c). */

/* Direct reduce-scatter among g's members of count elements of SEND (at
 * byte 0) cut into g->n slices: g->n - 1 steps, member me's slice reduced
 * into dst (dst.bytes == its size).  Step k sends slice me-k to member
 * me-k and reduces slice me from member me+k.  Nothing when g->n == 1. */
moecclResult_t moeccl_coll_direct_rs(const moeccl_coll_desc_t* d, moeccl_sched_t* s,
                                     const coll_group_t* g, size_t count, coll_range_t dst);
/* Direct all-gather of the slices of count elements at byte base of RECV
 * among g's members (member m holds slice m): one step. */
moecclResult_t moeccl_coll_direct_ag(const moeccl_coll_desc_t* d, moeccl_sched_t* s,
                                     const coll_group_t* g, size_t count, uint64_t base);
/* Rabenseifner's allreduce among g's members of count elements at byte
 * base of RECV (fold, recursive halving, recursive doubling, unfold).  raw:
 * the members' inputs are their raw SEND data at base (else their RECV
 * ranges already hold partials).  g->n >= 2. */
moecclResult_t moeccl_coll_rhd_ar(const moeccl_coll_desc_t* d, moeccl_sched_t* s,
                                  const coll_group_t* g, size_t count, uint64_t base, int raw);

#endif
