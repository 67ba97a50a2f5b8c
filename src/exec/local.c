/*
 * The local ops of a host schedule's step: copies (scaled or divided for
 * reductions with a pre-multiplier or an integer Avg), reductions, row
 * programs and the messages to self, by the table of the buffers' memory
 * kind.  A long one runs in pieces with progress passes of the step's
 * plain transports between them.
 */
#include "exec/executor_int.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"

/* dst = src by the kind's table; a failed (device) copy fails the
 * communicator, since the peers have gone on with the call. */
static moecclResult_t local_copy(const moeccl_job_t* j, const moeccl_mem_ops_t* m, void* dst,
                                 const void* src, size_t bytes) {
  moecclResult_t rc = m->copy(dst, src, bytes, j->stream_copy);
  if (rc == moecclSuccess) return rc;
  return moeccl_comm_fail(j->comm, rc, "a copy of %zu bytes in %s memory failed", bytes, m->name);
}

moecclResult_t moeccl_exec_kernel_done(moeccl_comm_t* c, const moeccl_mem_ops_t* m,
                                       moecclResult_t rc) {
  if (rc == moecclSuccess) return rc;
  return moeccl_comm_fail(c, rc, "a local operation in %s memory failed", m->name);
}

static moecclResult_t copy_progressing(moeccl_job_t* j, unsigned mask, const moeccl_mem_ops_t* m,
                                       void* dst, const void* src, size_t bytes);

/* Matches the step's sends to self with its receives from self, in order:
 * copies to self, in pieces with progress passes of mask's transports. */
moecclResult_t moeccl_exec_self_ops(moeccl_job_t* j, int begin, int end, unsigned mask) {
  const moeccl_sched_t* s = j->sched;
  int me = j->comm->rank, si = begin, ri = begin;
  for (;;) {
    while (si < end && !(s->ops[si].type == MOECCL_OP_SEND && s->ops[si].peer == me)) si++;
    while (ri < end && !(s->ops[ri].type == MOECCL_OP_RECV && s->ops[ri].peer == me)) ri++;
    if (si == end && ri == end) return moecclSuccess;
    if (si == end || ri == end)
      return moeccl_error(j->comm, moecclInvalidUsage,
                          "a send to self (rank %d) needs a matching receive in the same group",
                          me);
    const moeccl_sched_op_t *so = &s->ops[si], *ro = &s->ops[ri];
    if (so->bytes > ro->bytes)
      return moeccl_error(j->comm, moecclInvalidUsage,
                          "send to self of %llu bytes, receive of %llu bytes",
                          (unsigned long long)so->bytes, (unsigned long long)ro->bytes);
    void* dst = moeccl_exec_buf(s, ro->dst_buf, ro->dst_off);
    const void* src = moeccl_exec_buf(s, so->src_buf, so->src_off);
    if (mask && moeccl_exec_mem(s, ro->dst_buf).kind == MOECCL_MEM_HOST &&
        moeccl_exec_mem(s, so->src_buf).kind == MOECCL_MEM_HOST)
      MOECCL_CHECK(
          copy_progressing(j, mask, moeccl_exec_op_mem(s, ro->dst_buf), dst, src, so->bytes));
    else
      MOECCL_CHECK(
          local_copy(j, moeccl_exec_work_mem(s, ro->dst_buf, so->src_buf), dst, src, so->bytes));
    si++, ri++;
  }
}

/* The step's local ops: copies (scaled or divided for reductions with a
 * pre-multiplier or an integer Avg) and reductions, by the table of the
 * buffers' memory kind. */
static moecclResult_t run_local_op(const moeccl_job_t* j, const moeccl_sched_op_t* op) {
  const moeccl_sched_t* s = j->sched;
  const moeccl_mem_ops_t* m = moeccl_exec_work_mem(s, op->dst_buf, op->src_buf);
  void* dst = moeccl_exec_buf(s, op->dst_buf, op->dst_off);
  const void* src = moeccl_exec_buf(s, op->src_buf, op->src_off);
  if (op->type == MOECCL_OP_REDUCE) {
    MOECCL_CHECK(moeccl_exec_kernel_done(
        j->comm, m, m->reduce(s->red, dst, dst, src, op->bytes / s->red->elem_size, op->flags)));
  } else if (op->type == MOECCL_OP_ROWS) {
    const moeccl_rows_t* p = &s->rows[op->peer];
    const void* aux = p->aux_buf == UINT32_MAX ? NULL : moeccl_exec_buf(s, p->aux_buf, p->aux_off);
    if (p->aux_buf != UINT32_MAX && moeccl_exec_mem(s, p->aux_buf).kind != MOECCL_MEM_HOST)
      m = moeccl_exec_op_mem(
          s, p->aux_buf); /* the device table: the weights or rows it reads are device */
    MOECCL_CHECK(moeccl_exec_kernel_done(j->comm, m, m->rows(p, dst, src, aux)));
  } else if (op->flags & MOECCL_OPF_DIV) {
    if (dst != src) MOECCL_CHECK(local_copy(j, m, dst, src, op->bytes));
    MOECCL_CHECK(moeccl_exec_kernel_done(j->comm, m,
                                         m->postdiv(s->red, dst, op->bytes / s->red->elem_size)));
  } else if (op->flags & MOECCL_OPF_PRE_B && s->red && s->red->premul) {
    MOECCL_CHECK(moeccl_exec_kernel_done(
        j->comm, m, m->scale(s->red, dst, src, op->bytes / s->red->elem_size)));
  } else if (dst != src) {
    MOECCL_CHECK(local_copy(j, m, dst, src, op->bytes));
  }
  return moecclSuccess;
}

