/*
 * Device schedules lowered onto a stream (moeccl_executor_lower): the
 * stream transport queues the messages (copies, and the reducing and
 * consuming receives as kernels reading the senders' memory) and the
 * executor the local copies, reductions and row programs between each
 * step's two phases, a call's row programs' terms in pinned memory of its
 * own (terms.c); the host waits for no device work.
 */
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "exec/executor_int.h"
#include "kernels/devkern.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"

/* Whether op is one the stream path runs: a plain SEND, RECV or COPY;
 * with a reduction, a RECV_REDUCE from a peer, a REDUCE, and a COPY that
 * scales (PRE_B) or divides (DIV); the MoE row programs: a local ROWS, a
 * RECV consumed by its program (MOECCL_OPF_ROWS: a kernel reading the
 * sender's memory) and a gathered SEND (the receiver's program picks the
 * rows from the sender's whole buffer). */
static int lowerable_op(const moeccl_sched_t* s, const moeccl_sched_op_t* op, int rank) {
  const unsigned pre = MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B;
  switch (op->type) {
    case MOECCL_OP_SEND:
    case MOECCL_OP_RECV:
      return op->flags == 0 || (op->flags == MOECCL_OPF_ROWS && s->rows && op->peer != rank);
    case MOECCL_OP_COPY:
      return op->flags == 0 || (s->red && !(op->flags & ~(MOECCL_OPF_PRE_B | MOECCL_OPF_DIV)));
    case MOECCL_OP_REDUCE: return s->red && !(op->flags & ~pre);
    case MOECCL_OP_RECV_REDUCE: return s->red && op->peer != rank && !(op->flags & ~pre);
    case MOECCL_OP_ROWS: return s->rows != NULL;
    default: return 0;
  }
}

/* The stream transport every peer op of s goes through (-1: s has none),
 * or -2 when s cannot be lowered: a buffer that is not device memory, an op
 * the stream path does not run (lowerable_op), or peers of different (or
 * no) stream transports. */
static int lower_transport(const moeccl_comm_t* c, const moeccl_sched_t* s) {
  int t = -1;
  for (int b = 0; b < s->nbufs; b++)
    if (b != s->scratch_buf && s->bufs[b] &&
        moeccl_exec_mem(s, (uint32_t)b).kind != MOECCL_MEM_DEVICE)
      return -2;
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (!lowerable_op(s, op, c->rank)) return -2;
    if (moeccl_exec_is_local(op) || op->peer == c->rank) continue;
    int pt = moeccl_peer_stream_transport(c, op->peer);
    if (pt < 0 || (t >= 0 && pt != t)) return -2;
    t = pt;
  }
  return t;
}

/* ---- steps merged into one flag round ------------------------------------ */

/* Whether step k holds only messages with peers: sends, and reducing
 * receives (a direct reduce-scatter's steps). */
static int fold_step(const moeccl_sched_t* s, int k, int rank) {
  int begin = k ? s->step_end[k - 1] : 0;
  for (int i = begin; i < s->step_end[k]; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (op->peer == rank || (op->type != MOECCL_OP_SEND && op->type != MOECCL_OP_RECV_REDUCE))
      return 0;
  }
  return 1;
}

/* Whether [x, x+xn) and [y, y+yn) share a byte. */
static int overlap(const char* x, uint64_t xn, const char* y, uint64_t yn) {
  return x < y + yn && y < x + xn;
}

/* Whether ops [begin, end) send nothing a reducing receive among them
 * writes (so their sends may all be ready from the first of them on),
 * given that ops [begin, mid) do not: the pairs with an op in [mid, end)
 * (a call's checks grow with its ops squared, not cubed). */
static int sends_stay(const moeccl_sched_t* s, int begin, int mid, int end) {
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* w = &s->ops[i];
    if (w->type != MOECCL_OP_RECV_REDUCE) continue;
    const char* wd = moeccl_exec_buf(s, w->dst_buf, w->dst_off);
    for (int j = i < mid ? mid : begin; j < end; j++) {
      const moeccl_sched_op_t* r = &s->ops[j];
      if (r->type == MOECCL_OP_SEND &&
          overlap(wd, w->bytes, moeccl_exec_buf(s, r->src_buf, r->src_off), r->bytes))
        return 0;
    }
  }
  return 1;
}

/* The steps the stream path runs, into steps[] (room for s->nsteps):
 * consecutive steps of sends and reducing receives are one step when no
 * send among them reads what a receive among them writes -- the direct
 * reduce-scatter's n-1 steps become one flag round and one fold kernel
 * (the transport runs a step's reducing receives in op order).  *view is
 * s with these steps. */
