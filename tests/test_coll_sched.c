/*
 * Symbolic checker of the collectives' schedule generators (coll_algos.h),
 * without processes: every rank's schedule is built for one call, then all
 * of them run together in an in-memory simulator with rendezvous semantics
 * (a step ends when all its receives matched and all its sends were taken;
 * messages of a pair match in posting order; a send's data is read when its
 * receiver takes it; no rank able to move while some are unfinished is a
 * deadlock).
 *
 * Elements are symbolic.  Non-reducing collectives: each holds (origin
 * rank, origin index) and must land exactly where the collective says.
 * Reducing ones: each holds its index in the vector, the set of ranks it
 * combines and the set of those scaled by the pre-multiplier, plus a hash
 * of the shape of its reduction tree (commutative per node: AllReduce must
 * give every rank the same tree, so the same bits).  Up to 64 ranks the sets
 * are exact bitsets and a reduction of two operands sharing a rank fails on
 * the spot; above 64 (exact sets would cost n^3 bits for a ring
 * ReduceScatter) they are 64-bit fingerprints, sums of random per-rank keys
 * with counts, exact up to hash collisions (2^-64), a double count failing
 * at the latest at the end.  MOECCL_OPF_PRE_A / PRE_B must name exactly raw
 * operands (one rank, unscaled); every result must hold all ranks, each
 * scaled once, from the right element index.
 *
 * Also: ops inside their buffers, element-aligned, root-only buffers never
 * named off the root, SEND never written (in place: outside the RECV bytes
 * aliasing it) and equal to its input at the end, no two ops of a step
 * racing on a byte range, exact message sizes, every message matched; the
 * fallback schedules (rhd on non-powers of two, hier off regular multi-node
 * topologies) equal ring's / direct's; hier's messages between nodes stay
 * on the rank's local index; step counts as documented.  A mutation test
 * feeds broken schedules and requires the checker to fail them.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algos/coll_algos.h"
#include "topo/topo.h"

#define MAXN 1024
#define EXACT_MAX 64
#define BUDGET_WORDS (3u << 20) /* simulated memory of one case, in 8-byte words */

typedef struct {
  const moeccl_coll_algo_t* algo;
  moeccl_coll_kind_t kind;
  int n, root, in_place;
  size_t count, es;
  const moeccl_topo_t* topo;
  const char* topo_name;
} case_t;

typedef struct {
  int present;
  size_t base, len; /* elements of the rank's memory */
} bufmap_t;

typedef struct {
  uint64_t* mem; /* W words per element */
  size_t elems;
  bufmap_t buf[MOECCL_BUF_NSTD];
  int step, posted, pending;
  uint64_t* sends; /* this step's sends: peer << 32 | op index, sorted */
  int nsends;
  int* recvs; /* this step's receive op indices */
  int nrecvs;
  uint8_t* done; /* per op: matched / taken */
} rank_t;

static const case_t* C;
static moeccl_sched_t S[MAXN];
static rank_t R[MAXN];
static moeccl_sched_t ref; /* fallback comparisons */
static int W, exact, reducing, quiet, errors;
static uint64_t key1[MAXN], tot1, tot2;
static long cases_run[MOECCL_COLL_NALGOS][MOECCL_COLL_NKINDS];
static int stat_ops[MOECCL_COLL_NALGOS][MOECCL_COLL_NKINDS],
    stat_steps[MOECCL_COLL_NALGOS][MOECCL_COLL_NKINDS];

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- reports ---- */

static const char* op_name(int t) {
  static const char* const names[] = {"SEND", "RECV", "COPY", "REDUCE", "RECV_REDUCE"};
  return t >= 0 && t < MOECCL_OP_NTYPES ? names[t] : "?";
}

static int step_of(const moeccl_sched_t* s, int op) {
  int st = 0;
  while (st < s->nsteps && s->step_end[st] <= op) st++;
  return st;
}

/* Prints the case, rank, step and op (op < 0: none) and counts the error. */
static void fail(int r, int op, const char* fmt, ...) {
  if (errors++ || quiet) return;
  fprintf(stderr, "FAIL %s %s n=%d count=%zu root=%d in_place=%d elem=%zu topo=%s: rank %d",
          C->algo->name, moeccl_coll_kind_name(C->kind), C->n, C->count, C->root, C->in_place,
          C->es, C->topo_name, r);
  if (op >= 0) {
    const moeccl_sched_op_t* o = &S[r].ops[op];
    fprintf(stderr, " step %d op %d (%s peer %d src %u+%llu dst %u+%llu %llu bytes flags %u)",
            step_of(&S[r], op), op, op_name(o->type), o->peer, o->src_buf,
            (unsigned long long)o->src_off, o->dst_buf, (unsigned long long)o->dst_off,
            (unsigned long long)o->bytes, o->flags);
  }
  fprintf(stderr, ": ");
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
}

/* ---- elements ----
 * Reducing (W = 4): w0 = index + 1 | count << 32 | scaled count << 48 (0:
 * uninitialised), w1 = tree hash, w2 = ranks (bitset or key sum), w3 =
 * scaled ranks.  Non-reducing (W = 1): (origin rank + 1) << 32 | index + 1. */

static uint64_t ident(int r, size_t i) { return (uint64_t)(r + 1) << 32 | (uint64_t)(i + 1); }
static uint32_t e_idx(const uint64_t* e) { return (uint32_t)e[0] - 1; }
static unsigned e_cnt(const uint64_t* e) { return (unsigned)(e[0] >> 32) & 0xffff; }
static unsigned e_scnt(const uint64_t* e) { return (unsigned)(e[0] >> 48); }

static void raw_elem(uint64_t* e, int r, size_t i) {
  if (!reducing) {
    e[0] = ident(r, i);
    return;
  }
  e[0] = (uint64_t)(i + 1) | 1ull << 32;
  e[1] = mix(mix((uint64_t)r) ^ i);
  e[2] = key1[r];
  e[3] = 0;
}

static int is_raw(const uint64_t* e) { return e[0] && e_cnt(e) == 1 && e_scnt(e) == 0; }
static void scale(uint64_t* e) {
  e[0] |= 1ull << 48;
  e[1] = mix(e[1] ^ 0x5ca1ed);
  e[3] = exact ? e[2] : mix(e[2]);
}

