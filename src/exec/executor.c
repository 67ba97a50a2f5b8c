/*
 * The executor runs schedules.  For each step it posts every SEND and RECV to
 * the transport of its peer, performs the step's local copies while the peers
 * start pulling, then progresses the transports until the step is done.  It
 * owns waiting: spin, then yield, then sleep in the transport, with a
 * liveness check of the peers and a deadline (MOECCL_TIMEOUT without progress).
 */
#include "exec/executor.h"
#include "comm/bootstrap.h"
#include "kernels/copy.h"
#include "device/device.h"
#include "base/param.h"
#include "kernels/reduce.h"
#include "kernels/rows.h"
#include "transport/transport.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIVENESS_PERIOD 0.1 /* seconds between peer checks while waiting */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

static void* buf_at(const moeccl_sched_t* s, uint32_t buf, uint64_t off) {
  return (char*)s->bufs[buf] + off;
}

static moeccl_mem_t buf_mem(const moeccl_sched_t* s, uint32_t buf) {
  return s->mems ? s->mems[buf] : MOECCL_MEM_HOST_INIT;
}

/* The local-work table of an op's buffers (prepare checked it exists). */
static const moeccl_mem_ops_t* op_mem(const moeccl_sched_t* s, uint32_t buf) {
  return moeccl_mem_ops(buf_mem(s, buf));
}

/* The table that works on buffers src and dst (copies, reductions, the
 * reduction's other operand being dst's): a device one where either side
 * is device memory (its members take either kind). */
static const moeccl_mem_ops_t* work_mem(const moeccl_sched_t* s, uint32_t dst, uint32_t src) {
  return buf_mem(s, src).kind != MOECCL_MEM_HOST ? op_mem(s, src) : op_mem(s, dst);
}

/* The buffer a SEND, RECV or RECV_REDUCE op moves. */
static uint32_t net_buf(const moeccl_sched_op_t* op) {
  return op->type == MOECCL_OP_SEND ? op->src_buf : op->dst_buf;
}

static moecclResult_t reserve_reqs(moeccl_comm_t* comm, int n) {
  if (n <= comm->reqs_cap) return moecclSuccess;
  moeccl_req_t* r = realloc(comm->reqs, sizeof(*r) * (size_t)n);
  if (!r) return moeccl_error(comm, moecclSystemError, "out of memory for %d requests", n);
  comm->reqs = r;
  comm->reqs_cap = n;
  return moecclSuccess;
}

/* dst = src by the kind's table; a failed (device) copy fails the
 * communicator, since the peers have gone on with the call. */
static moecclResult_t local_copy(const moeccl_job_t* j, const moeccl_mem_ops_t* m, void* dst,
                                 const void* src, size_t bytes) {
  moecclResult_t rc = m->copy(dst, src, bytes, j->stream_copy);
  if (rc == moecclSuccess) return rc;
  return moeccl_comm_fail(j->comm, rc, "a copy of %zu bytes in %s memory failed", bytes, m->name);
}

/* A kernel of table m returned rc: a failure fails the communicator. */
static moecclResult_t kernel_done(const moeccl_job_t* j, const moeccl_mem_ops_t* m,
                                  moecclResult_t rc) {
  if (rc == moecclSuccess) return rc;
  return moeccl_comm_fail(j->comm, rc, "a local operation in %s memory failed", m->name);
}

/* Matches the step's sends to self with its receives from self, in order. */
static moecclResult_t copy_progressing(moeccl_job_t* j, unsigned mask, const moeccl_mem_ops_t* m,
                                       void* dst, const void* src, size_t bytes);

/* Copies to self; in pieces with progress passes of mask's transports. */
static moecclResult_t run_self_ops(moeccl_job_t* j, int begin, int end, unsigned mask) {
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
    void* dst = buf_at(s, ro->dst_buf, ro->dst_off);
    const void* src = buf_at(s, so->src_buf, so->src_off);
    if (mask && buf_mem(s, ro->dst_buf).kind == MOECCL_MEM_HOST &&
        buf_mem(s, so->src_buf).kind == MOECCL_MEM_HOST)
      MOECCL_CHECK(copy_progressing(j, mask, op_mem(s, ro->dst_buf), dst, src, so->bytes));
    else MOECCL_CHECK(local_copy(j, work_mem(s, ro->dst_buf, so->src_buf), dst, src, so->bytes));
    si++, ri++;
  }
}

/* Whether transport t reduces RECV_REDUCE op as it arrives: it has the
 * capability (host kernels) and the op's buffers are host memory. */
static int reduces_in_place(const moeccl_comm_t* c, int t, const moeccl_sched_op_t* op,
                            const moeccl_sched_t* s) {
  return (c->transport_ops[t]->caps & MOECCL_TRANSPORT_CAP_REDUCE) &&
         buf_mem(s, op->dst_buf).kind == MOECCL_MEM_HOST &&
         buf_mem(s, op->src_buf).kind == MOECCL_MEM_HOST;
}