static void merge_steps(const moeccl_comm_t* c, const moeccl_sched_t* s, moeccl_sched_t* view,
                        int* steps) {
  *view = *s;
  if (!s->red || s->nsteps < 2) return;
  int n = 0, group = -1; /* group: the first op of the open merged step */
  for (int k = 0; k < s->nsteps; k++) {
    int begin = k ? s->step_end[k - 1] : 0;
    if (fold_step(s, k, c->rank)) {
      if (group >= 0 && sends_stay(s, group, begin, s->step_end[k])) {
        steps[n - 1] = s->step_end[k];
        continue;
      }
      group = begin;
    } else {
      group = -1;
    }
    steps[n++] = s->step_end[k];
  }
  view->step_end = steps, view->nsteps = n;
}

/* A COPY, REDUCE or ROWS on the stream: copied by the copy engine,
 * reduced, scaled or divided by a kernel, as the host path's executor does
 * it; a row program by its kernel, its terms in the call's pinned memory. */
static moecclResult_t local_op(const moeccl_sched_t* s, const moeccl_sched_op_t* op,
                               void* stream) {
  void* dst = moeccl_exec_buf(s, op->dst_buf, op->dst_off);
  const void* src = moeccl_exec_buf(s, op->src_buf, op->src_off);
  size_t n = s->red ? op->bytes / s->red->elem_size : 0;
  if (!op->bytes) return moecclSuccess;
  if (op->type == MOECCL_OP_ROWS) {
    const moeccl_rows_t* p = &s->rows[op->peer];
    const void* aux = p->aux_buf == UINT32_MAX ? NULL : moeccl_exec_buf(s, p->aux_buf, p->aux_off);
    return moeccl_devkern_rows_async(p, p->terms, dst, src, aux, s->arena, stream);
  }
  if (op->type == MOECCL_OP_REDUCE)
    return moeccl_devkern_reduce_async(s->red, MOECCL_KRED_REDUCE, dst, dst, src, n, op->flags,
                                       stream);
  if ((op->flags & MOECCL_OPF_PRE_B) && !(op->flags & MOECCL_OPF_DIV) && s->red->premul)
    return moeccl_devkern_reduce_async(s->red, MOECCL_KRED_SCALE, dst, src, NULL, n, 0, stream);
  if (dst != src) MOECCL_CHECK(moeccl_device()->copy_async(dst, src, op->bytes, stream));
  if (op->flags & MOECCL_OPF_DIV)
    return moeccl_devkern_reduce_async(s->red, MOECCL_KRED_POSTDIV, dst, NULL, NULL, n, 0, stream);
  return moecclSuccess;
}

/* ---- row programs: pinned memory per call -------------------------------- */

#define MAX_BUFS 16 /* buffers of a MoE call's schedule: the standard ones and a few */

static uint64_t round_up(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* A call's buffers in host memory (a MoE combine's weights, which the
 * caller gives there): the bytes its COPY ops read, packed on the host in
 * op order into the call's pinned memory (image[b]; NULL: device memory),
 * which those copies then read asynchronously and, their sources now
 * following each other as their destinations do (a combine packs each
 * peer's weights pair after pair), in a few long copies rather than one
 * per run of tokens.  cursor[b]: the next op's bytes. */
typedef struct {
  int any;
  char* image[MAX_BUFS];
  uint64_t cursor[MAX_BUFS];
} host_bufs_t;

/* The bytes of buffer b the schedule's COPY ops read, or UINT64_MAX when
 * it writes b or reads it otherwise (host memory must then not be there:
 * the stream path only copies it, by plain COPY ops). */
static uint64_t copied_bytes(const moeccl_sched_t* s, uint32_t b) {
  uint64_t sum = 0;
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    int reads = op->type != MOECCL_OP_RECV && op->type != MOECCL_OP_RECV_REDUCE &&
                op->src_buf == b;
    int writes = op->type != MOECCL_OP_SEND && op->dst_buf == b;
    if (op->type == MOECCL_OP_ROWS || (op->flags & MOECCL_OPF_ROWS)) {
      const moeccl_rows_t* p = &s->rows[op->type == MOECCL_OP_ROWS ? op->peer : op->prog];
      writes |= p->out_buf == b && (op->flags & MOECCL_OPF_ROWS);
      if (p->aux_buf == b) return UINT64_MAX;
    }
    if (writes || (reads && (op->type != MOECCL_OP_COPY || op->flags))) return UINT64_MAX;
    if (reads) sum += op->bytes;
  }
  return sum;
}

/* The pinned bytes s's row programs' terms and its host buffers' images
 * take (0: s has none), and in host[] each buffer's image bytes (0: device
 * memory).  -1: a buffer in host memory used otherwise than copied. */