/* out = a (+) b with the operands' PRE flags; 0 on success. */
static int combine(uint64_t* out, const uint64_t* pa, int fa, const uint64_t* pb, int fb, int r,
                   int op) {
  uint64_t a[4], b[4];
  memcpy(a, pa, sizeof(a)), memcpy(b, pb, sizeof(b));
  if (!a[0] || !b[0]) return fail(r, op, "reduces an uninitialised element"), 1;
  if (e_idx(a) != e_idx(b))
    return fail(r, op, "combines element %u with element %u", e_idx(a), e_idx(b)), 1;
  if ((fa && !is_raw(a)) || (fb && !is_raw(b)))
    return fail(r, op, "a PRE flag names a partial (not a raw input) at element %u", e_idx(a)), 1;
  if (fa) scale(a);
  if (fb) scale(b);
  unsigned cnt = e_cnt(a) + e_cnt(b), scnt = e_scnt(a) + e_scnt(b);
  if (exact ? (a[2] & b[2]) != 0 : cnt > (unsigned)C->n)
    return fail(r, op, "counts a rank twice at element %u", e_idx(a)), 1;
  out[0] = (uint64_t)(e_idx(a) + 1) | (uint64_t)cnt << 32 | (uint64_t)scnt << 48;
  uint64_t lo = a[1] < b[1] ? a[1] : b[1], hi = a[1] ^ b[1] ^ lo;
  out[1] = mix(lo * 31 + mix(hi));
  out[2] = exact ? a[2] | b[2] : a[2] + b[2];
  out[3] = exact ? a[3] | b[3] : a[3] + b[3];
  return 0;
}

/* ---- buffers of the call ---- */

static size_t send_len(int r) {
  const case_t* c = C;
  switch (c->kind) {
    case MOECCL_COLL_REDUCE_SCATTER: return (size_t)c->n * c->count;
    case MOECCL_COLL_BROADCAST: return r == c->root ? c->count : SIZE_MAX;
    case MOECCL_COLL_SCATTER: return r == c->root ? (size_t)c->n * c->count : SIZE_MAX;
    default: return c->count;
  }
}
static size_t recv_len(int r) {
  const case_t* c = C;
  switch (c->kind) {
    case MOECCL_COLL_ALLGATHER: return (size_t)c->n * c->count;
    case MOECCL_COLL_REDUCE: return r == c->root ? c->count : SIZE_MAX;
    case MOECCL_COLL_GATHER: return r == c->root ? (size_t)c->n * c->count : SIZE_MAX;
    default: return c->count;
  }
}
/* In place: element of RECV where SEND starts (negative: RECV in SEND). */
static long send_in_recv(int r) {
  const case_t* c = C;
  long blk = (long)c->count;
  switch (c->kind) {
    case MOECCL_COLL_ALLGATHER: return r * blk;
    case MOECCL_COLL_REDUCE_SCATTER: return -r * blk;
    case MOECCL_COLL_GATHER: return c->root * blk;
    case MOECCL_COLL_SCATTER: return -c->root * blk;
    default: return 0;
  }
}

/* Lays out rank r's memory: SEND, RECV (aliased in place), scratch. */
static void layout(int r) {
  rank_t* x = &R[r];
  size_t sl = send_len(r), rl = recv_len(r), top = 0;
  bufmap_t* b = x->buf;
  memset(b, 0, sizeof(x->buf));
  if (sl != SIZE_MAX) b[MOECCL_BUF_SEND] = (bufmap_t){1, 0, sl};
  if (rl != SIZE_MAX) b[MOECCL_BUF_RECV] = (bufmap_t){1, 0, rl};
  if (C->in_place && sl != SIZE_MAX && rl != SIZE_MAX) {
    long d = send_in_recv(r);
    if (d >= 0) b[MOECCL_BUF_SEND].base = (size_t)d;
    else b[MOECCL_BUF_RECV].base = (size_t)-d;
    top = sl + (d > 0 ? (size_t)d : 0);
    if (rl + (d < 0 ? (size_t)-d : 0) > top) top = rl + (d < 0 ? (size_t)-d : 0);
  } else {
    if (sl != SIZE_MAX) top = sl;
    if (rl != SIZE_MAX) b[MOECCL_BUF_RECV].base = top, top += rl;
  }
  size_t sc = S[r].scratch_bytes / C->es;
  b[MOECCL_BUF_SCRATCH] = (bufmap_t){1, top, sc};
  top += sc;
  x->elems = top;
  x->mem = calloc(top * (size_t)W + 1, sizeof(uint64_t));
  if (b[MOECCL_BUF_SEND].present)
    for (size_t i = 0; i < sl; i++) raw_elem(x->mem + (b[MOECCL_BUF_SEND].base + i) * W, r, i);
}

static uint64_t* at(int r, size_t phys) { return R[r].mem + phys * (size_t)W; }

/* ---- static checks of one rank's schedule ---- */

static int range_ok(int r, int op, uint32_t buf, uint64_t off, uint64_t bytes, int write) {
  if (buf >= MOECCL_BUF_NSTD) return fail(r, op, "names buffer %u", buf), 0;
  const bufmap_t* b = &R[r].buf[buf];
  if (!b->present) return fail(r, op, "names a root-only buffer on a non-root rank"), 0;
  if (write && buf == MOECCL_BUF_SEND) return fail(r, op, "writes the SEND buffer"), 0;
  if (off % C->es || bytes % C->es) return fail(r, op, "is not element-aligned"), 0;
  if (off / C->es > b->len || bytes / C->es > b->len - off / C->es)
    return fail(r, op, "is out of bounds (buffer of %zu elements)", b->len), 0;
  return 1;
}

static size_t phys(int r, uint32_t buf, uint64_t off) { return R[r].buf[buf].base + off / C->es; }

typedef struct {
  size_t start, end;
  int write, op;
} span_t;