/* Fills the request of a SEND, RECV or RECV_REDUCE op.  A reducing receive
 * from a transport that cannot reduce (or of device memory) lands in host
 * staging memory first. */
static moecclResult_t make_req(moeccl_job_t* j, const moeccl_sched_op_t* op, int t,
                               moeccl_req_t* r, size_t* staged) {
  const moeccl_sched_t* s = j->sched;
  moeccl_comm_t* c = j->comm;
  int send = op->type == MOECCL_OP_SEND;
  /* inline zeroing: a memset call was a tenth of the executor's share of
   * a small call */
  *r = (moeccl_req_t){
      .type = send ? MOECCL_REQ_SEND : MOECCL_REQ_RECV,
      .peer = op->peer,
      .buf = send ? buf_at(s, op->src_buf, op->src_off) : buf_at(s, op->dst_buf, op->dst_off),
      .mem = buf_mem(s, net_buf(op)),
      .bytes = op->bytes,
      .stream_copy = j->stream_copy,
      .exact = !send && !s->inexact,
  };
  if (op->type == MOECCL_OP_SEND && (op->flags & MOECCL_OPF_ROWS)) {
    /* a gathered send: the whole buffer where the receiver can pick the
     * rows itself, else the rows packed here */
    const moeccl_rows_t* p = &s->rows[op->prog];
    const moeccl_transport_ops_t* ops = c->transport_ops[t];
    if (ops->can_gather && ops->can_gather(c->transport_state[t], op->peer, r->buf, p->span)) {
      r->gather_span = p->span;
    } else {
      void* packed = buf_at(s, p->out_buf, p->out_off);
      const moeccl_mem_ops_t* m = work_mem(s, p->out_buf, op->src_buf);
      MOECCL_CHECK(kernel_done(j, m, m->rows(p, packed, r->buf, NULL)));
      r->buf = packed;
      r->mem = buf_mem(s, p->out_buf);
    }
    return moecclSuccess;
  }
  if (op->type == MOECCL_OP_RECV && (op->flags & MOECCL_OPF_ROWS)) {
    const moeccl_rows_t* p = &s->rows[op->prog];
    r->rows = p;
    r->rows_dst = buf_at(s, p->out_buf, p->out_off);
    r->rows_aux = p->aux_buf == UINT32_MAX ? NULL : buf_at(s, p->aux_buf, p->aux_off);
    r->rows_device = buf_mem(s, p->out_buf).kind != MOECCL_MEM_HOST ||
                     (p->aux_buf != UINT32_MAX && buf_mem(s, p->aux_buf).kind != MOECCL_MEM_HOST);
    r->stage_bytes = op->bytes;
    return moecclSuccess;
  }
  if (op->type != MOECCL_OP_RECV_REDUCE) return moecclSuccess;
  r->operand = buf_at(s, op->src_buf, op->src_off);
  r->red_flags = op->flags;
  if (reduces_in_place(c, t, op, s)) {
    r->red = s->red;
    return moecclSuccess;
  }
  r->stage_red = s->red;
  r->stage_dst = r->buf;
  r->stage_bytes = op->bytes;
  r->buf = (char*)c->staging + *staged;
  *staged += op->bytes;
  return moecclSuccess;
}

/* The step's local ops: copies (scaled or divided for reductions with a
 * pre-multiplier or an integer Avg) and reductions, by the table of the
 * buffers' memory kind. */
static moecclResult_t run_local_op(const moeccl_job_t* j, const moeccl_sched_op_t* op) {
  const moeccl_sched_t* s = j->sched;
  const moeccl_mem_ops_t* m = work_mem(s, op->dst_buf, op->src_buf);
  void* dst = buf_at(s, op->dst_buf, op->dst_off);
  const void* src = buf_at(s, op->src_buf, op->src_off);
  if (op->type == MOECCL_OP_REDUCE) {
    MOECCL_CHECK(kernel_done(j, m, m->reduce(s->red, dst, dst, src, op->bytes / s->red->elem_size,
                                             op->flags)));
  } else if (op->type == MOECCL_OP_ROWS) {
    const moeccl_rows_t* p = &s->rows[op->peer];
    const void* aux = p->aux_buf == UINT32_MAX ? NULL : buf_at(s, p->aux_buf, p->aux_off);
    if (p->aux_buf != UINT32_MAX && buf_mem(s, p->aux_buf).kind != MOECCL_MEM_HOST)
      m = op_mem(s, p->aux_buf); /* the device table: the weights or rows it reads are device */
    MOECCL_CHECK(kernel_done(j, m, m->rows(p, dst, src, aux)));
  } else if (op->flags & MOECCL_OPF_DIV) {
    if (dst != src) MOECCL_CHECK(local_copy(j, m, dst, src, op->bytes));
    MOECCL_CHECK(kernel_done(j, m, m->postdiv(s->red, dst, op->bytes / s->red->elem_size)));
  } else if (op->flags & MOECCL_OPF_PRE_B && s->red && s->red->premul) {
    MOECCL_CHECK(kernel_done(j, m, m->scale(s->red, dst, src, op->bytes / s->red->elem_size)));
  } else if (dst != src) {
    MOECCL_CHECK(local_copy(j, m, dst, src, op->bytes));
  }
  return moecclSuccess;
}

