/*
 * Device schedules lowered onto a stream (moeccl_executor_lower): the
 * stream transport queues the messages (copies, and the reducing
 * receives as kernels reading the senders' memory) and the executor the
 * local copies and reductions between each step's two phases; the host
 * waits for no device work.
 */
#include <stdlib.h>

#include "device/device.h"
#include "exec/executor_int.h"
#include "kernels/devkern.h"
#include "kernels/reduce.h"

/* Whether op is one the stream path runs: a plain SEND, RECV or COPY;
 * with a reduction, a RECV_REDUCE from a peer, a REDUCE, and a COPY that
 * scales (PRE_B) or divides (DIV).  Not the MoE row programs. */
static int lowerable_op(const moeccl_sched_t* s, const moeccl_sched_op_t* op, int rank) {
  const unsigned pre = MOECCL_OPF_PRE_A | MOECCL_OPF_PRE_B;
  switch (op->type) {
    case MOECCL_OP_SEND:
    case MOECCL_OP_RECV: return op->flags == 0;
    case MOECCL_OP_COPY:
      return op->flags == 0 || (s->red && !(op->flags & ~(MOECCL_OPF_PRE_B | MOECCL_OPF_DIV)));
    case MOECCL_OP_REDUCE: return s->red && !(op->flags & ~pre);
    case MOECCL_OP_RECV_REDUCE: return s->red && op->peer != rank && !(op->flags & ~pre);
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
    if (op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE || op->peer == c->rank)
      continue;
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

/* A COPY or REDUCE on the stream: copied by the copy engine, reduced,
 * scaled or divided by a kernel, as the host path's executor does it. */
static moecclResult_t local_op(const moeccl_sched_t* s, const moeccl_sched_op_t* op,
                               void* stream) {
  void* dst = moeccl_exec_buf(s, op->dst_buf, op->dst_off);
  const void* src = moeccl_exec_buf(s, op->src_buf, op->src_off);
  size_t n = s->red ? op->bytes / s->red->elem_size : 0;
  if (!op->bytes) return moecclSuccess;
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

/* The step's local ops on the stream: COPY ops, and sends to this rank
 * paired in order with receives from it (a group's self messages). */
static moecclResult_t lower_local(const moeccl_sched_t* s, int begin, int end, int self,
                                  void* stream) {
  const moeccl_device_ops_t* d = moeccl_device();
  int next_recv = begin;
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE) {
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
    if (bytes)
      MOECCL_CHECK(d->copy_async(moeccl_exec_buf(s, r->dst_buf, r->dst_off),
                                 moeccl_exec_buf(s, op->src_buf, op->src_off), bytes, stream));
  }
  return moecclSuccess;
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
  const moeccl_transport_ops_t* ops = t >= 0 ? c->transport_ops[t] : NULL;
  void* st = t >= 0 ? c->transport_state[t] : NULL;
  moecclResult_t rc = ops ? ops->lower_begin(st, s) : moecclSuccess;
  for (int step = 0; step < v.nsteps && rc == moecclSuccess; step++) {
    int begin = step ? v.step_end[step - 1] : 0, end = v.step_end[step];
    if (ops) rc = ops->lower_step(st, &v, step, 0, stream);
    if (rc == moecclSuccess) rc = lower_local(&v, begin, end, c->rank, stream);
    if (rc == moecclSuccess && ops) rc = ops->lower_step(st, &v, step, 1, stream);
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