static int span_cmp(const void* a, const void* b) {
  const span_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

static int check_op(int r, int i) {
  const moeccl_sched_op_t* o = &S[r].ops[i];
  int t = o->type, red = t == MOECCL_OP_REDUCE || t == MOECCL_OP_RECV_REDUCE;
  if (t >= MOECCL_OP_NTYPES) return fail(r, i, "unknown op type"), 0;
  if (red && !reducing) return fail(r, i, "reduces in a collective that does not"), 0;
  unsigned allowed = red ? 3 : (t == MOECCL_OP_COPY && reducing ? MOECCL_OPF_PRE_B : 0);
  if (o->flags & ~allowed) return fail(r, i, "has flags that op cannot have"), 0;
  if (!o->bytes) return fail(r, i, "moves zero bytes"), 0;
  if (t != MOECCL_OP_COPY && t != MOECCL_OP_REDUCE &&
      (o->peer < 0 || o->peer >= C->n || o->peer == r))
    return fail(r, i, "names peer %d", o->peer), 0;
  if (t != MOECCL_OP_RECV && !range_ok(r, i, o->src_buf, o->src_off, o->bytes, 0)) return 0;
  if (t != MOECCL_OP_SEND && !range_ok(r, i, o->dst_buf, o->dst_off, o->bytes, 1)) return 0;
  if (t != MOECCL_OP_COPY && !red) return 1;
  size_t a = phys(r, o->src_buf, o->src_off), b = phys(r, o->dst_buf, o->dst_off),
         len = o->bytes / C->es;
  if (a == b && t == MOECCL_OP_REDUCE) return fail(r, i, "reduces a range with itself"), 0;
  if (a == b && t == MOECCL_OP_COPY && !o->flags)
    return fail(r, i, "copies a range onto itself"), 0;
  if (a != b && a < b + len && b < a + len)
    return fail(r, i, "source and destination overlap partially"), 0;
  return 1;
}

/* No op of a step writes a range another op of the step reads or writes. */
static int check_step_races(int r, int begin, int end, span_t* sp) {
  int m = 0;
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* o = &S[r].ops[i];
    size_t len = o->bytes / C->es;
    size_t src = o->type != MOECCL_OP_RECV ? phys(r, o->src_buf, o->src_off) : SIZE_MAX;
    size_t dst = o->type != MOECCL_OP_SEND ? phys(r, o->dst_buf, o->dst_off) : SIZE_MAX;
    if (dst != SIZE_MAX) sp[m++] = (span_t){dst, dst + len, 1, i};
    if (src != SIZE_MAX && src != dst) sp[m++] = (span_t){src, src + len, 0, i};
  }
  qsort(sp, (size_t)m, sizeof(*sp), span_cmp);
  size_t wend = 0, rend = 0;
  int wop = -1, rop = -1;
  for (int k = 0; k < m; k++) {
    if (wend > sp[k].start && wop != sp[k].op)
      return fail(r, sp[k].op, "races with op %d of its step (it writes what this one uses)", wop),
             0;
    if (sp[k].write && rend > sp[k].start && rop != sp[k].op)
      return fail(r, sp[k].op, "writes what op %d of its step reads", rop), 0;
    if (sp[k].write && sp[k].end > wend) wend = sp[k].end, wop = sp[k].op;
    if (!sp[k].write && sp[k].end > rend) rend = sp[k].end, rop = sp[k].op;
  }
  return 1;
}

static int check_static(int r) {
  const moeccl_sched_t* s = &S[r];
  if (s->nbufs != MOECCL_BUF_NSTD || s->scratch_buf != MOECCL_BUF_SCRATCH)
    return fail(r, -1, "the generator changed the buffer table"), 0;
  for (int i = 0; i < s->nops; i++)
    if (!check_op(r, i)) return 0;
  span_t* sp = malloc(2 * (size_t)(s->nops + 1) * sizeof(*sp));
  int ok = 1;
  for (int st = 0, begin = 0; st < s->nsteps && ok; begin = s->step_end[st++]) {
    if (s->step_end[st] <= begin) ok = 0, fail(r, -1, "step %d is empty", st);
    else ok = check_step_races(r, begin, s->step_end[st], sp);
  }
  free(sp);
  return ok;
}

/* ---- simulation ---- */

static int u64_cmp(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

static void local_op(int r, int i) {
  const moeccl_sched_op_t* o = &S[r].ops[i];
  size_t len = o->bytes / C->es, src = phys(r, o->src_buf, o->src_off),
         dst = phys(r, o->dst_buf, o->dst_off);
  if (o->type == MOECCL_OP_COPY) {
    memmove(at(r, dst), at(r, src), len * (size_t)W * sizeof(uint64_t));
    for (size_t k = 0; k < len && (o->flags & MOECCL_OPF_PRE_B); k++) {
      if (!is_raw(at(r, dst + k)))
        return fail(r, i, "scales a partial (not a raw input) at element %zu", k);
      scale(at(r, dst + k));
    }
    return;
  }
  for (size_t k = 0; k < len; k++)
    if (combine(at(r, dst + k), at(r, dst + k), o->flags & 1, at(r, src + k), o->flags & 2, r, i))
      return;
}

static void post(int r) {
  rank_t* x = &R[r];
  const moeccl_sched_t* s = &S[r];
  int begin = x->step ? s->step_end[x->step - 1] : 0, end = s->step_end[x->step];
  x->nsends = x->nrecvs = 0;
  for (int i = begin; i < end && !errors; i++) {
    int t = s->ops[i].type;
    x->done[i] = 0;
    if (t == MOECCL_OP_COPY || t == MOECCL_OP_REDUCE) local_op(r, i);
    else if (t == MOECCL_OP_SEND)
      x->sends[x->nsends++] = (uint64_t)s->ops[i].peer << 32 | (uint32_t)i;
    else x->recvs[x->nrecvs++] = i;
  }
  qsort(x->sends, (size_t)x->nsends, sizeof(uint64_t), u64_cmp);
  x->pending = x->nsends + x->nrecvs;
  x->posted = 1;
}

/* The first send of rank a's current step to b not taken yet, or -1. */
static int pending_send(int a, int b) {
  rank_t* x = &R[a];
  if (a < 0 || a >= C->n || !x->posted) return -1;
  int lo = 0, hi = x->nsends;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if ((x->sends[mid] >> 32) < (uint64_t)b) lo = mid + 1;
    else hi = mid;
  }
  for (; lo < x->nsends && (int)(x->sends[lo] >> 32) == b; lo++) {
    int i = (int)(uint32_t)x->sends[lo];
    if (!x->done[i]) return i;
  }
  return -1;
}