static int is_adding(const moeccl_req_t* r) { return r->rows && r->rows->mode == MOECCL_ROWS_ADD; }

/* A long local op of a step with requests in flight is cut into pieces
 * with a progress pass of the step's plain transports between them, so
 * that a peer's rendezvous header is answered within a piece, not after
 * the whole op: over ucx/tcp, 2 ranks at 1 MiB per rank, the own block's
 * 512 KiB copy held up the handshake of the exchange on both sides. */
#define PIECE_BYTES ((size_t)64 << 10)

/* A pass progresses the step's transports that only move bytes and mark
 * requests done (no CAP_REDUCE, no CAP_ROWS: shared memory may reduce or
 * run a receive's row program in its progress, whose order against the
 * step's local ops is fixed); start_step collects them as it posts.  What
 * their requests need done after arrival (staged reductions, row
 * programs) count_pending does after the local ops, in op order, as
 * without the passes. */
#define PASS_CAPS (MOECCL_TRANSPORT_CAP_REDUCE | MOECCL_TRANSPORT_CAP_ROWS)

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
    MOECCL_CHECK(kernel_done(j, m, m->rows(&piece, dst, src, aux)));
    if (b < p->nterms) MOECCL_CHECK(progress_pass(j, mask));
    a = b;
  }
  return moecclSuccess;
}

/* A local op, in pieces when mask names transports to progress and the op
 * is a long copy or row program of host memory. */
static moecclResult_t local_op(moeccl_job_t* j, unsigned mask, const moeccl_sched_op_t* op) {
  const moeccl_sched_t* s = j->sched;
  if (!mask || (op->type == MOECCL_OP_COPY && op->bytes <= PIECE_BYTES)) {
    return run_local_op(j, op); /* the common case: nothing to progress, or a short copy */
  }
  uint32_t aux = op->type == MOECCL_OP_ROWS ? s->rows[op->peer].aux_buf : UINT32_MAX;
  int host = buf_mem(s, op->dst_buf).kind == MOECCL_MEM_HOST &&
             buf_mem(s, op->src_buf).kind == MOECCL_MEM_HOST &&
             (aux == UINT32_MAX || buf_mem(s, aux).kind == MOECCL_MEM_HOST);
  const moeccl_mem_ops_t* m = op_mem(s, op->dst_buf);
  void* dst = buf_at(s, op->dst_buf, op->dst_off);
  const void* src = buf_at(s, op->src_buf, op->src_off);
  if (host && op->type == MOECCL_OP_COPY && !(op->flags & (MOECCL_OPF_DIV | MOECCL_OPF_PRE_B)) &&
      dst != src && op->bytes > PIECE_BYTES)
    return copy_progressing(j, mask, m, dst, src, op->bytes);
  if (host && op->type == MOECCL_OP_ROWS) {
    const moeccl_rows_t* p = &s->rows[op->peer];
    if (p->nterms * moeccl_rows_row_bytes(p) > PIECE_BYTES) {
      const void* aux = p->aux_buf == UINT32_MAX ? NULL : buf_at(s, p->aux_buf, p->aux_off);
      return rows_progressing(j, mask, m, p, dst, src, aux);
    }
  }
  return run_local_op(j, op);
}

static int is_local(const moeccl_sched_op_t* op) {
  return op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE || op->type == MOECCL_OP_ROWS;
}

static moecclResult_t count_pending(moeccl_job_t* j);