/* A long local op of a step with requests in flight is cut into pieces
 * with a progress pass of the step's plain transports between them, so
 * that a peer's rendezvous header is answered within a piece, not after
 * the whole op: over ucx/tcp, 2 ranks at 1 MiB per rank, the own block's
 * 512 KiB copy held up the handshake of the exchange on both sides. */
#define PIECE_BYTES ((size_t)64 << 10)

/* One progress pass of mask's transports (executor.c: PASS_CAPS). */
static moecclResult_t progress_pass(moeccl_job_t* j, unsigned mask) {
  moeccl_comm_t* c = j->comm;
  int progressed = 0;
  j->passes++;
  for (int t = 0; t < c->ntransports; t++)
    if (mask & (1u << t))
      MOECCL_CHECK(c->transport_ops[t]->progress(c->transport_state[t], &progressed));
  return moecclSuccess;
}

/* dst = src through m, in pieces with a pass between them. */
static moecclResult_t copy_progressing(moeccl_job_t* j, unsigned mask, const moeccl_mem_ops_t* m,
                                       void* dst, const void* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += PIECE_BYTES) {
    size_t n = bytes - off < PIECE_BYTES ? bytes - off : PIECE_BYTES;
    MOECCL_CHECK(local_copy(j, m, (char*)dst + off, (const char*)src + off, n));
    if (off + n < bytes) MOECCL_CHECK(progress_pass(j, mask));
  }
  return moecclSuccess;
}

/* Row program p in pieces of about PIECE_BYTES of rows with a pass between
 * them; a SUM group (consecutive terms of one dst row) is never split, so
 * every row is computed as by the whole program. */
static moecclResult_t rows_progressing(moeccl_job_t* j, unsigned mask, const moeccl_mem_ops_t* m,
                                       const moeccl_rows_t* p, void* dst, const void* src,
                                       const void* aux) {
  size_t per = PIECE_BYTES / moeccl_rows_row_bytes(p) + 1, a = 0;
  while (a < p->nterms) {
    size_t b = a + per < p->nterms ? a + per : p->nterms;
    while (p->mode == MOECCL_ROWS_SUM && b < p->nterms && p->terms[b].dst == p->terms[b - 1].dst)
      b++;
    moeccl_rows_t piece = *p;
    piece.terms = p->terms + a, piece.nterms = b - a;
    MOECCL_CHECK(moeccl_exec_kernel_done(j->comm, m, m->rows(&piece, dst, src, aux)));
    if (b < p->nterms) MOECCL_CHECK(progress_pass(j, mask));
    a = b;
  }
  return moecclSuccess;
}

/* A local op, in pieces when mask names transports to progress and the op
 * is a long copy or row program of host memory. */
moecclResult_t moeccl_exec_local_op(moeccl_job_t* j, unsigned mask, const moeccl_sched_op_t* op) {
  const moeccl_sched_t* s = j->sched;
  if (!mask || (op->type == MOECCL_OP_COPY && op->bytes <= PIECE_BYTES)) {
    return run_local_op(j, op); /* the common case: nothing to progress, or a short copy */
  }
  uint32_t aux = op->type == MOECCL_OP_ROWS ? s->rows[op->peer].aux_buf : UINT32_MAX;
  int host = moeccl_exec_mem(s, op->dst_buf).kind == MOECCL_MEM_HOST &&
             moeccl_exec_mem(s, op->src_buf).kind == MOECCL_MEM_HOST &&
             (aux == UINT32_MAX || moeccl_exec_mem(s, aux).kind == MOECCL_MEM_HOST);
  const moeccl_mem_ops_t* m = moeccl_exec_op_mem(s, op->dst_buf);
  void* dst = moeccl_exec_buf(s, op->dst_buf, op->dst_off);
  const void* src = moeccl_exec_buf(s, op->src_buf, op->src_off);
  if (host && op->type == MOECCL_OP_COPY && !(op->flags & (MOECCL_OPF_DIV | MOECCL_OPF_PRE_B)) &&
      dst != src && op->bytes > PIECE_BYTES)
    return copy_progressing(j, mask, m, dst, src, op->bytes);
  if (host && op->type == MOECCL_OP_ROWS) {
    const moeccl_rows_t* p = &s->rows[op->peer];
    if (p->nterms * moeccl_rows_row_bytes(p) > PIECE_BYTES) {
      const void* aux =
          p->aux_buf == UINT32_MAX ? NULL : moeccl_exec_buf(s, p->aux_buf, p->aux_off);
      return rows_progressing(j, mask, m, p, dst, src, aux);
    }
  }
  return run_local_op(j, op);
}