static void deliver(int r, int i, int a, int j) {
  const moeccl_sched_op_t *o = &S[r].ops[i], *so = &S[a].ops[j];
  if (so->bytes != o->bytes) {
    fail(r, i, "matches a %llu-byte message from rank %d (its op %d, step %d)",
         (unsigned long long)so->bytes, a, j, step_of(&S[a], j));
    return;
  }
  size_t len = o->bytes / C->es, src = phys(a, so->src_buf, so->src_off),
         dst = phys(r, o->dst_buf, o->dst_off);
  if (o->type == MOECCL_OP_RECV) {
    memcpy(at(r, dst), at(a, src), len * (size_t)W * sizeof(uint64_t));
  } else {
    size_t lsrc = phys(r, o->src_buf, o->src_off);
    for (size_t k = 0; k < len; k++)
      if (combine(at(r, dst + k), at(r, lsrc + k), o->flags & 1, at(a, src + k), o->flags & 2, r,
                  i))
        return;
  }
  R[r].done[i] = R[a].done[j] = 1;
  R[r].pending--, R[a].pending--;
}

static int match_recvs(int r) {
  rank_t* x = &R[r];
  int progress = 0;
  for (int k = 0; k < x->nrecvs && !errors; k++) {
    int i = x->recvs[k];
    if (x->done[i]) continue;
    int a = S[r].ops[i].peer, j = pending_send(a, r);
    if (j < 0) continue;
    deliver(r, i, a, j);
    progress = 1;
  }
  return progress;
}

static void simulate(void) {
  int n = C->n;
  for (;;) {
    int progress = 0, unfinished = 0;
    for (int r = 0; r < n && !errors; r++) {
      rank_t* x = &R[r];
      while (x->step < S[r].nsteps && !errors) {
        if (!x->posted) post(r), progress = 1;
        progress |= match_recvs(r);
        if (x->pending) break;
        x->step++, x->posted = 0, progress = 1;
      }
      unfinished += x->step < S[r].nsteps;
    }
    if (errors || !unfinished) return;
    if (!progress) {
      for (int r = 0; r < n; r++) {
        if (R[r].step >= S[r].nsteps) continue;
        int op = -1;
        for (int k = 0; k < R[r].nrecvs && op < 0; k++)
          if (!R[r].done[R[r].recvs[k]]) op = R[r].recvs[k];
        for (int k = 0; k < R[r].nsends && op < 0; k++)
          if (!R[r].done[(uint32_t)R[r].sends[k]]) op = (int)(uint32_t)R[r].sends[k];
        fail(r, op, "deadlock: stuck in step %d of %d (%d ranks unfinished)", R[r].step,
             S[r].nsteps, unfinished);
        return;
      }
    }
  }
}

/* ---- results ---- */

static int check_reduced(int r, const uint64_t* e, size_t idx, size_t where) {
  int n = C->n;
  int ok = e[0] && e_idx(e) == idx && e_cnt(e) == (unsigned)n && e_scnt(e) == (unsigned)n &&
           e[2] == tot1 && e[3] == tot2;
  if (ok) return 1;
  if (!e[0]) fail(r, -1, "RECV element %zu is not written", where);
  else
    fail(r, -1,
         "RECV element %zu holds element %u of %u contributions (%u scaled), expected element %zu "
         "of %d, each scaled once%s",
         where, e_idx(e), e_cnt(e), e_scnt(e), idx, n,
         e_cnt(e) == (unsigned)n ? " (some rank counted twice, another missing)" : "");
  return 0;
}

static int check_ident(int r, uint64_t got, int from, size_t idx, size_t where) {
  if (got == ident(from, idx)) return 1;
  if (!got)
    fail(r, -1, "RECV element %zu is not written (expected element %zu of rank %d)", where, idx,
         from);
  else
    fail(r, -1, "RECV element %zu holds element %u of rank %d, expected element %zu of rank %d",
         where, (unsigned)(got & 0xffffffffu) - 1, (int)(got >> 32) - 1, idx, from);
  return 0;
}

static void verify_rank(int r) {
  const rank_t* x = &R[r];
  const bufmap_t *sb = &x->buf[MOECCL_BUF_SEND], *rb = &x->buf[MOECCL_BUF_RECV];
  size_t c = C->count;
  uint64_t want[4];
  for (size_t i = 0; sb->present && i < sb->len && !errors; i++) {
    size_t p = sb->base + i;
    if (rb->present && p >= rb->base && p < rb->base + rb->len) continue; /* RECV in place */
    raw_elem(want, r, i);
    if (memcmp(at(r, p), want, (size_t)W * sizeof(uint64_t)))
      fail(r, -1, "SEND element %zu was changed", i);
  }
  if (!rb->present) return;
  for (size_t i = 0; i < rb->len && !errors; i++) {
    const uint64_t* e = at(r, rb->base + i);
    switch (C->kind) {
      case MOECCL_COLL_ALLREDUCE:
        if (check_reduced(r, e, i, i) && r && e[1] != at(0, R[0].buf[MOECCL_BUF_RECV].base + i)[1])
          fail(r, -1, "RECV element %zu was reduced in another order than on rank 0", i);
        break;
      case MOECCL_COLL_REDUCE_SCATTER: check_reduced(r, e, (size_t)r * c + i, i); break;
      case MOECCL_COLL_REDUCE: check_reduced(r, e, i, i); break;
      case MOECCL_COLL_ALLGATHER:
      case MOECCL_COLL_GATHER: check_ident(r, e[0], (int)(i / c), i % c, i); break;
      case MOECCL_COLL_BROADCAST: check_ident(r, e[0], C->root, i, i); break;
      case MOECCL_COLL_SCATTER: check_ident(r, e[0], C->root, (size_t)r * c + i, i); break;
      default: break;
    }
  }
}

/* ---- one case ---- */

static moeccl_coll_desc_t desc_of(const case_t* c, int r) {
  moeccl_coll_desc_t d = {.kind = c->kind,
                          .rank = r,
                          .nranks = c->n,
                          .root = c->root,
                          .count = c->count,
                          .elem_size = c->es,
                          .reduce = c->kind == MOECCL_COLL_ALLREDUCE ||
                                    c->kind == MOECCL_COLL_REDUCE_SCATTER ||
                                    c->kind == MOECCL_COLL_REDUCE,
                          .in_place = c->in_place,
                          .topo = c->topo};
  return d;
}