/* Posts the network ops of job's current step and does its local ops. */
static moecclResult_t start_step(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  const moeccl_sched_t* s = j->sched;
  int begin = j->step ? s->step_end[j->step - 1] : 0, end = s->step_end[j->step];
  size_t staged = 0;
  const moeccl_req_t* last_add = NULL; /* the step's adding receives add in op order */
  j->pending = 0;
  j->passes = 0;
  unsigned mask = 0;  /* transports a pass may progress (PASS_CAPS) */
  unsigned moved = 0; /* transports whose post_now moved a message */
  for (int i = begin; i < end; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    if (is_local(op)) continue;
    if (op->peer == c->rank) {
      if (op->type == MOECCL_OP_RECV_REDUCE || (op->flags & MOECCL_OPF_ROWS))
        return moeccl_error(c, moecclInternalError,
                            "a reducing or consuming receive from self (rank %d)", c->rank);
      continue;
    }
    moeccl_mem_t mem = buf_mem(s, net_buf(op));
    int t = moeccl_peer_transport(c, op->peer, mem); /* prepare checked */
    if (t < 0)
      return moeccl_error(c, moecclInternalError, "no transport to rank %d for a %s message",
                          op->peer, moeccl_mem_name(mem));
    const moeccl_transport_ops_t* ops = c->transport_ops[t];
    /* A plain message of host memory the transport can move right now
     * needs no request (a small call's peers are often ready). */
    if (ops->post_now && mem.kind == MOECCL_MEM_HOST && !(op->flags & MOECCL_OPF_ROWS) &&
        (op->type == MOECCL_OP_SEND || op->type == MOECCL_OP_RECV)) {
      int send = op->type == MOECCL_OP_SEND, done = 0;
      void* buf = send ? buf_at(s, op->src_buf, op->src_off) : buf_at(s, op->dst_buf, op->dst_off);
      MOECCL_CHECK(ops->post_now(c->transport_state[t], op->peer, send, buf, op->bytes, &done));
      if (done) {
        moved |= 1u << t;
        continue;
      }
    }
    moeccl_req_t* r = &c->reqs[j->nreqs++];
    MOECCL_CHECK(make_req(j, op, t, r, &staged));
    if (is_adding(r)) r->rows_after = last_add, last_add = r;
    MOECCL_CHECK(ops->post(c->transport_state[t], r));
    j->pending++;
    if (!(ops->caps & PASS_CAPS)) mask |= 1u << t;
  }
  for (int t = 0; moved; t++, moved >>= 1)
    if ((moved & 1) && c->transport_ops[t]->flush)
      c->transport_ops[t]->flush(c->transport_state[t]);
  for (int i = begin; i < end; i++)
    if (is_local(&s->ops[i])) MOECCL_CHECK(local_op(j, mask, &s->ops[i]));
  if (s->self_ops) MOECCL_CHECK(run_self_ops(j, begin, end, mask));
  /* Requests the passes saw complete are counted (and finished) now. */
  return j->passes ? count_pending(j) : moecclSuccess;
}

/* Starts steps until one has network ops pending or the schedule is done. */
static moecclResult_t advance(moeccl_job_t* j) {
  while (j->pending == 0 && j->step < j->sched->nsteps) {
    j->first_req = j->nreqs = 0;
    MOECCL_CHECK(start_step(j));
    j->step++;
  }
  return moecclSuccess;
}

/* A staged reducing receive that completed: reduce it into place. */
static moecclResult_t finish_staged(moeccl_comm_t* c, moeccl_req_t* r) {
  void* dst = r->stage_dst;
  r->stage_dst = NULL;
  if (r->bytes != r->stage_bytes)
    return moeccl_comm_fail(c, moecclInvalidUsage,
                            "a reducing receive of %zu bytes from rank %d got a message of %zu "
                            "bytes (the ranks disagree on the call)",
                            r->stage_bytes, r->peer, r->bytes);
  /* the device table where either operand is device memory (mem.h) */
  moeccl_mem_t k = r->mem.kind != MOECCL_MEM_HOST ? r->mem : moeccl_mem_of(r->operand);
  const moeccl_mem_ops_t* m = moeccl_mem_ops(k);
  moecclResult_t rc = m->reduce(r->stage_red, dst, r->operand, r->buf,
                                r->bytes / r->stage_red->elem_size, r->red_flags);
  if (rc != moecclSuccess)
    return moeccl_comm_fail(c, rc, "a reduction in %s memory failed", m->name);
  return moecclSuccess;
}

/* A consumed receive the transport delivered into buf: run its program. */
static moecclResult_t finish_rows(moeccl_comm_t* c, moeccl_req_t* r) {
  const moeccl_rows_t* p = r->rows;
  r->rows = NULL;
  if (r->consumed) return moecclSuccess;
  if (r->bytes != r->stage_bytes)
    return moeccl_comm_fail(c, moecclInvalidUsage,
                            "a MoE receive of %zu bytes from rank %d got a message of %zu bytes "
                            "(the ranks disagree on the call)",
                            r->stage_bytes, r->peer, r->bytes);
  /* the device table where the message, or what the program writes or
   * reads besides (rows_device), is device memory */
  moeccl_mem_t k = r->mem;
  if (k.kind == MOECCL_MEM_HOST && r->rows_device) k = (moeccl_mem_t){MOECCL_MEM_DEVICE, 0};
  const moeccl_mem_ops_t* m = moeccl_mem_ops(k);
  moecclResult_t rc = m->rows(p, r->rows_dst, r->buf, r->rows_aux);
  if (rc != moecclSuccess) return moeccl_comm_fail(c, rc, "a row program in %s memory failed", m->name);
  return moecclSuccess;
}

/* Counts the current step's pending requests into j->pending, finishing
 * staged reducing receives and consumed receives that completed; an adding
 * receive's program waits for those of the adding receives before it. */
static moecclResult_t count_pending(moeccl_job_t* j) {
  int pending = 0, held = 0;
  for (int i = j->first_req; i < j->nreqs; i++) {
    moeccl_req_t* r = &j->comm->reqs[i];
    if (!r->done) {
      pending++;
      held |= is_adding(r);
      continue;
    }
    if (r->stage_dst) MOECCL_CHECK(finish_staged(j->comm, r));
    if (r->rows && !(held && is_adding(r))) MOECCL_CHECK(finish_rows(j->comm, r));
    if (i == j->first_req && !r->rows) j->first_req++;
  }
  j->pending = pending;
  return moecclSuccess;
}

