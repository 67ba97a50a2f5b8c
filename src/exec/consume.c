/*
 * What a receive does with its message besides landing it: a reduction
 * into the destination, or a MoE row program.  A transport that can
 * consumes the message in place through the request's consumer
 * (transport.h), which runs here, through the memory-kind table; otherwise
 * the message lands in buf (staging memory for a reduction) and the
 * executor finishes it here once the receive is done.  Either way the
 * transport never knows what is computed.
 */
#include <stddef.h>

#include "exec/executor_int.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"

static moeccl_xreq_t* of(moeccl_consumer_t* c) {
  return (moeccl_xreq_t*)((char*)c - offsetof(moeccl_xreq_t, consumer));
}

static const moeccl_xreq_t* of_const(const moeccl_consumer_t* c) {
  return (const moeccl_xreq_t*)((const char*)c - offsetof(moeccl_xreq_t, consumer));
}

/* buf = operand (+) message over bytes [off, off + n), whole elements, by
 * the table of the buffers' kind (host: reductions are consumed in place
 * only there). */
static moecclResult_t consume_reduce(moeccl_consumer_t* c, const void* msg, size_t off, size_t n) {
  moeccl_xreq_t* x = of(c);
  const moeccl_mem_ops_t* m = moeccl_mem_ops(x->req.mem);
  return moeccl_exec_kernel_done(x->comm, m,
                                 m->reduce(x->red, (char*)x->req.buf + off,
                                           (const char*)x->operand + off, msg,
                                           n / x->red->elem_size, x->red_flags));
}

void moeccl_exec_consume_reduce(moeccl_xreq_t* x) {
  x->consumer = (moeccl_consumer_t){.unit = x->red->elem_size, .consume = consume_reduce};
  x->req.consumer = &x->consumer;
}

/* The row program on the whole message, where it lies (host memory: a
 * consumer runs only programs of host memory, rows_device says). */
static moecclResult_t consume_rows(moeccl_consumer_t* c, const void* msg, size_t off, size_t n) {
  moeccl_xreq_t* x = of(c);
  (void)off, (void)n;
  const moeccl_mem_ops_t* m = &moeccl_host_mem_ops;
  MOECCL_CHECK(
      moeccl_exec_kernel_done(x->comm, m, m->rows(x->rows, x->rows_dst, msg, x->rows_aux)));
  x->consumed = 1;
  return moecclSuccess;
}

/* A gathered message: the program's terms_idx index the sender's whole
 * buffer, span. */
static moecclResult_t consume_gathered(moeccl_consumer_t* c, const void* span) {
  moeccl_xreq_t* x = of(c);
  moeccl_rows_t prog = *x->rows;
  prog.terms = prog.terms_idx;
  const moeccl_mem_ops_t* m = &moeccl_host_mem_ops;
  MOECCL_CHECK(moeccl_exec_kernel_done(x->comm, m, m->rows(&prog, x->rows_dst, span, x->rows_aux)));
  x->consumed = 1;
  return moecclSuccess;
}

/* Whether x's program may run now: the previous adding receive of its
 * step has run its program (consumed in place, or by the executor). */
static int rows_ready(const moeccl_consumer_t* c) {
  const moeccl_xreq_t* a = of_const(c)->rows_after;
  return !a || !a->rows || a->consumed;
}

void moeccl_exec_consume_rows(moeccl_xreq_t* x) {
  const moeccl_rows_t* p = x->rows;
  x->consumer = (moeccl_consumer_t){
      .unit = 0,
      .consume = consume_rows,
      .consume_gathered = p->terms_idx && p->map ? consume_gathered : NULL,
      .ready = rows_ready,
      .map = p->map,
      .row_bytes = moeccl_rows_row_bytes(p),
  };
  x->req.consumer = &x->consumer;
}

int moeccl_exec_is_adding(const moeccl_xreq_t* x) {
  return x->rows && x->rows->mode == MOECCL_ROWS_ADD;
}

/* A staged reducing receive that completed: reduce it into place. */
moecclResult_t moeccl_exec_finish_staged(moeccl_xreq_t* x) {
  moeccl_req_t* r = &x->req;
  void* dst = x->stage_dst;
  x->stage_dst = NULL;
  if (r->bytes != x->stage_bytes)
    return moeccl_comm_fail(x->comm, moecclInvalidUsage,
                            "a reducing receive of %zu bytes from rank %d got a message of %zu "
                            "bytes (the ranks disagree on the call)",
                            x->stage_bytes, r->peer, r->bytes);
  /* the device table where either operand is device memory (mem.h) */
  moeccl_mem_t k = r->mem.kind != MOECCL_MEM_HOST ? r->mem : moeccl_mem_of(x->operand);
  const moeccl_mem_ops_t* m = moeccl_mem_ops(k);
  moecclResult_t rc =
      m->reduce(x->red, dst, x->operand, r->buf, r->bytes / x->red->elem_size, x->red_flags);
  if (rc != moecclSuccess)
    return moeccl_comm_fail(x->comm, rc, "a reduction in %s memory failed", m->name);
  return moecclSuccess;
}

/* A consumed receive the transport delivered into buf: run its program. */
moecclResult_t moeccl_exec_finish_rows(moeccl_xreq_t* x) {
  moeccl_req_t* r = &x->req;
  const moeccl_rows_t* p = x->rows;
  x->rows = NULL;
  if (x->consumed) return moecclSuccess;
  if (r->bytes != x->stage_bytes)
    return moeccl_comm_fail(x->comm, moecclInvalidUsage,
                            "a MoE receive of %zu bytes from rank %d got a message of %zu bytes "
                            "(the ranks disagree on the call)",
                            x->stage_bytes, r->peer, r->bytes);
  /* the device table where the message, or what the program writes or
   * reads besides (rows_device), is device memory */
  moeccl_mem_t k = r->mem;
  if (k.kind == MOECCL_MEM_HOST && x->rows_device) k = (moeccl_mem_t){MOECCL_MEM_DEVICE, 0};
  const moeccl_mem_ops_t* m = moeccl_mem_ops(k);
  moecclResult_t rc = m->rows(p, x->rows_dst, r->buf, x->rows_aux);
  if (rc != moecclSuccess)
    return moeccl_comm_fail(x->comm, rc, "a row program in %s memory failed", m->name);
  return moecclSuccess;
}