/* Builds rank r's schedule as the planner does (SEND, RECV, SCRATCH). */
static int build(moeccl_sched_t* s, const case_t* c, moeccl_coll_schedule_fn fn, int r) {
  moeccl_sched_reset(s);
  uint32_t b;
  for (int k = 0; k < MOECCL_BUF_NSTD; k++) moeccl_sched_add_buf(s, NULL, &b);
  s->scratch_buf = MOECCL_BUF_SCRATCH;
  moeccl_coll_desc_t d = desc_of(c, r);
  return fn(&d, s) == moecclSuccess;
}

typedef void (*mutate_fn)(int n);

static void setup_world(const case_t* c) {
  C = c, errors = 0;
  reducing = c->kind == MOECCL_COLL_ALLREDUCE || c->kind == MOECCL_COLL_REDUCE_SCATTER ||
             c->kind == MOECCL_COLL_REDUCE;
  W = reducing ? 4 : 1;
  exact = c->n <= EXACT_MAX;
  tot1 = tot2 = 0;
  for (int r = 0; r < c->n; r++) {
    key1[r] = exact ? 1ull << r : mix(0xabcdefull + (uint64_t)r);
    tot1 = exact ? tot1 | key1[r] : tot1 + key1[r];
    tot2 = exact ? tot2 | key1[r] : tot2 + mix(key1[r]);
  }
}

/* Runs the case's schedules (already in S[0..n-1]); returns the errors. */
static int run_world(void) {
  int n = C->n;
  for (int r = 0; r < n; r++) {
    layout(r);
    int m = S[r].nops + 1;
    R[r].sends = malloc((size_t)m * sizeof(uint64_t));
    R[r].recvs = malloc((size_t)m * sizeof(int));
    R[r].done = calloc((size_t)m, 1);
    R[r].step = R[r].posted = R[r].pending = 0;
  }
  for (int r = 0; r < n && !errors; r++) check_static(r);
  if (!errors) simulate();
  for (int r = 0; r < n && !errors; r++) verify_rank(r);
  for (int r = 0; r < n; r++) {
    free(R[r].mem), free(R[r].sends), free(R[r].recvs), free(R[r].done);
    memset(&R[r], 0, sizeof(R[r]));
  }
  return errors;
}

static int same_sched(const moeccl_sched_t* a, const moeccl_sched_t* b) {
  return a->nops == b->nops && a->nsteps == b->nsteps && a->scratch_bytes == b->scratch_bytes &&
         !memcmp(a->ops, b->ops, (size_t)a->nops * sizeof(*a->ops)) &&
         !memcmp(a->step_end, b->step_end, (size_t)a->nsteps * sizeof(int));
}

static int ilog2c(int n) {
  int l = 0;
  while ((1 << l) < n) l++;
  return l;
}

/* Documented step count (the most over ranks) when every slice is non-empty; -1: not checked. */
static int expected_steps(const case_t* c) {
  int n = c->n, p = 1, lp = 0;
  while (p * 2 <= n) p *= 2, lp++;
  int fold = n > p ? 2 : 0;
  if (n < 2 || c->count < (size_t)n) return -1;
  switch (c->algo->id) {
    case MOECCL_COLL_RING: return c->kind == MOECCL_COLL_ALLREDUCE ? 2 * (n - 1) : n - 1;
    case MOECCL_COLL_DIRECT:
      return c->kind == MOECCL_COLL_ALLREDUCE || c->kind == MOECCL_COLL_REDUCE ? n
             : c->kind == MOECCL_COLL_REDUCE_SCATTER                           ? n - 1
                                                                               : 1;
    case MOECCL_COLL_RHD:
      if (c->kind == MOECCL_COLL_ALLREDUCE) return 2 * lp + fold;
      return n == p ? lp : n - 1;
    case MOECCL_COLL_TREE: return c->kind == MOECCL_COLL_ALLREDUCE ? 2 * ilog2c(n) : ilog2c(n);
    default: return -1;
  }
}

/* Shape checks beyond correctness: fallbacks, hier's rails, step counts. */
static void check_shape(const case_t* c) {
  int n = c->n, id = c->algo->id;
  const moeccl_coll_algo_t* alt = NULL;
  moeccl_coll_desc_t d0 = desc_of(c, 0);
  int applies = !c->algo->applies || c->algo->applies(&d0);
  if (!applies && id == MOECCL_COLL_RHD) alt = &moeccl_coll_algos[MOECCL_COLL_RING];
  if (!applies && id == MOECCL_COLL_HIER) {
    const moeccl_topo_t* t = c->topo;
    alt = &moeccl_coll_algos[!t || (t->nranks == n && t->nnodes <= 1) ? MOECCL_COLL_DIRECT
                                                                      : MOECCL_COLL_RING];
  }
  int want = applies ? expected_steps(c) : -1, most = 0;
  for (int r = 0; r < n && !errors; r++) {
    if (S[r].nsteps > most) most = S[r].nsteps;
    if (alt) {
      if (!build(&ref, c, alt->schedule[c->kind], r) || !same_sched(&ref, &S[r]))
        fail(r, -1, "does not apply here but its schedule is not %s's", alt->name);
      continue;
    }
    if (S[r].nops > 6 * n + 16 * ilog2c(n) + 16)
      fail(r, -1, "has %d ops (more than O(n))", S[r].nops);
    if (id == MOECCL_COLL_HIER) {
      const moeccl_topo_t* t = c->topo;
      int across = 0;
      for (int i = 0; i < S[r].nops; i++) {
        const moeccl_sched_op_t* o = &S[r].ops[i];
        if (o->type == MOECCL_OP_COPY || o->type == MOECCL_OP_REDUCE) continue;
        if (t->rank_node[o->peer] == t->rank_node[r]) continue;
        across++;
        if (t->rank_local[o->peer] != t->rank_local[r])
          fail(r, i, "crosses nodes to another local index");
      }
      if (across > 4 * ilog2c(t->nnodes) + 4) fail(r, -1, "sends %d messages across nodes", across);
    }
  }
  if (want >= 0 && most != want && !errors)
    fail(0, -1, "the ranks take up to %d steps, expected %d", most, want);
}