static const moeccl_req_t* first_pending(const moeccl_job_t* j) {
  for (int i = j->first_req; i < j->nreqs; i++)
    if (!j->comm->reqs[i].done) return &j->comm->reqs[i];
  return NULL;
}

static moecclResult_t progress_all(moeccl_job_t* jobs, int njobs, int* progressed, int arm) {
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int t = 0; t < c->ntransports; t++) {
      if (arm) c->transport_ops[t]->arm(c->transport_state[t]);
      moecclResult_t rc = c->transport_ops[t]->progress(c->transport_state[t], progressed);
      if (rc != moecclSuccess) return rc;
    }
  }
  return moecclSuccess;
}

#define PROBES_PER_CHECK 4
#define PROBE_WAIT_MS 10 /* a refusal comes back in microseconds; silence is no verdict */

/* Network peers this rank waits on are probed through their liveness
 * sockets (bootstrap.c): a killed process is found at once even where the
 * provider says nothing.  A few peers per check, rotating, probed at once
 * within one PROBE_WAIT_MS, bounds the cost. */
static moecclResult_t probe_network_peers(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  moeccl_bootstrap_drain();
  int probes = 0, last = -1, who[PROBES_PER_CHECK];
  const moeccl_sockaddr_t* addrs[PROBES_PER_CHECK] = {0};
  for (int i = j->first_req; i < j->nreqs && probes < PROBES_PER_CHECK; i++) {
    const moeccl_req_t* r =
        &c->reqs[(j->first_req + (i - j->first_req + c->probe_cursor) % (j->nreqs - j->first_req))];
    const moeccl_peer_info_t* pi = &c->peers[r->peer];
    if (r->done || r->peer == last ||
        !(c->transport_ops[moeccl_peer_transport(c, r->peer, r->mem)]->caps &
          MOECCL_TRANSPORT_CAP_NETWORK) ||
        pi->alive_addr.sa.sa_family == 0)
      continue;
    last = r->peer;
    who[probes] = r->peer, addrs[probes++] = &pi->alive_addr;
  }
  c->probe_cursor += PROBES_PER_CHECK;
  int states[PROBES_PER_CHECK];
  moeccl_bootstrap_probe_many(addrs, probes, PROBE_WAIT_MS, states); /* at once */
  for (int k = 0; k < probes; k++) {
    const moeccl_peer_info_t* pi = &c->peers[who[k]];
    if (states[k] == 0)
      return moeccl_comm_peer_lost(
          c, who[k], "rank %d (pid %d on %s) died (its liveness socket refuses connections)",
          who[k], (int)pi->pid, pi->hostname);
  }
  return moecclSuccess;
}

static moecclResult_t check_peers(moeccl_job_t* jobs, int njobs) {
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int t = 0; t < c->ntransports; t++)
      MOECCL_CHECK(c->transport_ops[t]->check_peers(c->transport_state[t]));
    if (c->ntransports > 1 ||
        (c->ntransports == 1 && (c->transport_ops[0]->caps & MOECCL_TRANSPORT_CAP_NETWORK)))
      MOECCL_CHECK(probe_network_peers(&jobs[k]));
  }
  return moecclSuccess;
}

/* On a timeout, the step's requests as this rank sees them (a rare stall
 * is diagnosed from every rank's line). */
static void log_requests(const moeccl_job_t* j) {
  const moeccl_comm_t* c = j->comm;
  char line[1024];
  int o = snprintf(line, sizeof(line), "rank %d: timed out in step %d of %d, %d counted pending:",
                   c->rank, j->step, j->sched->nsteps, j->pending);
  for (int i = j->first_req; i < j->nreqs && o < (int)sizeof(line) - 96; i++) {
    const moeccl_req_t* r = &c->reqs[i];
    int t = moeccl_peer_transport(c, r->peer, r->mem);
    o += snprintf(line + o, sizeof(line) - (size_t)o, " [%s %s %zu B %s %d by %s%s]",
                  r->done ? "done" : "open", r->type == MOECCL_REQ_SEND ? "send" : "recv", r->bytes,
                  r->type == MOECCL_REQ_SEND ? "to" : "from", r->peer,
                  t >= 0 ? c->transport_ops[t]->name : "?", r->rows ? ", rows" : "");
  }
  WARN(NET, "%s", line);
}

static moecclResult_t timed_out(moeccl_job_t* jobs, int njobs) {
  for (int k = 0; k < njobs; k++) log_requests(&jobs[k]);
  for (int k = 0; k < njobs; k++) {
    const moeccl_req_t* r = first_pending(&jobs[k]);
    if (!r) continue;
    moeccl_comm_t* c = jobs[k].comm;
    return moeccl_comm_fail(
        c, moecclTimeout,
        "timed out after %.0f s without progress waiting to %s %zu bytes %s rank %d "
        "(MOECCL_TIMEOUT)",
        c->timeout, r->type == MOECCL_REQ_SEND ? "send" : "receive", r->bytes,
        r->type == MOECCL_REQ_SEND ? "to" : "from", r->peer);
  }
  /* Counted pending, none open: the executor's own accounting is wrong. */
  return moeccl_comm_fail(jobs[0].comm, moecclInternalError,
                          "timed out after %.0f s with requests counted pending but none open "
                          "(an executor bug; the log has the step's requests)",
                          jobs[0].comm->timeout);
}

