/*
 * Device schedules lowered onto a stream (moeccl_executor_lower): the
 * stream transport queues the messages and the executor the local copies
 * between each step's two phases; the host waits for no device work.
 */
#include "device/device.h"
#include "exec/executor_int.h"

/* The stream transport every peer op of s goes through (-1: s has none),
 * or -2 when s cannot be lowered: a buffer that is not device memory, an op
 * other than a plain SEND, RECV or COPY, or peers of different (or no)
 * stream transports. */
static int lower_transport(const moeccl_comm_t* c, const moeccl_sched_t* s) {
  int t = -1;
  for (int b = 0; b < s->nbufs; b++)
    if (b != s->scratch_buf && s->bufs[b] &&
        moeccl_exec_mem(s, (uint32_t)b).kind != MOECCL_MEM_DEVICE)
      return -2;
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (op->flags ||
        (op->type != MOECCL_OP_SEND && op->type != MOECCL_OP_RECV && op->type != MOECCL_OP_COPY))
      return -2;
    if (op->type == MOECCL_OP_COPY || op->peer == c->rank) continue;
    int pt = moeccl_peer_stream_transport(c, op->peer);
    if (pt < 0 || (t >= 0 && pt != t)) return -2;
    t = pt;
  }
  return t;
}

/* The step's local ops on the stream: COPY ops, and sends to this rank
 * paired in order with receives from it (a group's self messages). */
static moecclResult_t lower_local(const moeccl_sched_t* s, int begin, int end, int self,
                                  void* stream) {
  const moeccl_device_ops_t* d = moeccl_device();
  int next_recv = begin;
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (op->type == MOECCL_OP_COPY) {
      if (op->bytes && moeccl_exec_buf(s, op->dst_buf, op->dst_off) !=
                           moeccl_exec_buf(s, op->src_buf, op->src_off))
        MOECCL_CHECK(d->copy_async(moeccl_exec_buf(s, op->dst_buf, op->dst_off),
                                   moeccl_exec_buf(s, op->src_buf, op->src_off), op->bytes,
                                   stream));
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
  if (s->scratch_buf >= 0 && s->scratch_bytes) MOECCL_CHECK(moeccl_exec_dev_scratch(c, s));
  const moeccl_transport_ops_t* ops = t >= 0 ? c->transport_ops[t] : NULL;
  void* st = t >= 0 ? c->transport_state[t] : NULL;
  moecclResult_t rc = ops ? ops->lower_begin(st, s) : moecclSuccess;
  for (int step = 0; step < s->nsteps && rc == moecclSuccess; step++) {
    int begin = step ? s->step_end[step - 1] : 0, end = s->step_end[step];
    if (ops) rc = ops->lower_step(st, s, step, 0, stream);
    if (rc == moecclSuccess) rc = lower_local(s, begin, end, c->rank, stream);
    if (rc == moecclSuccess && ops) rc = ops->lower_step(st, s, step, 1, stream);
  }
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