/* Runs one case; mut (may be NULL) breaks the schedules first.  Returns errors. */
static int run_case(const case_t* c, mutate_fn mut) {
  moeccl_coll_schedule_fn fn = c->algo->schedule[c->kind];
  setup_world(c);
  for (int r = 0; r < c->n; r++)
    if (!build(&S[r], c, fn, r)) fail(r, -1, "the generator failed");
  if (!errors && !mut) check_shape(c);
  if (errors) return errors;
  if (mut) mut(c->n);
  run_world();
  moeccl_coll_desc_t d0 = desc_of(c, 0);
  if (!mut) {
    cases_run[c->algo->id][c->kind]++;
    if (c->n == 64 && c->count >= 64 && (!c->algo->applies || c->algo->applies(&d0))) {
      int ops = 0, steps = 0;
      for (int r = 0; r < c->n; r++) {
        if (S[r].nops > ops) ops = S[r].nops;
        if (S[r].nsteps > steps) steps = S[r].nsteps;
      }
      if (ops > stat_ops[c->algo->id][c->kind]) stat_ops[c->algo->id][c->kind] = ops;
      if (steps > stat_steps[c->algo->id][c->kind]) stat_steps[c->algo->id][c->kind] = steps;
    }
  }
  return errors;
}

/* ---- case generation ---- */

static int rooted(moeccl_coll_kind_t k) {
  return k == MOECCL_COLL_BROADCAST || k == MOECCL_COLL_REDUCE || k == MOECCL_COLL_GATHER ||
         k == MOECCL_COLL_SCATTER;
}

/* Words of simulated memory per element of count, summed over ranks. */
static size_t words_per_count(moeccl_coll_kind_t k, int n) {
  size_t w =
      (k == MOECCL_COLL_ALLREDUCE || k == MOECCL_COLL_REDUCE_SCATTER || k == MOECCL_COLL_REDUCE)
          ? 4
          : 1;
  size_t per = k == MOECCL_COLL_REDUCE_SCATTER                       ? (size_t)n + (size_t)n / 2 + 1
               : k == MOECCL_COLL_ALLGATHER                          ? (size_t)n + 1
               : k == MOECCL_COLL_GATHER || k == MOECCL_COLL_SCATTER ? 3
                                                                     : 4;
  return w * per * (size_t)n +
         (k == MOECCL_COLL_GATHER || k == MOECCL_COLL_SCATTER ? (size_t)n : 0);
}

static long total_failed;

static double case_secs[MAXN + 1];

static void run_one(const moeccl_coll_algo_t* a, moeccl_coll_kind_t k, int n, size_t count,
                    int root, int in_place, const moeccl_topo_t* topo, const char* tname) {
  static const size_t sizes[] = {1, 2, 4, 8};
  case_t c = {a, k, n, root, in_place, count, sizes[rnd() % 4], topo, tname};
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (run_case(&c, NULL)) total_failed++;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  case_secs[n] += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* Counts of one n: 0, 1, n-1, n, n+1, an odd one, a large one, within the
 * memory budget (full: all of them; else 0 or 1 and one other). */
static int counts_of(moeccl_coll_kind_t k, int n, size_t* out, int full) {
  size_t cap = BUDGET_WORDS / words_per_count(k, n),
         cand[7] = {0, 1, (size_t)n - 1, (size_t)n, (size_t)n + 1, 2 * (size_t)n + 3, 5000};
  int m = 0, pick = 2 + (int)(rnd() % 5), small = (int)(rnd() % 2);
  for (int i = 0; i < 7; i++) {
    size_t v = cand[i];
    if (i >= 2 && v > cap) v = cap | 1;
    if (i >= 2 && v > cap) v = cap;
    int dup = 0;
    for (int j = 0; j < m; j++) dup |= out[j] == v;
    if (!dup && (full || i == small || i == pick)) out[m++] = v;
  }
  return m;
}

static void run_flat(const moeccl_coll_algo_t* a, moeccl_coll_kind_t k, int n, int full) {
  size_t counts[8];
  int m = counts_of(k, n, counts, full), pick_root = (int)(rnd() % (unsigned)n);
  for (int ci = 0; ci < m; ci++)
    for (int ip = 0; ip < 2; ip++) {
      if (!full && (int)(rnd() % 2) != ip) continue;
      if (!rooted(k)) {
        run_one(a, k, n, counts[ci], 0, ip, NULL, "none");
        continue;
      }
      int every = n <= 17 && counts[ci] < 1000;
      for (int root = 0; root < n; root++)
        if (every || root == 0 || root == n - 1 || root == pick_root)
          run_one(a, k, n, counts[ci], root, ip, NULL, "none");
    }
}

static void run_hier(void) {
  static const int shapes[][2] = {{2, 2}, {3, 4}, {4, 2}, {5, 3},  {8, 8}, {2, 16},
                                  {6, 2}, {1, 8}, {4, 1}, {17, 2}, {3, 5}};
  const moeccl_coll_algo_t* h = &moeccl_coll_algos[MOECCL_COLL_HIER];
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    moeccl_topo_t t;
    int N = shapes[s][0], L = shapes[s][1], n = N * L;
    char name[64];
    snprintf(name, sizeof(name), "%dx%d", N, L);
    if (moeccl_topo_regular_shape(&t, N, L, 0, 1) != moecclSuccess) {
      fprintf(stderr, "FAIL: topology %s\n", name), total_failed++;
      continue;
    }
    size_t counts[8];
    int m = counts_of(MOECCL_COLL_ALLREDUCE, n, counts, 1);
    for (int ci = 0; ci < m; ci++)
      for (int ip = 0; ip < 2; ip++)
        run_one(h, MOECCL_COLL_ALLREDUCE, n, counts[ci], 0, ip, &t, name);
    moeccl_topo_free(&t);
  }
  /* Regular but shuffled placement (member lookups through the tables),
   * and irregular ones, where hier falls back to ring. */
  for (int v = 0; v < 3; v++) {
    int n = 12, N = 3, node[12];
    for (int r = 0; r < n; r++)
      node[r] = v == 0   ? (r * 7 % 12) % 3
                : v == 1 ? (r < 5   ? 0
                            : r < 8 ? 1
                                    : 2)
                         : (r % 4 == 3 ? 2 : r % 2);
    if (v == 2) N = 3;
    moeccl_topo_t t;
    if (moeccl_topo_from_placement(&t, n, N, node, 0, 1) != moecclSuccess) {
      fprintf(stderr, "FAIL: placement %d\n", v), total_failed++;
      continue;
    }
    const char* name = v == 0 ? "shuffled-3x4" : v == 1 ? "irregular-5/3/4" : "irregular-mixed";
    size_t counts[8];
    int m = counts_of(MOECCL_COLL_ALLREDUCE, n, counts, 1);
    for (int ci = 0; ci < m; ci++)
      for (int ip = 0; ip < 2; ip++)
        run_one(h, MOECCL_COLL_ALLREDUCE, n, counts[ci], 0, ip, &t, name);
    moeccl_topo_free(&t);
  }
}