static int spin_count;
static void read_spin_count(void) { spin_count = (int)moeccl_param_int("MOECCL_SPIN_COUNT"); }

static int spin_limit(const moeccl_comm_t* c) {
  /* Read once: a lookup by name costs more than a small call's whole plan. */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, read_spin_count);
  int spins = spin_count;
  /* More ranks than cores: a spinning rank steals the core its peer needs
   * (ranks of this machine, also those MOECCL_HOSTID puts on other nodes). */
  if (c->nmachine > c->machine_cores && spins > 1) spins = 1;
  return spins < 0 ? 0 : spins;
}

/* Sleeps in the one transport that holds all pending requests; with
 * several transports (or communicators) busy, naps briefly instead, since
 * one transport cannot wake on another's events. */
static void idle_wait(moeccl_job_t* jobs, int njobs) {
  moeccl_comm_t* owner = NULL;
  int transport = -1;
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int i = jobs[k].first_req; i < jobs[k].nreqs; i++) {
      if (c->reqs[i].done) continue;
      int t = moeccl_peer_transport(c, c->reqs[i].peer, c->reqs[i].mem);
      if (owner && (owner != c || transport != t)) {
        usleep(50);
        return;
      }
      owner = c, transport = t;
    }
  }
  if (owner) owner->transport_ops[transport]->wait(owner->transport_state[transport], 20000);
}

/* Waits for the jobs' current steps; starts the next steps as steps finish.
 * Idle waiting goes spin -> yield -> sleep: spinning answers fastest when
 * every rank has a core; yielding hands the core to a peer that has work
 * when ranks outnumber cores; after YIELD_WINDOW of nothing the rank sleeps
 * in the transport (futex) and burns no core. */
#define YIELD_WINDOW 0.002
static moecclResult_t drive(moeccl_job_t* jobs, int njobs) {
  int spins = 0, spin_max = spin_limit(jobs[0].comm);
  /* The clock is read only once the jobs wait: a call that never idles
   * (small, peers ready) does not pay for it. */
  double timeout = jobs[0].comm->timeout, now = 0;
  double idle_since = 0, next_check = 0;
  for (;;) {
    int active = 0, progressed = 0;
    for (int k = 0; k < njobs; k++) {
      MOECCL_CHECK(advance(&jobs[k]));
      active += jobs[k].pending > 0;
    }
    if (!active) return moecclSuccess;
    int sleepy = idle_since != 0 && now - idle_since > YIELD_WINDOW;
    MOECCL_CHECK(progress_all(jobs, njobs, &progressed, sleepy));
    if (progressed) {
      for (int k = 0; k < njobs; k++) MOECCL_CHECK(count_pending(&jobs[k]));
      spins = 0;
      idle_since = 0;
      continue;
    }
    if (++spins < spin_max) {
      cpu_relax();
      continue;
    }
    now = moeccl_now();
    if (next_check == 0) next_check = now + LIVENESS_PERIOD;
    if (idle_since == 0) idle_since = now;
    for (int k = 0; k < njobs; k++)
      if (jobs[k].comm->aborting)
        return moeccl_comm_fail(jobs[k].comm, moecclInvalidUsage,
                                "communicator aborted during an operation");
    if (now - idle_since > timeout) return timed_out(jobs, njobs);
    if (now >= next_check) {
      MOECCL_CHECK(check_peers(jobs, njobs));
      next_check = now + LIVENESS_PERIOD;
    }
    if (!sleepy) {
      sched_yield();
      continue;
    }
    idle_wait(jobs, njobs);
  }
}

/* Staging for reducing receives from transports that cannot reduce: the
 * most any step receives that way. */
static moecclResult_t reserve_staging(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  const moeccl_sched_t* s = j->sched;
  size_t most = 0;
  for (int step = 0, i = 0; step < s->nsteps; step++) {
    size_t bytes = 0;
    for (; i < s->step_end[step]; i++) {
      const moeccl_sched_op_t* op = &s->ops[i];
      if (op->type != MOECCL_OP_RECV_REDUCE || op->peer == c->rank) continue;
      int t = moeccl_peer_transport(c, op->peer, buf_mem(s, op->dst_buf));
      if (!reduces_in_place(c, t, op, s)) bytes += op->bytes;
    }
    if (bytes > most) most = bytes;
  }
  if (most <= c->staging_bytes) return moecclSuccess;
  void* p = realloc(c->staging, most);
  if (!p) return moeccl_error(c, moecclSystemError, "out of memory for %zu bytes of staging", most);
  c->staging = p;
  c->staging_bytes = most;
  return moecclSuccess;
}

/* The kernel op needs that the table of its buffers' kind lacks (NULL when
 * it has all; the host and device tables have every kernel, a new kind
 * may start with copies only). */