static int64_t terms_need(const moeccl_sched_t* s, uint64_t* host) {
  if (!s->rows) return 0;
  if (s->nbufs > MAX_BUFS) return -1;
  uint64_t need = 0;
  for (int b = 0; b < s->nbufs; b++) {
    host[b] = 0;
    if (b < MOECCL_BUF_NSTD || b == s->scratch_buf || !s->bufs[b] ||
        moeccl_mem_of(s->bufs[b]).kind != MOECCL_MEM_HOST)
      continue;
    host[b] = copied_bytes(s, (uint32_t)b);
    if (host[b] == UINT64_MAX) return -1;
    need += round_up(host[b]);
  }
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (op->type == MOECCL_OP_ROWS)
      need += moeccl_devkern_rows_arena_bytes(&s->rows[op->peer]);
    else if (op->type == MOECCL_OP_RECV && (op->flags & MOECCL_OPF_ROWS))
      need += moeccl_devkern_rows_arena_bytes(&s->rows[op->prog]);
  }
  return (int64_t)need;
}

/* Takes the call's pinned memory (*use; none when it needs none), packs
 * its host buffers' copied bytes there (*h) and gives view v the arena
 * its row programs' terms go to. */
static moecclResult_t take_terms(moeccl_comm_t* c, moeccl_sched_t* v, host_bufs_t* h,
                                 moeccl_term_use_t* use) {
  uint64_t host[MAX_BUFS];
  int64_t need = terms_need(v, host);
  *use = (moeccl_term_use_t){{NULL, 0, 0}, NULL, 0};
  v->arena = NULL;
  h->any = 0;
  if (need < 0)
    return moeccl_error(c, moecclInternalError,
                        "a device call's row programs read host memory the stream path cannot "
                        "copy");
  if (need == 0) return moecclSuccess;
  MOECCL_CHECK(moeccl_exec_terms_take(c, (size_t)need, use));
  v->arena = &use->arena;
  for (int b = 0; b < v->nbufs; b++) {
    h->image[b] = NULL, h->cursor[b] = 0;
    if (!host[b]) continue;
    h->image[b] = use->arena.base + use->arena.used;
    use->arena.used += round_up(host[b]);
    h->any = 1;
    uint64_t at = 0;
    for (int i = 0; i < v->nops; i++) {
      const moeccl_sched_op_t* op = &v->ops[i];
      if (op->type != MOECCL_OP_COPY || op->src_buf != (uint32_t)b) continue;
      memcpy(h->image[b] + at, moeccl_exec_buf(v, op->src_buf, op->src_off), op->bytes);
      at += op->bytes;
    }
  }
  return moecclSuccess;
}

/* Plain copies of a step, queued in batches (copy_batch: one driver call
 * where it batches): the ops of a step may run in any order, and a MoE
 * call's own rows are one COPY op per run of rows (a dispatch of 300
 * tokens on 2 ranks: about 150). */
#define COPY_BATCH 128
typedef struct {
  void* dst[COPY_BATCH];
  const void* src[COPY_BATCH];
  size_t bytes[COPY_BATCH];
  int n;
} copies_t;

static moecclResult_t copies_flush(copies_t* b, void* stream) {
  int n = b->n;
  b->n = 0;
  return n ? moeccl_device()->copy_batch(b->dst, b->src, b->bytes, n, stream) : moecclSuccess;
}

/* The copies from pinned host memory one by one (a handful once merged):
 * copy_batch's hints say device to device, and a driver that refuses a
 * batch stops batching for good. */
static moecclResult_t copies_flush_host(copies_t* b, void* stream) {
  int n = b->n;
  b->n = 0;
  for (int i = 0; i < n; i++)
    MOECCL_CHECK(moeccl_device()->copy_async(b->dst[i], b->src[i], b->bytes[i], stream));
  return moecclSuccess;
}

static moecclResult_t copies_add(copies_t* b, void* dst, const void* src, size_t bytes,
                                 void* stream) {
  if (!bytes || dst == src) return moecclSuccess;
  int last = b->n - 1;
  if (last >= 0 && (char*)b->dst[last] + b->bytes[last] == (char*)dst &&
      (const char*)b->src[last] + b->bytes[last] == (const char*)src) {
    b->bytes[last] += bytes; /* runs on both sides: one copy */
    return moecclSuccess;
  }
  if (b->n == COPY_BATCH) MOECCL_CHECK(copies_flush(b, stream));
  b->dst[b->n] = dst, b->src[b->n] = src, b->bytes[b->n++] = bytes;
  return moecclSuccess;
}

/* The step's local ops on the stream: COPY, REDUCE and ROWS ops, and
 * sends to this rank paired in order with receives from it (a group's
 * self messages); the plain copies among them in batches. */