/* ---- mutation self-test: broken schedules must fail ---- */

static int g_mut_rank;

static int find_op(moeccl_sched_t* s, int type, int nth) {
  for (int i = 0; i < s->nops; i++)
    if (s->ops[i].type == type && nth-- == 0) return i;
  return -1;
}

static void remove_op(moeccl_sched_t* s, int i) {
  int st = step_of(s, i);
  memmove(&s->ops[i], &s->ops[i + 1], (size_t)(s->nops - i - 1) * sizeof(*s->ops));
  s->nops--;
  for (int k = st; k < s->nsteps; k++) s->step_end[k]--;
  int begin = st ? s->step_end[st - 1] : 0;
  if (s->step_end[st] == begin) {
    memmove(&s->step_end[st], &s->step_end[st + 1], (size_t)(s->nsteps - st - 1) * sizeof(int));
    s->nsteps--;
  }
}

static void dup_op(moeccl_sched_t* s, int i) {
  moeccl_sched_reserve(s, 1, 0);
  int st = step_of(s, i);
  memmove(&s->ops[i + 1], &s->ops[i], (size_t)(s->nops - i) * sizeof(*s->ops));
  s->nops++;
  for (int k = st; k < s->nsteps; k++) s->step_end[k]++;
}

static moeccl_sched_t* mrank(void) { return &S[g_mut_rank]; }
static void m_drop_rr(int n) {
  (void)n;
  int i = find_op(mrank(), MOECCL_OP_RECV_REDUCE, 1);
  if (i >= 0) remove_op(mrank(), i);
}
static void m_drop_send(int n) {
  (void)n;
  int i = find_op(mrank(), MOECCL_OP_SEND, 0);
  if (i >= 0) remove_op(mrank(), i);
}
static void m_dup_rr(int n) {
  (void)n;
  int i = find_op(mrank(), MOECCL_OP_RECV_REDUCE, 0);
  if (i >= 0) dup_op(mrank(), i);
}
static void m_clear_pre(int n) { /* the first PRE flag of the rank */
  (void)n;
  for (int i = 0; i < mrank()->nops; i++)
    if (mrank()->ops[i].flags) {
      uint8_t f = mrank()->ops[i].flags;
      mrank()->ops[i].flags = (uint8_t)(f & (f - 1));
      return;
    }
}
static void m_extra_pre(int n) {
  (void)n;
  int i = find_op(mrank(), MOECCL_OP_RECV_REDUCE, 1);
  if (i >= 0) mrank()->ops[i].flags |= MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B;
}
static void m_shift_dst(int n) {
  (void)n;
  int i = find_op(mrank(), MOECCL_OP_RECV, 0);
  if (i >= 0) mrank()->ops[i].dst_off += C->es;
}
static void m_drop_copy(int n) {
  (void)n;
  int i = find_op(mrank(), MOECCL_OP_COPY, 0);
  if (i >= 0) remove_op(mrank(), i);
}
static void m_root_only(int n) {
  (void)n;
  for (int i = 0; i < mrank()->nops; i++)
    if (mrank()->ops[i].type == MOECCL_OP_RECV_REDUCE) mrank()->ops[i].dst_buf = MOECCL_BUF_RECV;
}
static void m_race(int n) { /* a copy in the first step writing what that step sends */
  (void)n;
  moeccl_sched_t* s = mrank();
  int i = find_op(s, MOECCL_OP_SEND, 0);
  if (i < 0) return;
  dup_op(s, i);
  moeccl_sched_op_t* o = &s->ops[i + 1];
  o->type = MOECCL_OP_COPY,
  o->dst_buf = o->src_buf == MOECCL_BUF_SEND ? MOECCL_BUF_RECV : o->src_buf;
  o->dst_off = o->src_off, o->src_buf = MOECCL_BUF_SCRATCH, o->src_off = 0, o->peer = -1;
  s->scratch_bytes += o->bytes;
}
static void m_double_count(int n) { /* one more step adding the own input to the result */
  (void)n;
  moeccl_sched_t* s = mrank();
  uint64_t b = C->count * C->es;
  moeccl_sched_add_flags(s, MOECCL_OP_REDUCE, -1, MOECCL_BUF_SEND, 0, MOECCL_BUF_RECV, 0, b,
                         MOECCL_OPF_PRE_B);
  moeccl_sched_end_step(s);
}
static void m_swap_steps(int n) { /* rank's two first steps in the other order */
  (void)n;
  moeccl_sched_t* s = mrank();
  if (s->nsteps < 2) return;
  int a = s->step_end[0], b = s->step_end[1];
  moeccl_sched_op_t* tmp = malloc((size_t)b * sizeof(*tmp));
  memcpy(tmp, s->ops + a, (size_t)(b - a) * sizeof(*tmp));
  memcpy(tmp + (b - a), s->ops, (size_t)a * sizeof(*tmp));
  memcpy(s->ops, tmp, (size_t)b * sizeof(*tmp));
  s->step_end[0] = b - a;
  free(tmp);
}