static const char* missing_kernel(const moeccl_sched_t* s, const moeccl_sched_op_t* op) {
  uint32_t b = op->type == MOECCL_OP_SEND ? op->src_buf : op->dst_buf;
  const moeccl_mem_ops_t* m = op_mem(s, b);
  const moeccl_mem_ops_t* src = op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE ||
                                        op->type == MOECCL_OP_RECV_REDUCE
                                    ? op_mem(s, op->src_buf)
                                    : m;
  int reduce = op->type == MOECCL_OP_REDUCE || op->type == MOECCL_OP_RECV_REDUCE;
  if (reduce && (!m->reduce || !src->reduce)) return "a reduction";
  if ((op->type == MOECCL_OP_ROWS || (op->flags & MOECCL_OPF_ROWS)) && !m->rows)
    return "the MoE row kernels";
  if (op->type == MOECCL_OP_COPY && (op->flags & MOECCL_OPF_DIV) && !m->postdiv)
    return "a division (integer average)";
  if (op->type == MOECCL_OP_COPY && (op->flags & MOECCL_OPF_PRE_B) && s->red && s->red->premul &&
      !m->scale)
    return "a scaling (pre-multiplied sum)";
  return NULL;
}

moecclResult_t moeccl_mem_check(moeccl_comm_t* c, moeccl_mem_t m, int peer, const char* what,
                                const void* buf) {
  int first = peer < 0 ? 0 : peer, last = peer < 0 ? c->nranks - 1 : peer;
  for (int p = first; p <= last; p++)
    if (p != c->rank && moeccl_peer_transport(c, p, m) < 0)
      return moeccl_error(c, moecclInvalidArgument,
                          "%s %p is %s memory, which no transport moves between rank %d and rank "
                          "%d (%s)%s",
                          what, buf, moeccl_mem_name(m), c->rank, p, c->peers[p].hostname,
                          m.kind == MOECCL_MEM_DEVICE ? ": device buffers work between the ranks "
                                                        "of one node in this build"
                                                      : "");
  if (moeccl_mem_ops(m)) return moecclSuccess;
  return moeccl_error(c, moecclInvalidArgument,
                      "%s %p is %s memory (device %d), which this build cannot operate on yet",
                      what, buf, moeccl_mem_name(m), m.device);
}

/* Every buffer's kind has a local-work table, every op has the kernels it
 * needs for its buffers' kind, and a transport moves each message's kind
 * to its peer (moeccl_mem_check, as at the entry points): checked before
 * anything is posted, so a call refused here sends nothing. */
static moecclResult_t check_kinds(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  const moeccl_sched_t* s = j->sched;
  int all_host = 1;
  for (int b = 0; b < s->nbufs; b++) {
    all_host &= buf_mem(s, (uint32_t)b).kind == MOECCL_MEM_HOST;
    MOECCL_CHECK(moeccl_mem_check(c, buf_mem(s, (uint32_t)b), c->rank, "a buffer of the schedule",
                                  s->bufs[b]));
  }
  /* host buffers only (every call today): host has its table and every
   * transport moves it, so the per-op pass is not on that path */
  if (all_host) return moecclSuccess;
  for (int i = 0; i < s->nops; i++) {
    const moeccl_sched_op_t* op = &s->ops[i];
    const char* kernel = missing_kernel(s, op);
    if (kernel)
      return moeccl_error(c, moecclInvalidArgument,
                          "this call needs %s on %s memory, which this build cannot do yet",
                          kernel, moeccl_mem_name(buf_mem(s, op->dst_buf)));
    /* local ops of mixed kinds run by the device table (work_mem) */
    if (op->type == MOECCL_OP_COPY || op->type == MOECCL_OP_REDUCE || op->type == MOECCL_OP_ROWS)
      continue;
    if (op->peer == c->rank) continue;
    MOECCL_CHECK(moeccl_mem_check(c, buf_mem(s, net_buf(op)), op->peer, "a message's buffer",
                                  s->bufs[net_buf(op)]));
  }
  return moecclSuccess;
}

/* The communicator's device scratch, for host-run and lowered schedules
 * alike: grown, never freed while the communicator lives (work a lowered
 * call queued on some stream may still use the old one; comm.c frees them
 * all after the transports drained). */
static moecclResult_t dev_scratch(moeccl_comm_t* c, moeccl_sched_t* s) {
  size_t need = s->scratch_bytes;
  if (need > c->dev_scratch_bytes) {
    if (c->dev_scratch) {
      void** old = realloc(c->dev_scratch_old, sizeof(void*) * (size_t)(c->ndev_scratch_old + 1));
      if (!old) return moeccl_error(c, moecclSystemError, "out of memory");
      c->dev_scratch_old = old;
      old[c->ndev_scratch_old++] = c->dev_scratch;
    }
    c->dev_scratch = NULL, c->dev_scratch_bytes = 0;
    moeccl_mem_t m = buf_mem(s, (uint32_t)s->scratch_buf);
    moecclResult_t rc = moeccl_device()->alloc(&c->dev_scratch, need, m.device);
    if (rc != moecclSuccess)
      return moeccl_error(c, rc, "no device memory for %zu bytes of scratch on device %d", need,
                          m.device);
    c->dev_scratch_bytes = need;
  }
  s->bufs[s->scratch_buf] = c->dev_scratch;
  return moecclSuccess;
}