static moecclResult_t lower_local(const moeccl_sched_t* s, int begin, int end, int self,
                                  host_bufs_t* h, void* stream) {
  copies_t batch, from_host;
  batch.n = from_host.n = 0;
  int next_recv = begin;
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (op->type == MOECCL_OP_COPY && op->flags == 0) {
      void* dst = moeccl_exec_buf(s, op->dst_buf, op->dst_off);
      if (h->any && h->image[op->src_buf]) { /* its bytes packed in op order */
        const char* src = h->image[op->src_buf] + h->cursor[op->src_buf];
        h->cursor[op->src_buf] += op->bytes;
        if (from_host.n == COPY_BATCH) MOECCL_CHECK(copies_flush_host(&from_host, stream));
        MOECCL_CHECK(copies_add(&from_host, dst, src, op->bytes, stream));
        continue;
      }
      MOECCL_CHECK(copies_add(&batch, dst, moeccl_exec_buf(s, op->src_buf, op->src_off),
                              op->bytes, stream));
      continue;
    }
    if (moeccl_exec_is_local(op)) { /* after the copies before it, as the host path runs them */
      MOECCL_CHECK(copies_flush(&batch, stream));
      MOECCL_CHECK(copies_flush_host(&from_host, stream));
      MOECCL_CHECK(local_op(s, op, stream));
      continue;
    }
    if (op->type != MOECCL_OP_SEND || op->peer != self) continue;
    while (next_recv < end &&
           !(s->ops[next_recv].type == MOECCL_OP_RECV && s->ops[next_recv].peer == self))
      next_recv++;
    if (next_recv == end) return moecclInvalidUsage; /* moeccl_plan_p2p_check counted them */
    const moeccl_sched_op_t* r = &s->ops[next_recv++];
    size_t bytes = op->bytes < r->bytes ? op->bytes : r->bytes;
    MOECCL_CHECK(copies_add(&batch, moeccl_exec_buf(s, r->dst_buf, r->dst_off),
                            moeccl_exec_buf(s, op->src_buf, op->src_off), bytes, stream));
  }
  MOECCL_CHECK(copies_flush(&batch, stream));
  return copies_flush_host(&from_host, stream);
}

moecclResult_t moeccl_executor_lower(moeccl_comm_t* c, moeccl_sched_t* s, void* stream) {
  if (c->async_error != moecclSuccess)
    return moeccl_error(c, c->async_error,
                        "communicator is broken by an earlier error (%s); abort it", c->fail_text);
  int t = lower_transport(c, s);
  if (t < -1)
    return moeccl_comm_fail(c, moecclInternalError,
                            "a device call could not be lowered onto its stream on rank %d",
                            c->rank);
  if (s->scratch_buf >= 0 && s->scratch_bytes) {
    /* a Reduce's non-root may pass no receive buffer: its scratch is
     * device memory of the send buffer's device all the same */
    if (s->mems[s->scratch_buf].kind != MOECCL_MEM_DEVICE)
      s->mems[s->scratch_buf] = moeccl_exec_mem(s, MOECCL_BUF_SEND);
    MOECCL_CHECK(moeccl_exec_dev_scratch(c, s));
  }
  int small[64], *steps = s->nsteps <= 64 ? small : malloc(sizeof(int) * (size_t)s->nsteps);
  if (!steps) return moeccl_error(c, moecclSystemError, "out of memory");
  moeccl_sched_t v; /* s with the steps the stream runs */
  merge_steps(c, s, &v, steps);
  host_bufs_t host;
  moeccl_term_use_t use;
  /* before anything is handed to the peers: a failure here sends nothing */
  moecclResult_t rc = take_terms(c, &v, &host, &use);
  const moeccl_transport_ops_t* ops = t >= 0 ? c->transport_ops[t] : NULL;
  void* st = t >= 0 ? c->transport_state[t] : NULL;
  if (rc == moecclSuccess && ops) rc = ops->lower_begin(st, s);
  for (int step = 0; step < v.nsteps && rc == moecclSuccess; step++) {
    int begin = step ? v.step_end[step - 1] : 0, end = v.step_end[step];
    if (ops) rc = ops->lower_step(st, &v, step, 0, stream);
    if (rc == moecclSuccess) rc = lower_local(&v, begin, end, c->rank, &host, stream);
    if (rc == moecclSuccess && ops) rc = ops->lower_step(st, &v, step, 1, stream);
  }
  /* the call's pinned memory is free again once the stream passed it */
  if (use.flag) {
    moecclResult_t pr = moeccl_exec_terms_passed(&use, stream);
    if (rc == moecclSuccess) rc = pr;
  }
  if (steps != small) free(steps);
  /* The peers go on with the call: a rank that could not queue its part
   * leaves them waiting on its stream's flags. */
  if (rc != moecclSuccess && c->async_error == moecclSuccess)
    moeccl_comm_fail(c, rc,
                     "queueing a device call on its stream failed (%s); abort the "
                     "communicator",
                     moecclGetErrorString(rc));
  if (rc != moecclSuccess && ops) ops->cancel_all(st);
  return rc;
}