static int mutation_tests(void) {
  typedef struct {
    int algo;
    moeccl_coll_kind_t kind;
    int n, root, in_place, rank;
    size_t count;
    mutate_fn fn;
    const char* what;
  } mcase_t;
  const mcase_t m[] = {
      {MOECCL_COLL_DIRECT, MOECCL_COLL_ALLREDUCE, 5, 0, 0, 1, 7, m_drop_rr, "drop a RECV_REDUCE"},
      {MOECCL_COLL_RING, MOECCL_COLL_ALLREDUCE, 6, 0, 1, 2, 13, m_drop_send, "drop a SEND"},
      {MOECCL_COLL_RING, MOECCL_COLL_REDUCE_SCATTER, 4, 0, 0, 0, 3, m_dup_rr,
       "double a RECV_REDUCE"},
      {MOECCL_COLL_TREE, MOECCL_COLL_REDUCE, 6, 2, 0, 2, 5, m_clear_pre, "clear a PRE flag"},
      {MOECCL_COLL_RHD, MOECCL_COLL_ALLREDUCE, 6, 0, 0, 4, 9, m_clear_pre, "clear a PRE flag"},
      {MOECCL_COLL_RING, MOECCL_COLL_ALLREDUCE, 5, 0, 0, 1, 10, m_extra_pre, "PRE on a partial"},
      {MOECCL_COLL_RING, MOECCL_COLL_ALLGATHER, 4, 0, 0, 2, 3, m_shift_dst, "shift a RECV"},
      {MOECCL_COLL_RING, MOECCL_COLL_ALLGATHER, 3, 0, 0, 1, 4, m_drop_copy, "drop the own copy"},
      {MOECCL_COLL_DIRECT, MOECCL_COLL_REDUCE, 4, 0, 0, 2, 8, m_root_only, "RECV on a non-root"},
      {MOECCL_COLL_DIRECT, MOECCL_COLL_BROADCAST, 4, 1, 0, 1, 6, m_race, "a racing copy"},
      {MOECCL_COLL_RD, MOECCL_COLL_ALLREDUCE, 8, 0, 0, 3, 5, m_swap_steps, "swap two steps"},
      {MOECCL_COLL_DIRECT, MOECCL_COLL_GATHER, 5, 3, 1, 0, 2, m_drop_send, "drop a SEND"},
      {MOECCL_COLL_DIRECT, MOECCL_COLL_ALLREDUCE, 5, 0, 0, 2, 6, m_double_count, "count twice"},
      {MOECCL_COLL_HIER, MOECCL_COLL_ALLREDUCE, 70, 0, 0, 9, 80, m_double_count,
       "count twice, n>64"},
  };
  int bad = 0;
  for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
    case_t c = {&moeccl_coll_algos[m[i].algo],
                m[i].kind,
                m[i].n,
                m[i].root,
                m[i].in_place,
                m[i].count,
                4,
                NULL,
                "none"};
    g_mut_rank = m[i].rank;
    quiet = 1;
    int clean = run_case(&c, NULL);
    quiet = !getenv("COLL_SCHED_VERBOSE");
    int broken = run_case(&c, m[i].fn);
    quiet = 0;
    if (clean || !broken) {
      fprintf(stderr, "FAIL mutation test %zu (%s on %s %s): clean %d errors, broken %d errors\n",
              i, m[i].what, c.algo->name, moeccl_coll_kind_name(c.kind), clean, broken);
      bad++;
    }
  }
  printf("mutation self-test: %zu broken schedules, %s\n", sizeof(m) / sizeof(m[0]),
         bad ? "SOME PASSED THE CHECKER" : "all rejected");
  return bad;
}

int main(void) {
  for (int i = 0; i < MOECCL_COLL_NALGOS; i++) {
    const moeccl_coll_algo_t* a = &moeccl_coll_algos[i];
    if (a->id != (moeccl_coll_algo_id_t)i || moeccl_coll_algo_by_name(a->name) != a) {
      fprintf(stderr, "FAIL: table row %d (%s)\n", i, a->name);
      return 1;
    }
  }
  if (moeccl_coll_algo_by_name("nope") || moeccl_coll_algo_by_name(NULL)) return 1;
  const char* seed = getenv("COLL_SCHED_SEED"); /* other random cases, same coverage */
  if (seed && strtoull(seed, NULL, 0)) rng_state = strtoull(seed, NULL, 0);
  int bad = mutation_tests();
  static const int big[] = {31, 32, 33, 64, 65, 127, 128, 255, 257, 512, 1024};
  int ns[64], nn = 0;
  for (int n = 1; n <= 17; n++) ns[nn++] = n;
  for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) ns[nn++] = big[i];
  for (int i = 0; i < 4; i++) ns[nn++] = 18 + (int)(rnd() % (i < 2 ? 200 : MAXN - 17));
  /* COLL_SCHED_MAX_RANKS caps the rank counts (the sanitized build's
   * stage: the counts above 300 are most of its time, and the plain build
   * checks them) */
  const char* cap_env = getenv("COLL_SCHED_MAX_RANKS");
  int cap = cap_env && atoi(cap_env) > 0 ? atoi(cap_env) : MAXN;
  int kept = 0;
  for (int i = 0; i < nn; i++)
    if (ns[i] <= cap) ns[kept++] = ns[i];
  nn = kept;
  for (int i = 0; i < nn; i++)
    for (int a = 0; a < MOECCL_COLL_NALGOS; a++)
      for (int k = 0; k < MOECCL_COLL_NKINDS; k++)
        if (moeccl_coll_algos[a].schedule[k])
          run_flat(&moeccl_coll_algos[a], (moeccl_coll_kind_t)k, ns[i], ns[i] <= 17 || ns[i] == 64);
  run_hier();
  printf("%-7s %-14s %8s  %s\n", "algo", "collective", "cases",
         "ops/steps per rank at n=64 (most)");
  for (int a = 0; a < MOECCL_COLL_NALGOS; a++)
    for (int k = 0; k < MOECCL_COLL_NKINDS; k++)
      if (moeccl_coll_algos[a].schedule[k])
        printf("%-7s %-14s %8ld %8d/%d\n", moeccl_coll_algos[a].name,
               moeccl_coll_kind_name((moeccl_coll_kind_t)k), cases_run[a][k], stat_ops[a][k],
               stat_steps[a][k]);
  if (getenv("COLL_SCHED_TIMES"))
    for (int n = 1; n <= MAXN; n++)
      if (case_secs[n] > 0.05) printf("n=%d: %.2f s\n", n, case_secs[n]);
  for (int r = 0; r < MAXN; r++) moeccl_sched_free(&S[r]);
  moeccl_sched_free(&ref);
  if (bad || total_failed) {
    fprintf(stderr, "test_coll_sched: %ld cases failed, %d mutation tests not caught\n",
            total_failed, bad);
    return 1;
  }
  printf("test_coll_sched: all passed\n");
  return 0;
}