/* The schedule's scratch buffer, of its kind (the receive buffer's): the
 * communicator's host scratch, or its device scratch for calls on device
 * buffers (which peers import like any device buffer).  Both only grow. */
static moecclResult_t provide_scratch(moeccl_comm_t* c, moeccl_sched_t* s) {
  moeccl_mem_t m = buf_mem(s, (uint32_t)s->scratch_buf);
  size_t need = s->scratch_bytes;
  if (m.kind == MOECCL_MEM_DEVICE) return dev_scratch(c, s);
  if (need > c->scratch_bytes) {
    void* p = realloc(c->scratch, need);
    if (!p) return moeccl_error(c, moecclSystemError, "out of memory for %zu bytes of scratch", need);
    c->scratch = p;
    c->scratch_bytes = need;
  }
  s->bufs[s->scratch_buf] = c->scratch;
  return moecclSuccess;
}

static moecclResult_t prepare(moeccl_job_t* j) {
  moeccl_comm_t* c = j->comm;
  if (c->async_error != moecclSuccess)
    return moeccl_error(c, c->async_error,
                        "communicator is broken by an earlier error (%s); abort it", c->fail_text);
  moeccl_sched_t* s = j->sched;
  MOECCL_CHECK(reserve_reqs(c, s->nops));
  if (s->scratch_buf >= 0) MOECCL_CHECK(provide_scratch(c, s));
  /* A repeated call's unchanged schedule passed the rest before (the
   * staging and the kinds' tables only grow or stay). */
  if (!s->prepared) {
    MOECCL_CHECK(check_kinds(j));
    MOECCL_CHECK(reserve_staging(j));
    size_t written = 0; /* bytes this rank writes: receives and local copies */
    s->self_ops = 0;
    for (int i = 0; i < s->nops; i++) {
      if (s->ops[i].type != MOECCL_OP_SEND) written += s->ops[i].bytes;
      s->self_ops |= !is_local(&s->ops[i]) && s->ops[i].peer == c->rank;
    }
    s->stream_copy = moeccl_copy_streaming(written);
    s->prepared = 1;
  }
  j->stream_copy = s->stream_copy;
  j->step = j->first_req = j->nreqs = j->pending = 0;
  return moecclSuccess;
}

static void cancel(moeccl_job_t* jobs, int njobs, moecclResult_t rc) {
  for (int k = 0; k < njobs; k++) {
    moeccl_comm_t* c = jobs[k].comm;
    for (int t = 0; t < c->ntransports; t++) c->transport_ops[t]->cancel_all(c->transport_state[t]);
    if (c->async_error == moecclSuccess)
      moeccl_comm_fail(c, rc, "operation failed: %s", moecclGetErrorString(rc));
    if (c->failed_peer >= 0 && !c->abort_notified) {
      c->abort_notified = 1;
      moeccl_transports_notify_abort(c, c->failed_peer);
    }
  }
}

moecclResult_t moeccl_executor_run(moeccl_job_t* jobs, int njobs) {
  moecclResult_t rc = moecclSuccess;
  /* A job that cannot start (broken communicator, no memory) fails them
   * all: their peers have started and would wait for this rank. */
  for (int k = 0; k < njobs && rc == moecclSuccess; k++) rc = prepare(&jobs[k]);
  if (rc == moecclSuccess) rc = drive(jobs, njobs);
  if (rc != moecclSuccess) cancel(jobs, njobs, rc);
  return rc;
}

/* ---- device schedules lowered onto a stream -------------------------------- */

/* The stream transport every peer op of s goes through (-1: s has none),
 * or -2 when s cannot be lowered: a buffer that is not device memory, an op
 * other than a plain SEND, RECV or COPY, or peers of different (or no)
 * stream transports. */
static int lower_transport(const moeccl_comm_t* c, const moeccl_sched_t* s) {
  int t = -1;
  for (int b = 0; b < s->nbufs; b++)
    if (b != s->scratch_buf && s->bufs[b] && buf_mem(s, (uint32_t)b).kind != MOECCL_MEM_DEVICE)
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
      if (op->bytes && buf_at(s, op->dst_buf, op->dst_off) != buf_at(s, op->src_buf, op->src_off))
        MOECCL_CHECK(d->copy_async(buf_at(s, op->dst_buf, op->dst_off),
                                   buf_at(s, op->src_buf, op->src_off), op->bytes, stream));
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
      MOECCL_CHECK(d->copy_async(buf_at(s, r->dst_buf, r->dst_off),
                                 buf_at(s, op->src_buf, op->src_off), bytes, stream));
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
  if (s->scratch_buf >= 0 && s->scratch_bytes) MOECCL_CHECK(dev_scratch(c, s));
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
